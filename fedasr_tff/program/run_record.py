"""What makes a resumed run the same run: `config.json` and the clients' fingerprint.

A run's output directory holds `config.json` (its configuration, public) and, owner-only in
the checkpoints, `clients.json`: a hash of the training clients. The hash is unsalted, so
anyone holding the corpus could test leave-one-out subsets against it and learn who trained;
it therefore stays with the secrets and out of `config.json` (docs/privacy.md, "Keep
checkpoints private").

Started again in the same directory, a run resumes only if every configuration field marked
`fingerprint` (`fields.field`), every extra check of the task (the seed model, for speech) and
the clients' fingerprint are unchanged; otherwise it is refused, naming what differs.
"""

import dataclasses
import json
import os
from typing import Any
from typing import Dict
from typing import Mapping
from typing import Optional
from typing import Tuple

from fedasr_tff import private_files
from fedasr_tff.program import fields

CLIENTS_KEY, CLIENTS_FILE = 'clients_sha256', os.path.join('checkpoints', 'clients.json')
CONFIG_FILE = 'config.json'


@dataclasses.dataclass(frozen=True)
class RunRecord:
  """What `config.json` and `clients.json` hold for a run, and how a resume is compared.

  Attributes:
    config: the run's configuration, a (possibly nested) dataclass of `fields.field`s.
    clients_digest: the fingerprint of the training clients (kept owner-only).
    format: the layout version of `config.json`; a directory of another version is refused.
    format_note: what this version records that the previous one did not, for the refusal.
    checks: extra top-level entries of `config.json` a resume must match, by key, each with
      (value, what to call it in the refusal), e.g. the seed model's hash.
    clients_description: what to call the clients in the refusal.
    kind: what kind of run it is (for example "federated speech training"), saved so that a
      directory of another kind of run is refused as such; empty: not saved.
  """
  config: Any
  clients_digest: str
  format: int
  format_note: str = ''
  checks: Mapping[str, Tuple[Any, str]] = dataclasses.field(default_factory=dict)
  clients_description: str = 'the training clients'
  kind: str = ''

  def saved_form(self) -> Dict[str, Any]:
    """The content of `config.json`: no clients' fingerprint, no secret."""
    return {'format': self.format, 'config': dataclasses.asdict(self.config),
            **({'kind': self.kind} if self.kind else {}),
            **{key: value for key, (value, _) in self.checks.items()}}


def write_clients_fingerprint(output_dir: str, digest: str) -> None:
  """Writes the clients' fingerprint `digest` to `CLIENTS_FILE` under `output_dir`, owner-only.

  Args:
    output_dir: the run's output directory; its `checkpoints/` folder is made owner-only.
    digest: the fingerprint of the training clients.
  """
  private_files.make_private_directory(os.path.dirname(os.path.join(output_dir, CLIENTS_FILE)))
  with private_files.open_private(os.path.join(output_dir, CLIENTS_FILE)) as f:
    json.dump({CLIENTS_KEY: digest}, f)


def clients_differ(output_dir: str, digest: str, saved_config: Dict[str, Any]) -> bool:
  """Whether the run in `output_dir` trained on other clients than those of `digest`.

  A run written before the fingerprint moved to `CLIENTS_FILE` has it in `config.json`: it is
  compared there and, if equal, moved (written to `CLIENTS_FILE`, removed from `config.json`).

  Args:
    output_dir: the run's output directory.
    digest: the fingerprint of the clients of the run being started.
    saved_config: the content of the directory's `config.json`.

  Returns:
    True if the saved run's clients differ.

  Raises:
    ValueError: if the saved run has no fingerprint at all.
  """
  path = os.path.join(output_dir, CLIENTS_FILE)
  if os.path.exists(path):
    with open(path) as f:
      return json.load(f).get(CLIENTS_KEY) != digest
  if CLIENTS_KEY not in saved_config:
    raise ValueError(f'{output_dir!r} holds a run without the fingerprint of its training '
                     f'clients ({CLIENTS_FILE}), so it cannot be checked for a resume. Use a new '
                     'output directory.')
  if saved_config[CLIENTS_KEY] != digest:
    return True
  write_clients_fingerprint(output_dir, digest)
  _write_config(output_dir, {k: v for k, v in saved_config.items() if k != CLIENTS_KEY})
  return False


