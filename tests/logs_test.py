"""What a run prints: the start-up filter, the project filter, the bar."""

import fcntl
import logging as std_logging
import os
import pty
import re
import struct
import subprocess
import sys
import termios

import pytest

from trainer.runtime import logs

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

# Exactly as TensorFlow 2.21 prints them on a CPU machine (CI's log).
STARTUP = [
    "WARNING: All log messages before absl::InitializeLog() is called are "
    "written to STDERR",
    "I0000 00:00:1796124250.160836   31378 cudart_stub.cc:31] Could not find "
    "cuda drivers on your machine, GPU will not be used.",
    "E0000 00:00:1796124255.036890   31378 cuda_platform.cc:52] failed call to"
    " cuInit: INTERNAL: CUDA error: Failed call to cuInit: UNKNOWN ERROR (303)",
    "I0000 00:00:1796126148.994304   15047 cpu_feature_guard.cc:227] This "
    "TensorFlow binary is optimized to use available CPU instructions in "
    "performance-critical operations.",
    "To enable the following instructions: AVX2 FMA, in other operations, "
    "rebuild TensorFlow with the appropriate compiler flags.",
]
KEPT = [
    "error: --batch_size=0 is invalid: must be > 0",
    "Traceback (most recent call last):",
    "E0000 00:00:1796124255.036890   31378 some_op.cc:12] Resource exhausted",
]


def test_startup_noise_is_exactly_the_known_lines():
  assert [logs.startup_noise(line) for line in STARTUP] == [True] * 5
  assert [logs.startup_noise(line) for line in KEPT] == [False] * 3


def _record(path, level):
  return std_logging.LogRecord("absl", level, path, 1, "m", (), None)


def test_project_filter_passes_ours_and_every_warning():
  ours = os.path.join(ROOT, "trainer", "training", "actions.py")
  theirs = "/usr/lib/python3/site-packages/tensorflow/python/saver.py"
  quiet = logs.ProjectFilter()
  assert quiet.filter(_record(ours, std_logging.INFO))
  assert not quiet.filter(_record(theirs, std_logging.INFO))
  assert quiet.filter(_record(theirs, std_logging.WARNING))
  assert logs.ProjectFilter(everyone=True).filter(
      _record(theirs, std_logging.INFO))


def test_project_filter_drops_the_retracing_warning_of_our_loops_only():
  # As TensorFlow 2.21 words it (polymorphic_function.py), for our eval
  # loop (one trace per row count by design) and for a user's function.
  tf_file = "/usr/lib/python3/site-packages/tensorflow/python/eager/f.py"
  said = ("5 out of the last 6 calls to <function {} at 0x7fcf61eb4cc0> "
          "triggered tf.function retracing. Tracing is expensive and the "
          "excessive number of tracings could be due to ...")

  def record(name):
    return std_logging.LogRecord("tensorflow", std_logging.WARNING, tf_file,
                                 157, said.format(name), (), None)

  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  from trainer.training import eval_step  # noqa: E501  pylint: disable=g-import-not-at-top
  from trainer.training import train_step  # noqa: E501  pylint: disable=g-import-not-at-top
  strategy = tf.distribute.get_strategy()
  loops = (train_step.make_train_loop(strategy, None),
           eval_step.make_eval_loop(strategy, None, 2))
  names = [loop.python_function.__qualname__ for loop in loops]
  assert names == [
      "make_train_loop.<locals>.train_loop", "make_eval_loop.<locals>.eval_loop"
  ]
  quiet = logs.ProjectFilter()
  assert not any(quiet.filter(record(name)) for name in names)
  assert quiet.filter(record("my_step"))
  assert quiet.filter(record("make_eval_step.<locals>.step"))
  assert logs.ProjectFilter(everyone=True).filter(
      record("make_eval_loop.<locals>.eval_loop"))


_WINDOW = """
import os, sys
os.write(2, b"WARNING: All log messages before absl::InitializeLog() is "
         b"called are written to STDERR\\n")
os.write(2, b"a line of the user's\\n")
from trainer.runtime import logs
logs.end_startup()
os.write(2, b"after the window\\n")
"""


