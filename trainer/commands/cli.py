"""The command line shared by every command: flags written once, one boundary.

Every `python -m trainer.X` command follows one convention (`Command`): its
flags are Config fields (`define_config_flags`, from each field's default,
help and choices in `trainer.foundation.config`) or command flags written once
here (`COMMAND_FLAGS`), and its `main(flag_values)` turns them into values
and calls a library function that takes values. `run(command)` is each
command's entry and its error boundary: it checks the TensorFlow stack
before anything imports TensorFlow, and turns a `UserError` (or a failure of
the user's storage, network or cluster that TensorFlow or Python raised:
`errors.translate`) into one line on stderr and its exit code. `invoke`
runs a command in this process, behind the same boundary, for tests and
drills. Nothing here imports TensorFlow, so `--help` stays fast.
"""

import dataclasses
import os
import sys

from absl import app
from absl import flags

from trainer.foundation import config as config_lib
from trainer.foundation import errors
from trainer.runtime import logs
from trainer.runtime import stack

FLAGS = flags.FLAGS
SKIP_STACK_CHECK = "BERT_TRAINER_SKIP_STACK_CHECK"

# The flags of commands that are not Config fields: (kind, default, help),
# each written once whichever commands take it.
COMMAND_FLAGS = dict(
    export_dir=("string", "", "An export of a trained classifier "
                "(RUN/export/<step>, from training or trainer.export)."),
    checkpoint=("string", "", "With --model_dir: the checkpoint to read "
                "(RUN/checkpoints/ckpt-N; '' = the best, else the newest)."),
    input_file=("string", "", "predict: one text per line, or a CSV/TSV read "
                "by --text_column; evaluate: a labelled file scored whole "
                "(no carve), read with the data flags."),
    split=("string", "", "A split: with --tfds_name any split of the "
           "dataset (test, train[:10%]), read whole; evaluate's default is "
           "test if the data has one, else validation (carved as the run "
           "carved it); predict's, test."),
    output_file=("string", "", "Where to write ('' = stdout); predict "
                 "writes JSON lines, or CSV for a .csv name."),
    tensorboard_dir=("string", "", "evaluate: also write the confusion "
                     "matrix image and the PR curve (two classes) here; a "
                     "tagging model's eval/f1, ..., eval/loss."),
    text=("multi_string", [], "A text to classify (repeatable)."),
    text_pair=("multi_string", [], "A pair model's second text, one per "
               "--text."),
    doctor_rows=("integer", 1000, "Rows of each split to read (the "
                 "training ones also measured for --shared_rows)."),
    hf_dir=("string", "", "A Hugging Face BERT checkpoint folder (local or "
            "gs://): config.json, model.safetensors, vocab.txt."),
    output_dir=("string", "", "Where to write: convert_hf, the conversion "
                "(encoder/, preprocessor/, conversion.json); export "
                "--format=huggingface, the transformers folder (new or "
                "empty)."),
    format=("string", "savedmodel", "trainer.export: savedmodel (a "
            "SavedModel serving raw strings, RUN/export/<step>) or "
            "huggingface (a transformers folder, written to --output_dir)."),
)


@dataclasses.dataclass(frozen=True)
class Command:
  """A `python -m trainer.X` command: `name` (for its lock and messages),
  the Config fields and command flags it takes (`config_flags` None: all
  Config fields), the flags it requires, per-command defaults of Config
  flags, and `main(flag_values)`."""

  name: str
  main: object
  config_flags: tuple | None = ()
  command_flags: tuple = ()
  required: tuple = ()
  defaults: dict = dataclasses.field(default_factory=dict)
  check_stack: bool = True

  def define(self, flag_values=FLAGS):
    """Defines its flags (a required one without a default)."""
    defaults = dict(self.defaults, **dict.fromkeys(self.required))
    define_config_flags(self.config_flags, flag_values, defaults)
    for name in self.command_flags:
      _define_command_flag(name, flag_values, defaults)
    for name in self.required:
      flags.mark_flag_as_required(name, flag_values=flag_values)


def _define(name, field, flag_values, default):
  meta = field.metadata
  help_text = meta["help"]
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


def define_config_flags(names=None, flag_values=FLAGS, defaults=None):
  """Defines the flags of the Config fields `names` (default: all), with
  `defaults` (a command's own) where given."""
  defaults = defaults or {}
  for name, field in config_lib.FIELDS.items():
    if names is None or name in names:
      _define(name, field, flag_values, defaults.get(name, field.default))


def _define_command_flag(name, flag_values, defaults):
  kind, default, help_text = COMMAND_FLAGS[name]
  define = getattr(flags, f"DEFINE_{kind}")
  define(name, defaults.get(name, default), help_text, flag_values=flag_values)


def config_from_flags(flag_values=FLAGS, complete=True):
  """Parsed flags -> a Config, completed (`config.complete`: the flags
  given are the user's) unless `complete` is False (a command that may
  take the unset flags from a run's config.json completes them itself)."""
  values = {
      name: flag_values[name].value
      for name in config_lib.FIELDS
      if name in flag_values
  }
  c = config_lib.Config(**values)
  if not complete:
    return c
  return config_lib.complete(c, given(flag_values, list(values)))


def given(flag_values, names=None):
  """The names of the flags the user set (of `names`, default all)."""
  return [
      n for n in (names or list(flag_values))
      if n in flag_values and flag_values[n].present
  ]


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


def _boundary(command, flag_values, quiet=True):
  """`command.main(flag_values)` behind the boundary: stack check, then a
  UserError -> one line and its exit code (returned; 0 when it ends)."""
  problem = command.check_stack and stack_problem()
  if problem:
    return report(errors.UserError(problem))
  if quiet:
    logs.end_startup()
    logs.quiet_python(flag_values["verbosity"].value if "verbosity" in
                      flag_values else 0)
  try:
    command.main(flag_values)
  except Exception as e:  # pylint: disable=broad-except
    user_error = errors.translate(e)
    if user_error is None:
      raise  # a bug of ours: the traceback is wanted
    return report(user_error)
  return 0


def _parse(flag_values, argv):
  """absl's flag parsing, with a bad flag as one line and exit code 2 (absl
  prints a few lines and exits with 1)."""
  try:
    return flag_values(argv)
  except flags.Error as e:
    sys.exit(report(errors.ConfigError(f"{e}; --helpfull lists the flags")))


def run(command):
  """Runs `command` as the program (`python -m trainer.X`), with absl."""
  command.define(FLAGS)

  def main(argv):
    if len(argv) > 1:
      raise app.UsageError(f"unexpected arguments: {argv[1:]}")
    code = _boundary(command, FLAGS)
    if code:
      sys.exit(code)

  app.run(main, flags_parser=lambda argv: _parse(FLAGS, argv))


def invoke(command, args):
  """Runs `command` with the command-line arguments `args` in this process,
  behind the same boundary as `run` (flags of its own, no absl app, no log
  set-up); returns the exit code. Its one-line errors go to stderr."""
  flag_values = flags.FlagValues()
  command.define(flag_values)
  try:
    rest = _parse(flag_values, [command.name] + list(args))
  except SystemExit as e:
    return e.code
  if len(rest) > 1:
    return report(errors.ConfigError(f"unexpected arguments: {rest[1:]}"))
  try:
    return _boundary(command, flag_values, quiet=False)
  except SystemExit as e:  # a command's own exit code (doctor's 1)
    return e.code
