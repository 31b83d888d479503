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
