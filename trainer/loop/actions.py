"""What happens between training loops (Orbit's `actions` style).

Each action is a small object the loop calls at a loop boundary: the stop
signals (preemption), the progress line and bar, the train summaries, the
profiler, and the evaluator with its best-checkpoint keeper. None of them
runs inside a compiled loop.
"""

import math
import os
import signal
import sys
import threading
import time

from absl import logging
import tensorflow as tf
import tqdm
import tqdm.contrib

from trainer.base import errors
from trainer.base import run_dir
from trainer.base import summaries


class StopSignals:
  """Turns SIGTERM and SIGINT into a request checked between loops.

  TPU VMs, GCE and Vertex AI send SIGTERM before preempting; the run then
  finishes its current loop, saves, and stops with `Preempted` (exit code
  75). Python runs handlers between bytecodes, so never inside the loop.
  """

  def __init__(self):
    self.received = None
    self._previous = {}

  def _handle(self, signum, frame):
    del frame
    self.received = signal.Signals(signum).name

  def __enter__(self):
    if threading.current_thread() is threading.main_thread():
      for sig in (signal.SIGTERM, signal.SIGINT):
        self._previous[sig] = signal.signal(sig, self._handle)
    return self

  def __exit__(self, *exc):
    for sig, handler in self._previous.items():
      signal.signal(sig, handler)

  def check(self, state, step):
    """After the loop that ended at `step`: saves and raises `Preempted`
    if a signal arrived."""
    if self.received:
      state.save_unless_saved()
      raise errors.Preempted(
          f"{self.received} received: stopped after step {step} with a "
          f"checkpoint in {state.manager.directory}; run the same command "
          "again to resume")


class Progress:
  """The progress of a run: a greppable log line at every loop boundary
  and, on an interactive terminal, a tqdm bar redrawn in place below the
  log lines (absl's handler writes through tqdm while the bar is up)."""

  def __init__(self, total, batch_size, start=0, tty=None):
    self.total, self.batch_size = total, batch_size
    self.bar = None
    if sys.stderr.isatty() if tty is None else tty:
      self.bar = tqdm.tqdm(
          total=total,
          initial=start,
          unit="step",
          file=sys.stderr,
          dynamic_ncols=True,
          bar_format="{l_bar}{bar}| {n_fmt}/{total_fmt} steps "
          "[{elapsed}<{remaining}]{postfix}")
      self._streams = _streams()
      through_bar = tqdm.contrib.DummyTqdmFile(sys.stderr)
      _set_streams(through_bar, through_bar)

  def line(self, step, loss, lr, examples_per_second):
    """`step N/M loss ... lr ... E examples/s ETA HH:MM:SS` (greppable)."""
    left = (self.total - step) * self.batch_size / examples_per_second
    eta = time.strftime("%H:%M:%S", time.gmtime(max(left, 0)))
    return (f"step {step}/{self.total} loss {loss:.4f} lr {lr:.3g} "
            f"{examples_per_second:.1f} examples/s ETA {eta}")

  def update(self, step, loss, lr, examples_per_second):
    logging.info(self.line(step, loss, lr, examples_per_second))
    if self.bar is not None:
      self.bar.set_postfix_str(
          f"loss {loss:.4f}, {examples_per_second:.1f} examples/s",
          refresh=False)
      self.bar.update(step - self.bar.n)

  def close(self):
    if self.bar is not None:
      self.bar.close()
      _set_streams(*self._streams)
      self.bar = None


def _streams():
  """(sys.stderr, absl's stream): where log lines and warnings go."""
  return sys.stderr, logging.get_absl_handler().python_handler.stream


def _set_streams(stderr, absl_stream):
  sys.stderr = stderr
  logging.get_absl_handler().python_handler.stream = absl_stream


def write_scalars(writer, step, scalars):
  """`scalars` ({tag: float}) into the TensorBoard `writer` at `step`."""
  with writer.as_default(step=step):
    for tag, value in scalars.items():
      tf.summary.scalar(tag, value)