def test_startup_window_drops_the_noise_and_keeps_the_rest():
  """A real process: the window opens when `python -m` imports the
  package (argv[0] is "-m"), here by hand before the writes."""
  code = "from trainer.runtime import logs; logs.quiet_startup()\n" + _WINDOW
  env = dict(os.environ, PYTHONPATH=ROOT)
  env.pop("TF_CPP_MIN_LOG_LEVEL", None)
  env.pop(logs.VERBOSE_ENV, None)
  out = subprocess.run([sys.executable, "-c", code],
                       env=env,
                       capture_output=True,
                       text=True,
                       timeout=120,
                       check=True)
  lines = out.stderr.splitlines()
  assert "a line of the user's" in lines and "after the window" in lines
  assert not [line for line in lines if logs.startup_noise(line)], lines
  verbose = subprocess.run([sys.executable, "-c", code],
                           env=dict(env, **{logs.VERBOSE_ENV: "1"}),
                           capture_output=True,
                           text=True,
                           timeout=120,
                           check=True)
  assert verbose.stderr.splitlines()[0].startswith("WARNING: All log")


_BAR = """
import time
from absl import app, logging
from trainer.training import actions
def main(_):
  progress = actions.Progress(total=40, batch_size=8, start=10)
  for step in (20, 30, 40):
    time.sleep(0.15)
    progress.update(step, 0.5, 1e-3, 100.0)
  progress.close()
  logging.info("after the bar")
app.run(main)
"""


def _in_terminal(code, columns=100):
  """Runs `code` with stdin/stdout/stderr on a pseudo-terminal of
  `columns`; returns what the terminal received."""
  leader, follower = pty.openpty()
  fcntl.ioctl(follower, termios.TIOCSWINSZ,
              struct.pack("HHHH", 40, columns, 0, 0))
  env = dict(os.environ, PYTHONPATH=ROOT, TF_CPP_MIN_LOG_LEVEL="2")
  child = subprocess.Popen([sys.executable, "-c", code],
                           stdin=follower,
                           stdout=follower,
                           stderr=follower,
                           env=env,
                           close_fds=True)
  os.close(follower)
  received = b""
  while True:
    try:
      chunk = os.read(leader, 4096)
    except OSError:  # EIO: the child closed the terminal
      break
    if not chunk:
      break
    received += chunk
  assert child.wait(timeout=120) == 0, received.decode()[-2000:]
  os.close(leader)
  return received.decode()


def _visible(row):
  cells = []
  for part in row.split("\r"):
    cells[:len(part)] = part
  return "".join(cells).rstrip()


@pytest.mark.slow
def test_the_bar_redraws_in_place_under_the_log_lines():
  screen = _in_terminal(_BAR)
  # The bar is redrawn with carriage returns, from 10 (resumed) to 40.
  bars = re.findall(r"\r\s*(\d+)%\|[^\r\n]*\| (\d+)/40 steps", screen)
  assert [n for _, n in bars][0] == "10" and bars[-1] == ("100", "40")
  assert "loss 0.5000, 100.0 examples/s" in screen
  # As the terminal shows it (a carriage return writes from column 0 over
  # what the row held): each log line alone on its row, the bar gone.
  rows = [_visible(row) for row in screen.replace("\r\n", "\n").split("\n")]
  logged = [row for row in rows if " loss 0.5000 lr " in row]
  assert [
      re.sub(r"^I\d{4} [\d:.]+ \d+ actions\.py:\d+\] ", "", row)
      for row in logged
  ] == [
      f"step {n}/40 loss 0.5000 lr 0.001 100.0 "
      f"examples/s ETA 00:00:{(40 - n) * 8 // 100:02d}" for n in (20, 30, 40)
  ], rows
  assert re.search(r"\nI\d{4} [^\n]*\] after the bar", screen)
  assert screen.count("step 40/40 loss") == 1
