"""Damaged run outputs for tests: what a failing disk or an interrupted copy leaves behind."""

import os


def files(directory):
  """{relative path: bytes} of every file under `directory`, to show nothing was changed."""
  contents = {}
  for root, _, names in os.walk(directory):
    for name in names:
      with open(os.path.join(root, name), 'rb') as f:
        contents[os.path.relpath(os.path.join(root, name), directory)] = f.read()
  return contents


def damage_latest_checkpoint(checkpoint_dir, how='truncate'):
  """Damages the latest `program_state_N` folder of `checkpoint_dir` and returns its path.

  Args:
    checkpoint_dir: a program state manager's folder: `state.npz` files
      (`fedasr_tff.program.npz_state`) or TFF's SavedModels.
    how: 'truncate' (the first half of the file kept), 'flip' (a byte in the middle of the
      file inverted) or anything else (the file removed). The file is `state.npz`, or a
      SavedModel's `variables.data` (`saved_model.pb` when removed).
  """
  latest = max(int(n.rsplit('_', 1)[1]) for n in os.listdir(checkpoint_dir)
               if n.startswith('program_state_'))
  folder = os.path.join(checkpoint_dir, f'program_state_{latest}')
  data = os.path.join(folder, 'state.npz')
  if not os.path.exists(data):
    data = os.path.join(folder, 'variables', 'variables.data-00000-of-00001')
  with open(data, 'rb') as f:
    whole = f.read()
  middle = len(whole) // 2
  if how == 'truncate':
    with open(data, 'wb') as f:
      f.write(whole[:middle])
  elif how == 'flip':
    with open(data, 'wb') as f:
      f.write(whole[:middle] + bytes([whole[middle] ^ 0xff]) + whole[middle + 1:])
  elif data.endswith('state.npz'):
    os.remove(data)
  else:
    os.remove(os.path.join(folder, 'saved_model.pb'))
  return folder