class Profiler:
  """--profile_steps: a TensorBoard profile of training steps FIRST..LAST.

  Started before the loop that runs step FIRST and stopped after the loop
  that runs step LAST (the plan cuts loops there), so the trace holds
  exactly those steps, written under `logdir`/plugins/profile/.
  """

  def __init__(self, window, logdir):
    self.window, self.logdir = window, logdir
    self.active = False

  def before_loop(self, step):
    """`step`: steps done before the loop; its first is step + 1."""
    if self.window and not self.active and (self.window[0] - 1 <= step <
                                            self.window[1]):
      tf.profiler.experimental.start(self.logdir)
      self.active = True
      logging.info("Profiling steps %d..%d into %s/plugins/profile", step + 1,
                   self.window[1], self.logdir)

  def after_loop(self, stop):
    if self.active and stop >= self.window[1]:
      self.close()

  def close(self):
    if self.active:
      tf.profiler.experimental.stop()
      self.active = False


class BestKeeper:
  """Keeps the best checkpoint by an eval metric apart from the rolling ones,
  and counts evals without improvement for early stopping.

  State (best value and step, evals since) lives in <directory>/best.json,
  so a resumed run keeps counting where it stopped.
  """

  def __init__(self, directory, checkpoint, options, metric, patience):
    self.directory, self.options = directory, options
    self.key = metric.split("/", 1)[-1]  # "eval/loss" -> "loss"
    self.lower_is_better = self.key.endswith("loss")
    self.patience = patience
    self.manager = tf.train.CheckpointManager(
        checkpoint, directory, max_to_keep=1, checkpoint_name="best")
    self.path = os.path.join(directory, "best.json")
    self.state = run_dir.read_json(self.path) or dict(
        value=None, step=None, evals_since_best=0)

  def update(self, metrics, step):
    """Records an eval; returns True when early stopping should stop."""
    value = metrics[self.key]
    best = self.state["value"]
    better = best is None or (value < best
                              if self.lower_is_better else value > best)
    if better:
      self.manager.save(checkpoint_number=step, options=self.options)
      self.state = dict(value=value, step=step, evals_since_best=0)
    else:
      self.state["evals_since_best"] += 1
    run_dir.write_json(self.path, self.state)
    return bool(self.patience and
                self.state["evals_since_best"] >= self.patience)


class Evaluator:
  """Evaluates on the validation split between loops and at the end.

  Logs the metrics, writes each as `eval/<name>` (loss, accuracy, the
  task's --eval_metrics, MNLI's mismatched_*), the confusion matrix image
  and (two classes) the PR curve, and hands the metrics to the best
  keeper. The same step is never evaluated twice (the final eval
  reuses the last loop's when they coincide).
  """

  def __init__(self, evaluate, writer, best, class_names):
    """`evaluate()` -> `train_step.evaluate`'s dict, on validation."""
    self._evaluate, self.writer, self.best = evaluate, writer, best
    self.class_names = class_names
    self._done = {}  # step -> (metrics, stop)

  def __call__(self, step):
    """Returns (metrics, whether early stopping says stop)."""
    if step not in self._done:
      metrics = self._evaluate()
      scalars = scalar_metrics(metrics)
      logging.info("eval at step %d: %s over %d examples", step,
                   ", ".join(f"{k} {v:.4f}" for k, v in scalars.items()),
                   metrics["examples"])
      write_scalars(self.writer, step, {
          f"eval/{k}": v for k, v in scalars.items()
      })
      if "confusion" in metrics:
        summaries.write_eval_pictures(self.writer, step,
                                      metrics["confusion"], self.class_names,
                                      metrics.get("histograms"))
      self._done[step] = (metrics, self.best.update(metrics, step))
    return self._done[step]


def scalar_metrics(metrics):
  """The float metrics of an eval: the task's (accuracy, f1, ...) first,
  the losses last."""
  scalars = [(k, v) for k, v in metrics.items() if isinstance(v, float)]
  return dict(sorted(scalars, key=lambda kv: kv[0].endswith("loss")))


def throughput(loop_times):
  """Examples per second over the loops after the first (which traces);
  `loop_times` holds (examples, seconds) per loop."""
  timed = loop_times[1:] or loop_times
  seconds = sum(s for _, s in timed)
  return sum(e for e, _ in timed) / seconds if seconds else None


def finite(*values):
  return all(math.isfinite(v) for v in values)
