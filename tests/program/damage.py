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
    checkpoint_dir: a `tff.program.FileProgramStateManager` folder.
    how: 'truncate' (half of `variables.data`), 'flip' (its last byte) or anything else (no
      `saved_model.pb`).
  """
  latest = max(int(n.rsplit('_', 1)[1]) for n in os.listdir(checkpoint_dir)
               if n.startswith('program_state_'))
  folder = os.path.join(checkpoint_dir, f'program_state_{latest}')
  data = os.path.join(folder, 'variables', 'variables.data-00000-of-00001')
  with open(data, 'rb') as f:
    whole = f.read()
  if how == 'truncate':
    with open(data, 'wb') as f:
      f.write(whole[:len(whole) // 2])
  elif how == 'flip':
    with open(data, 'wb') as f:
      f.write(whole[:-1] + bytes([whole[-1] ^ 0xff]))
  else:
    os.remove(os.path.join(folder, 'saved_model.pb'))
  return folder
