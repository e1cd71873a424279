"""What a user can get wrong, as exceptions: the bottom of the import graph.

Every failure caused by the user's flags, files, handles, storage or cluster
is a `UserError`. Each command's boundary (`trainer.cli.run`) prints it as
one line, `error: <message>`, and exits with its `exit_code`: 2, or 75 for
a preemption (a checkpoint was saved; rerun to resume). Any other exception
is a bug of ours and keeps its traceback. This module imports nothing.
"""

EXIT_BAD_INPUT = 2
# EX_TEMPFAIL in sysexits.h: "temporary failure, try again".
EXIT_PREEMPTED = 75


class UserError(Exception):
  """A failure the user can fix; the message names what and how."""

  exit_code = EXIT_BAD_INPUT
  prefix = "error"


class ConfigError(UserError, ValueError):
  """A flag value is invalid; the message names the flag and what is valid."""


class DataError(UserError, ValueError):
  """A data source is missing, unreadable or of the wrong format."""


class HandleError(UserError, ValueError):
  """A model handle cannot be loaded or does not have the expected API."""


class StrategyError(UserError, RuntimeError):
  """The requested devices cannot be reached or do not exist."""


class TrainingError(UserError, RuntimeError):
  """Training cannot go on (empty data, non-finite loss, ...)."""


class CheckpointError(UserError, RuntimeError):
  """Checkpoints exist but none is intact, or one asked for does not."""


class ExportError(UserError, ValueError):
  """Nothing to export (no checkpoint, no config) or a bad path."""


class ConversionError(UserError, ValueError):
  """A Hugging Face checkpoint folder cannot be converted."""


class Preempted(UserError):
  """SIGTERM/SIGINT arrived; a checkpoint at the current step was saved."""

  exit_code = EXIT_PREEMPTED
  prefix = "preempted"


# Lines TensorFlow wraps around the message of an error raised in a graph.
_FRAMING = ("Graph execution error", "Detected at node", "[[",
            "<stack traces unavailable>")


def first_line(exc, limit=300):
  """The first informative line of an exception's message (TensorFlow's
  run to dozens of lines, framed by "Graph execution error:" and the node
  that raised), at most `limit` characters; the type's name if none."""
  for line in str(exc).strip().splitlines():
    line = line.strip()
    if line and not line.startswith(_FRAMING):
      return line[:limit]
  return type(exc).__name__
