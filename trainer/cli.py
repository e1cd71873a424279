"""The command line shared by every command: flags from Config, one boundary.

`define_config_flags()` makes one absl flag per `Config` field, from the
field's default, help and choices (`trainer.config`); `config_from_flags()`
turns the parsed flags into a completed Config (the flags given are the
user's; see `config.complete`). `run(main)` is each command's entry and its
error boundary: it checks the TensorFlow stack before anything imports
TensorFlow, and turns a `UserError` (or a failure of the user's storage,
network or cluster that TensorFlow or Python raised: `errors.translate`)
into one line on stderr and its exit code. Nothing here imports
TensorFlow, so `--help` stays fast.
"""

import os
import sys

from absl import app
from absl import flags

from trainer.base import config as config_lib
from trainer.base import errors
from trainer.base import logs
from trainer.base import stack

FLAGS = flags.FLAGS
SKIP_STACK_CHECK = "BERT_TRAINER_SKIP_STACK_CHECK"


def _define(name, field, flag_values):
  meta = field.metadata
  default, help_text = field.default, meta["help"]
  if meta["choices"]:
    flags.DEFINE_enum(
        name, default, meta["choices"], help_text, flag_values=flag_values)
  elif field.type in (bool, bool | None):
    flags.DEFINE_bool(name, default, help_text, flag_values=flag_values)
  elif field.type is int:
    flags.DEFINE_integer(name, default, help_text, flag_values=flag_values)
  elif field.type is float:
    flags.DEFINE_float(name, default, help_text, flag_values=flag_values)
  else:
    flags.DEFINE_string(name, default, help_text, flag_values=flag_values)


def define_config_flags(names=None, flag_values=FLAGS):
  """Defines the flags of the Config fields `names` (default: all)."""
  for name, field in config_lib.FIELDS.items():
    if names is None or name in names:
      _define(name, field, flag_values)


def config_from_flags(flag_values=FLAGS):
  """Parsed flags -> a completed Config (the flags given are the user's)."""
  values = {
      name: flag_values[name].value
      for name in config_lib.FIELDS
      if name in flag_values
  }
  given = {name for name in values if flag_values[name].present}
  return config_lib.complete(config_lib.Config(**values), given)


def stack_problem():
  """The first problem of the installed TensorFlow stack, or None."""
  if os.environ.get(SKIP_STACK_CHECK):
    return None
  problems = stack.problems()
  if not problems:
    return None
  return f"{problems[0]} ({SKIP_STACK_CHECK}=1 skips this check)"


def report(e):
  """Prints a UserError as its one line; returns its exit code."""
  print(f"{e.prefix}: {e}", file=sys.stderr, flush=True)
  return e.exit_code


def guarded(main, check_stack=True):
  """`main` behind the boundary: stack check, then UserError -> one line."""

  def wrapped(argv):
    if len(argv) > 1:
      raise app.UsageError(f"unexpected arguments: {argv[1:]}")
    problem = check_stack and stack_problem()
    if problem:
      sys.exit(report(errors.UserError(problem)))
    logs.end_startup()
    logs.quiet_python(FLAGS.verbosity)
    try:
      return main(argv)
    except Exception as e:  # pylint: disable=broad-except
      user_error = errors.translate(e)
      if user_error is None:
        raise  # a bug of ours: the traceback is wanted
      sys.exit(report(user_error))

  return wrapped


def parse_flags(argv):
  """absl's flag parsing, with a bad flag as one line and exit code 2 (absl
  prints a few lines and exits with 1)."""
  try:
    return FLAGS(argv)
  except flags.Error as e:
    sys.exit(report(errors.ConfigError(f"{e}; --helpfull lists the flags")))


def run(main, check_stack=True):
  """Runs a command's `main(argv)` with absl, behind the boundary
  (`check_stack=False`: the command reports the stack itself)."""
  app.run(guarded(main, check_stack), flags_parser=parse_flags)
