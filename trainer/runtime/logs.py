"""What a run prints: this project's lines and real warnings, nothing else.

Three sources of noise, each stopped where it starts:

- TensorFlow's native start-up lines (`Could not find cuda drivers`,
  `failed call to cuInit`, `All log messages before absl::InitializeLog()`,
  `oneDNN custom operations are on`) are written to file descriptor 2 by C++
  code while TensorFlow loads and first lists its devices; some come from
  absl's C++ logging, which `TF_CPP_MIN_LOG_LEVEL` does not govern. A
  command (`python -m trainer.X`) therefore sends descriptor 2 to a
  temporary file from the moment the `trainer` package is imported until
  TensorFlow has loaded (`StartupWindow`), then replays every line that is
  not one of those known start-up lines. `TF_CPP_MIN_LOG_LEVEL=3` (unless
  set) keeps TensorFlow's later native INFO, WARNING and ERROR lines out:
  what TensorFlow reports that way during a run is noise (`NodeDef mentions
  attribute use_unbounded_threadpool ...` at every iterator under op
  determinism), or precedes the exception that carries the failure; FATAL
  lines still print.
- TensorFlow's Python INFO lines (`Sharding callback duration`, `Function
  'serve' contains input name(s) ...`, `Fingerprint ...`) go through absl's
  logger, as ours do: `ProjectFilter` passes INFO records of this project
  only, and every WARNING or worse but one: TensorFlow's "triggered
  tf.function retracing" about the train and eval loops, which trace once
  per length bucket or row count by design.
- Known-harmless warnings of dependencies are silenced where they are
  imported (see `model.py`).

`-v 1` (absl's `--verbosity=1`) lets TensorFlow's Python INFO lines
through; `BERT_TRAINER_VERBOSE=1` turns all of this off.
"""

import logging as std_logging
import os
import re
import sys
import tempfile
import time

VERBOSE_ENV = "BERT_TRAINER_VERBOSE"
UPLOAD_SECONDS = 60  # a remote train.log is uploaded at most this often
# Records name the file of their logging call as Python imported it, which
# is relative when the package came from a relative sys.path entry (and a
# test may change directory since): compare with both spellings.
_PROJECT = os.path.dirname(os.path.dirname(os.path.dirname(__file__)))
_OURS = tuple({
    os.path.join(base, d) + os.sep
    for base in (_PROJECT, os.path.abspath(_PROJECT))
    for d in ("trainer", "benchmarks")
})

# Native lines TensorFlow prints while it loads on a machine without a GPU
# (or with one): facts about the build, never about the run.
_STARTUP_NOISE = re.compile("|".join([
    r"All log messages before absl::InitializeLog\(\) is called",
    r"cudart_stub\.cc", r"Could not find cuda drivers",
    r"failed call to cuInit", r"cuda_(platform|executor|diagnostics)",
    r"oneDNN custom operations are on", r"TF_ENABLE_ONEDNN_OPTS",
    r"Unable to register cu(DNN|FFT|BLAS) factory",
    r"computation placer already registered", r"TF-TRT Warning",
    r"This TensorFlow binary is optimized to use available CPU",
    r"To enable the following instructions",
    r"rebuild TensorFlow with the appropriate compiler flags",
    r"port\.cc:\d+\] oneDNN", r"cpu_feature_guard\.cc"
]))


def verbose():
  return os.environ.get(VERBOSE_ENV, "") not in ("", "0")


def startup_noise(line):
  """True for a native start-up line of TensorFlow's (dropped)."""
  return bool(_STARTUP_NOISE.search(line))


class StartupWindow:
  """Descriptor 2 to a temporary file until `close()`, which replays all
  but TensorFlow's start-up lines to the real stderr.

  Also closed at exit, so nothing written meanwhile is lost (a flag error,
  a traceback).
  """

  def __init__(self):
    self._saved = self._file = None
    try:
      sys.stderr.flush()
      self._file = tempfile.TemporaryFile()
      self._saved = os.dup(2)
      os.dup2(self._file.fileno(), 2)
    except (OSError, ValueError, AttributeError):
      # No descriptor 2 (embedded), or no room: nothing is filtered.
      if self._saved is not None:
        os.close(self._saved)
      if self._file is not None:
        self._file.close()
      self._saved = None

  def close(self):
    if self._saved is None:
      return
    try:
      sys.stderr.flush()
    except (OSError, ValueError):
      pass
    os.dup2(self._saved, 2)
    os.close(self._saved)
    self._saved = None
    self._file.seek(0)
    kept = [
        line
        for line in self._file.read().decode("utf-8", "replace").splitlines(
            keepends=True)
        if not startup_noise(line)
    ]
    self._file.close()
    if kept:
      sys.stderr.write("".join(kept))
      sys.stderr.flush()