def check_or_write(output_dir: str, record: RunRecord) -> None:
  """Refuses an `output_dir` holding a different run; writes the record of a new one.

  Args:
    output_dir: the run's output directory (created if missing).
    record: the run being started.

  Raises:
    ValueError: as `check`.
  """
  if check(output_dir, record):
    return
  os.makedirs(output_dir, exist_ok=True)
  # The clients' fingerprint first: a config.json always has its fingerprint beside it.
  write_clients_fingerprint(output_dir, record.clients_digest)
  _write_config(output_dir, record.saved_form())


def check(output_dir: str, record: RunRecord) -> bool:
  """Refuses an `output_dir` holding a different run, writing nothing (but moving an old run's
  clients' fingerprint, `clients_differ`): a run checks this before it spends time building.

  Args:
    output_dir: the run's output directory.
    record: the run being started.

  Returns:
    Whether `output_dir` holds the record of this run (False: of no run).

  Raises:
    ValueError: naming every flag (and extra check) that differs from the saved run, or saying
      that the directory holds another kind of run or was written by a version whose
      `config.json` cannot be compared.
  """
  path = os.path.join(output_dir, CONFIG_FILE)
  if not os.path.exists(path):
    return False
  with open(path) as f:
    saved = json.load(f)
  # A run written before kinds were saved has none: its format tells it apart (below).
  if saved.get('kind', record.kind) != record.kind:
    raise ValueError(f'{output_dir!r} holds a {saved["kind"]} run, not a {record.kind} run: '
                     'use a new output directory.')
  if saved.get('format') != record.format:
    note = f': {record.format_note}' if record.format_note else ''
    raise ValueError(f'{output_dir!r} holds a run written by an older fedasr-tff (its '
                     f'config.json has format {saved.get("format")!r}, this version writes '
                     f'{record.format}{note}), which this version cannot resume. Use a new '
                     'output directory.')
  cls = type(record.config)
  # Compared as JSON, as saved (tuples become lists).
  wanted = _resumed_fields(cls, json.loads(json.dumps(dataclasses.asdict(record.config))))
  have = _resumed_fields(cls, saved['config'])
  changed = [f'--{name}' for name in wanted if have.get(name) != wanted[name]]
  if clients_differ(output_dir, record.clients_digest, saved):
    changed.append(record.clients_description)
  changed += [description for key, (value, description) in record.checks.items()
              if saved.get(key) != value]
  if changed:
    raise ValueError(f'{output_dir!r} holds a run with a different configuration ('
                     f'{", ".join(changed)} differ). Use a new output directory, or the same '
                     'settings to resume.')
  return True


def _resumed_fields(cls, saved: Mapping[str, Any]) -> Dict[str, Optional[Any]]:
  """The fields a resumed run must share, by flag name, from a saved (grouped or flat)
  configuration; a field added after the run was saved has its default there."""
  flat = {}
  for name, value in saved.items():
    if isinstance(value, dict):   # A sub-configuration's group.
      flat.update(value)
    else:
      flat[name] = value
  return {name: flat.get(name, f.default)
          for name, f in fields.config_fields(cls).items()
          if f.metadata.get(fields.FINGERPRINT, True)}


def _write_config(output_dir: str, values: Dict[str, Any]) -> None:
  """Writes config.json atomically: a crash leaves the old or the new one."""
  path = os.path.join(output_dir, CONFIG_FILE)
  with private_files.writing(path, path + '.partial'), open(path + '.partial', 'w') as f:
    json.dump(values, f, indent=2, sort_keys=True)
  os.replace(path + '.partial', path)
