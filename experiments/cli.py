"""What every binary does on its way in and out of the command line.

A refused command (`app.UsageError`: a bad flag value, an impossible combination, a file that
cannot be read) prints one line naming the cause, not absl's usage text. The binaries import
nothing but absl through this module, so the small ones (`make_corpus`, `privacy_table`) stay
small.
"""

import functools
import os
import sys
from typing import Callable
from typing import List
from typing import Optional
from typing import Sequence

from absl import app


def program_name() -> str:
  """The binary's name (`train_federated` for `python -m experiments.train_federated`), for
  the lines it prints about itself."""
  return os.path.splitext(os.path.basename(sys.argv[0]))[0]


def usage_error_line(error: app.UsageError) -> str:
  """The one line a refused command prints: the binary, the cause, and where help is.

  A message that spans lines (one quoting a file's text, say) is joined into one.

  Args:
    error: the refusal.

  Returns:
    The line, without a newline.
  """
  message = ' '.join(str(error).split())
  end = '' if message.endswith(('.', '!', '?')) else '.'
  return f'{program_name()}: {message}{end} Try --helpshort.'


def check_output(flag: str, path: str, *, folder: bool = True) -> None:
  """Refuses an output path the run could not write, before it reads or writes anything.

  A run that fails only when it writes its results (after minutes of training) loses them; so a
  binary checks each output flag first: the path must be a folder (`folder`) or a file, or not
  exist yet under a writable folder. Nothing is created.

  Args:
    flag: the flag's name, without dashes.
    path: its value.
    folder: whether the path is a folder (else a file).

  Raises:
    app.UsageError: naming the flag, the path and what is in the way.
  """
  where = f'--{flag} {path!r}'
  if os.path.exists(path):
    if folder != os.path.isdir(path):
      raise app.UsageError(f'{where} is a {"file" if folder else "folder"}, not a '
                           f'{"folder" if folder else "file"}.')
    writable = path
  else:
    writable = os.path.dirname(os.path.abspath(path))
    while not os.path.exists(writable):
      writable = os.path.dirname(writable)
    if not os.path.isdir(writable):
      raise app.UsageError(f'{where}: {writable!r} is a file, so no folder can be made in it.')
  if not os.access(writable, os.W_OK):
    raise app.UsageError(f'{where}: {writable!r} is not writable.')


def run(main: Callable[[List[str]], None], argv: Optional[Sequence[str]] = None) -> None:
  """`app.run(main)`, but a refusal (`app.UsageError`) prints one line, not the usage text.

  absl prints the binary's docstring and flags (about 35 lines) before a usage error's message;
  the message, which names the flag, file or line at fault, is what the user needs, and
  `--helpshort` gives the rest. The exit status is the error's (1 unless it says otherwise).
  Flag-parse errors stay as absl prints them (the error, and where help is).

  Args:
    main: the binary's main.
    argv: the command line; default `sys.argv`.
  """

  @functools.wraps(main)
  def main_refusing_in_one_line(args):
    try:
      return main(args)
    except app.UsageError as error:
      sys.stdout.flush()
      print(usage_error_line(error), file=sys.stderr)
      sys.exit(error.exitcode)

  app.run(main_refusing_in_one_line, argv=None if argv is None else list(argv))