_window = None


def quiet_startup():
  """From the `trainer` package import of a command: the start-up window
  and TF_CPP_MIN_LOG_LEVEL (unless the user set it, or asked for all)."""
  global _window
  if verbose() or _window is not None:
    return
  os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
  _window = StartupWindow()
  import atexit  # pylint: disable=g-import-not-at-top
  atexit.register(_close_window)  # an exit in the window (a flag error)


def _close_window():
  global _window
  if _window is not None:
    window, _window = _window, None
    window.close()


def end_startup():
  """Loads TensorFlow (and lists its devices, where CUDA is probed), then
  closes the start-up window. Idempotent; a no-op without a window."""
  if _window is None:
    return
  try:
    import tensorflow as tf  # pylint: disable=g-import-not-at-top
    tf.config.list_physical_devices()
  except Exception:  # pylint: disable=broad-except
    pass  # Whoever imports TensorFlow next reports it, to the real stderr.
  finally:
    _close_window()


# TensorFlow warns when a tf.function traced on 5 of its last 10 calls. The
# train and eval loops trace once per shape by design (a length bucket or a
# row count: up to 8), so for them the warning and its advice are wrong.
_OUR_LOOPS_RETRACED = re.compile(
    r"calls to <function make_(train|eval)_loop\.<locals>\.(train|eval)_loop"
    r" at 0x[0-9a-f]+> triggered tf\.function retracing")


class ProjectFilter(std_logging.Filter):
  """Passes WARNING and worse from anyone, INFO only from this project
  (or everything at absl verbosity >= 1); drops TensorFlow's retracing
  warning about the train and eval loops (`_OUR_LOOPS_RETRACED`)."""

  def __init__(self, everyone=False):
    super().__init__()
    self.everyone = everyone

  def filter(self, record):
    if self.everyone:
      return True
    if record.levelno >= std_logging.WARNING:
      return not _OUR_LOOPS_RETRACED.search(record.getMessage())
    return record.pathname.startswith(_OURS)


_filter = ProjectFilter()


def quiet_python(verbosity=0):
  """Installs `ProjectFilter` on absl's handler (idempotent); `verbosity`
  is absl's (`-v`)."""
  from absl import logging  # pylint: disable=g-import-not-at-top
  _filter.everyone = verbose() or verbosity >= 1
  handler = logging.get_absl_handler()
  if _filter not in handler.filters:
    handler.addFilter(_filter)


class RunLog(std_logging.Handler):
  """The run's log lines (as the terminal shows them) appended to a file.

  A local file is appended to as lines come; a remote one (gs://) is kept
  in a local copy and uploaded (object stores cannot append) at most every
  UPLOAD_SECONDS as lines come, and by `flush()` and `close()`.
  """

  def __init__(self, path):
    super().__init__(std_logging.INFO)
    import tensorflow as tf  # pylint: disable=g-import-not-at-top
    from absl import logging  # pylint: disable=g-import-not-at-top
    self.path, self._gfile = path, tf.io.gfile
    self.remote = "://" in path
    self.setFormatter(logging.PythonFormatter())
    self.addFilter(_filter)
    self._uploaded = time.monotonic()
    if self.remote:
      self._local = tempfile.NamedTemporaryFile(
          "a+", suffix=".log", encoding="utf-8")
      if tf.io.gfile.exists(path):
        with tf.io.gfile.GFile(path) as f:
          self._local.write(f.read())
      self._stream = self._local
    else:
      self._stream = open(path, "a", encoding="utf-8")

  def emit(self, record):
    try:
      self.note(self.format(record))
    except Exception:  # pylint: disable=broad-except
      self.handleError(record)

  def note(self, line):
    """Appends `line` to the file only (not the terminal)."""
    self._stream.write(line + "\n")
    self._stream.flush()
    if self.remote and time.monotonic() - self._uploaded > UPLOAD_SECONDS:
      self.flush()  # a killed run keeps all but its last minute

  def flush(self):
    if self.remote and self._stream:
      self._stream.flush()
      self._uploaded = time.monotonic()
      self._gfile.copy(self._local.name, self.path, overwrite=True)

  def close(self):
    if self._stream:
      try:
        self.flush()
      except Exception as e:  # pylint: disable=broad-except
        sys.stderr.write(f"warning: could not write {self.path}: {e}\n")
      self._stream.close()
      self._stream = None
    super().close()


def open_run_log(path):
  """Starts copying the run's log lines to `path`; returns the handler
  (`close_run_log` it)."""
  handler = RunLog(path)
  std_logging.getLogger().addHandler(handler)
  return handler


def close_run_log(handler):
  std_logging.getLogger().removeHandler(handler)
  handler.close()
