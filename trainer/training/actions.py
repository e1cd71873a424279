"""What happens between training loops (Orbit's `actions`).

Every train action is a callable of one shape, `action(output)`, called by
`controller.train` with each loop's `LoopOutput`: the progress line and bar
(`Progress`), the train summaries (`TrainSummaries`), the eval every N steps
(`EvalEvery`), the checkpoints every N steps (`SaveCheckpoints`) and the
stop on SIGTERM/SIGINT (`StopOnSignal`). An eval has followers of its own,
each `follower(step, metrics)`: the log line (`log_eval`), the eval summaries
(`EvalSummaries`), the best checkpoint (`BestCheckpoint`) and early stopping
(`EarlyStopping`, which raises `controller.StopTraining`); `Evaluations`
runs them, once per step. None of them runs inside a compiled loop.
"""

import os
import signal
import sys
import threading
import time

from absl import logging
import tensorflow as tf
import tqdm
import tqdm.contrib

from trainer.evaluation import summaries
from trainer.foundation import errors
from trainer.runtime import run_dir
from trainer.training import controller


class StopSignals:
  """Turns SIGTERM and SIGINT into a request checked between loops.

  TPU VMs, GCE and Vertex AI send SIGTERM before preempting; the run then
  finishes its current loop, saves, and stops with `Preempted` (exit code
  75). Python runs handlers between bytecodes, so never inside the loop.
  """

  def __init__(self, exiting=False):
    self.received = None
    self.exiting = exiting  # the process ends after the run: see __exit__
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
      # A process on its way out after a signal ignores the next ones, so
      # it ends with the stop's own exit code, not a KeyboardInterrupt.
      stopping = self.exiting and self.received
      signal.signal(sig, signal.SIG_IGN if stopping else handler)

  def check(self, state, step, save=True):
    """After the loop that ended at `step`: saves (unless not `save`: the
    end of a run saved its last step before it restored the best one) and
    raises `Preempted` if a signal arrived."""
    if self.received:
      if save:
        state.save_unless_saved()
      raise errors.Preempted(
          f"{self.received} received: stopped after step {step} with a "
          f"checkpoint in {state.manager.directory}; run the same command "
          "again to resume")


class StopOnSignal:
  """After each loop: a signal that arrived (`StopSignals`) saves the
  state's checkpoint at that step and raises `Preempted` (exit code 75)."""

  def __init__(self, signals, state):
    self.signals, self.state = signals, state

  def __call__(self, output):
    self.check(output.step)

  def check(self, step, save=True):
    self.signals.check(self.state, step, save)


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

  def __call__(self, output):
    self.update(output.step, output.loss, output.learning_rate,
                output.examples_per_second)

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


class TrainSummaries:
  """Each loop's `train/loss`, `train/learning_rate`, `train/grad_norm`,
  `train/examples_per_second` (and float16's loss scale) at its last step."""

  def __init__(self, writer):
    self.writer = writer

  def __call__(self, output):
    scalars = {
        "train/loss": output.loss,
        "train/learning_rate": output.learning_rate,
        "train/grad_norm": output.grad_norm,
        "train/examples_per_second": output.examples_per_second
    }
    scalars.update(output.scalars)
    write_scalars(self.writer, output.step, scalars)


class SaveCheckpoints:
  """A checkpoint after each loop that ends where `due(step)` says."""

  def __init__(self, due, save):
    self.due, self.save = due, save

  def __call__(self, output):
    if self.due(output.step):
      self.save(output.step)


class Evaluations:
  """Evaluates (`evaluate()` -> a metrics dict) and hands the metrics to
  each follower, at most once per step: the final eval reuses the last
  loop's when they coincide."""

  def __init__(self, evaluate, followers=()):
    self.evaluate, self.followers = evaluate, list(followers)
    self._done = {}  # step -> metrics

  def at(self, step):
    """The metrics at `step` (the followers see them once)."""
    if step not in self._done:
      self._done[step] = self.evaluate()
      for follower in self.followers:
        follower(step, self._done[step])
    return self._done[step]


class EvalEvery:
  """An eval after each loop that ends where `due(step)` says."""

  def __init__(self, due, evaluations):
    self.due, self.evaluations = due, evaluations

  def __call__(self, output):
    if self.due(output.step):
      self.evaluations.at(output.step)


def log_eval(step, metrics):
  """`eval at step N: accuracy ... loss ... over E examples`."""
  logging.info(
      "eval at step %d: %s over %d examples", step,
      ", ".join(f"{k} {v:.4f}" for k, v in scalar_metrics(metrics).items()),
      metrics["examples"])


class EvalSummaries:
  """Each eval's `eval/<metric>` scalars (loss, accuracy, the task's
  --eval_metrics, MNLI's mismatched_*), the confusion matrix image and (two
  classes) the PR curve."""

  def __init__(self, writer, class_names):
    self.writer, self.class_names = writer, class_names

  def __call__(self, step, metrics):
    write_scalars(self.writer, step, {
        f"eval/{k}": v for k, v in scalar_metrics(metrics).items()
    })
    if "confusion" in metrics:
      summaries.write_eval_pictures(self.writer, step, metrics["confusion"],
                                    self.class_names, metrics.get("histograms"))
    # Evals are rare: on disk at once (the final one comes after the loops'
    # writers were flushed, and a worker's folder is removed after it).
    self.writer.flush()


class BestCheckpoint:
  """Keeps the best checkpoint by an eval metric apart from the rolling ones
  (in `directory`, prefix `best`), and counts the evals since it.

  Its state (best value and step, evals since) lives in
  <directory>/best.json, so a resumed run keeps counting where it stopped.
  """

  def __init__(self, directory, checkpoint, options, metric):
    self.directory, self.options, self.metric = directory, options, metric
    self.key = metric.split("/", 1)[-1]  # "eval/loss" -> "loss"
    self.lower_is_better = self.key.endswith("loss")
    self.manager = tf.train.CheckpointManager(
        checkpoint, directory, max_to_keep=1, checkpoint_name="best")
    self.path = os.path.join(directory, "best.json")
    self.state = run_dir.read_json(self.path) or dict(
        value=None, step=None, evals_since_best=0)

  @property
  def step(self):
    """The best checkpoint's step (None before the first eval)."""
    return self.state["step"]

  @property
  def latest(self):
    return self.manager.latest_checkpoint

  def __call__(self, step, metrics):
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


class EarlyStopping:
  """Stops training (`controller.StopTraining`) after `patience` evals in a
  row without a better value of `best`'s metric (0 = never); follows
  `best` (a `BestCheckpoint`), which counts them."""

  def __init__(self, best, patience):
    self.best, self.patience = best, patience

  def __call__(self, step, metrics):
    del step, metrics  # counted by the best checkpoint, which runs first
    if self.patience and self.best.state["evals_since_best"] >= self.patience:
      raise controller.StopTraining(
          f"no better {self.best.metric} in {self.patience} evals")


def scalar_metrics(metrics):
  """The float metrics of an eval: the task's (accuracy, f1, ...) first,
  the losses last."""
  scalars = [(k, v) for k, v in metrics.items() if isinstance(v, float)]
  return dict(sorted(scalars, key=lambda kv: kv[0].endswith("loss")))
