"""What a user can get wrong, as exceptions: the bottom of the import graph.

Every failure caused by the user's flags, files, handles, storage or cluster
is a `UserError`. Each command's boundary (`trainer.cli.run`) prints it as
one line, `error: <message>`, and exits with its `exit_code`: 2, or 75 for
a preemption (a checkpoint was saved; rerun to resume). Any other exception
is a bug of ours and keeps its traceback. This module imports nothing.
"""

import errno
import re

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


class ResourceError(UserError):
  """The user's storage, network or cluster failed an operation (a path
  not found, permission denied, a full disk, no network)."""


# What TensorFlow (by its error classes) and Python raise deep inside an
# operation on the user's files, storage or network, and what to say. By
# class name, so this module needs no TensorFlow import.
_TRANSLATIONS = {
    "NotFoundError": ("not found", "check the path"),
    "FileNotFoundError": ("not found", "check the path"),
    "IsADirectoryError":
        ("a folder where a file was expected", "give the file's path"),
    "NotADirectoryError":
        ("a file where a folder was expected", "give a folder's path"),
    "PermissionDeniedError":
        ("permission denied", "check that you may read or write there"),
    "PermissionError":
        ("permission denied", "check that you may read or write there"),
    "ResourceExhaustedError":
        ("out of resources", "free disk space (checkpoints already written "
         "are intact), or lower --batch_size if memory ran out"),
    "UnavailableError":
        ("unavailable", "check the network, the address and credentials"),
    "DeadlineExceededError":
        ("timed out", "check the network, the address and the peers"),
    "FailedPreconditionError":
        ("failed", "check the path, the network and credentials (gs:// needs "
         "both)"),
    "ConnectionError": ("network error", "check the network and the address"),
    "TimeoutError": ("timed out", "check the network and the address"),
    "URLError": ("cannot reach", "check the network and the address"),
}


def translate(exc):
  """The UserError for a failure of the user's storage, network or cluster
  raised by TensorFlow or Python (`exc`), or None: a bug of ours, which
  keeps its traceback."""
  if isinstance(exc, UserError):
    return exc
  full = (
      isinstance(exc, OSError) and exc.errno in (errno.ENOSPC, errno.EFBIG) or
      type(exc).__name__ == "OutOfRangeError" and "File too large" in str(exc))
  if full:  # a full disk, or a file-size limit (ulimit -f, EFBIG)
    return ResourceError(f"no room to write: {first_line(exc)}; free disk "
                         "space (checkpoints already written are intact) and "
                         "run the same command again")
  for cls in type(exc).__mro__:
    if cls.__name__ in _TRANSLATIONS:
      what, fix = _TRANSLATIONS[cls.__name__]
      return ResourceError(f"{what + ': ' if what else ''}{first_line(exc)}; "
                           f"{fix}")
  return None


# The op a TensorFlow error came from, prefixed to its message.
_FUNCTION_NODE = re.compile(r"^\{\{function_node [^}]*\}\}\s*")


def first_line(exc, limit=300):
  """The first informative line of an exception's message (TensorFlow's
  run to dozens of lines, framed by "Graph execution error:" and the node
  that raised), at most `limit` characters; the type's name if none."""
  for line in str(exc).strip().splitlines():
    line = _FUNCTION_NODE.sub("", line.strip())
    if line and not line.startswith(_FRAMING):
      return line[:limit]
  return type(exc).__name__
