"""The trainer object (Orbit's `StandardTrainer` contract) and its wrappers.

`Trainer.train(num_steps) -> LoopOutput` runs one loop: `num_steps` steps
in a call of the compiled train loop (a `tf.while_loop` around
`strategy.run`) per group of same-shape batches it touches, then the host
work of that loop (reading its loss, gradient norm and learning rate back).
It owns the loop function, the data iterator, and the re-seek of both
after a rollback (`roll_back`); the checkpoints are the `TrainState`'s.
What happens between loops is not its business (`trainer.training.actions`,
handed to `controller.train`).

`Evaluator` only evaluates (Orbit's `StandardEvaluator`): one pass over
each validation split, its metrics. `Profiled` wraps a trainer with
--profile_steps' profiler, around exactly the loops of the window.
"""

import contextlib
import time

from absl import logging
import tensorflow as tf

from trainer.foundation import tasks
from trainer.runtime import host
from trainer.training import controller
from trainer.training import eval_step


class Trainer:
  """Trains a `TrainState` loop by loop.

  The data comes in groups of batches of one shape (`input_pipeline.
  train_groups`: one bucket length, or one row count in shared rows); a
  loop of `num_steps` steps runs them one call of the compiled loop per
  group it touches (one, unless the loop crosses into the next group),
  each call's batches of one shape.

  Args:
    state: the run's `train_state.TrainState` (model, AdamW, data position,
      checkpoints).
    train_loop: `train_step.make_train_loop`'s function (group, offset,
      num_steps) -> (mean loss, mean gradient norm, steps applied).
    dataset: position -> an iterator of distributed training groups from
      that batch position on.
    meta: a distributed group -> (its first batch's position, its count of
      batches), Python ints.
    layout: the run's `layout.Layout`: its batch size, the shapes its steps
      are counted by (in the state, so they add up across a resume), and a
      group's shape (`Layout.shape_of`).
  """

  def __init__(self, state, train_loop, dataset, meta, layout):
    self.state = state
    self.train_loop, self._dataset, self._meta = train_loop, dataset, meta
    self.layout = layout
    self.batch_size, self.shapes = layout.batch_size, layout.shapes
    self._groups = self._group = None
    self._used = self._count = self._shape = 0

  @property
  def step(self):
    return self.state.step

  def _segment(self, remaining):
    """(group, offset, steps) of the next call: the current group's next
    batches, or a new group's (the data position says where in it)."""
    if self._groups is None:
      self._groups = self._dataset(self.state.data_position)
      self._group = None
    if self._group is None or self._used >= self._count:
      self._group = next(self._groups)
      first, self._count = self._meta(self._group)
      self._used = self.state.data_position - first
      self._shape = self.layout.shape_of(self._group)
    steps = min(remaining, self._count - self._used)
    return self._group, self._used, steps

  def train(self, num_steps):
    """Runs `num_steps` steps; returns their LoopOutput."""
    start, position = self.state.step, self.state.data_position
    host.keep_malloc_fast()
    started = time.perf_counter()
    remaining, calls, per_shape = num_steps, [], {}
    while remaining:
      group, offset, steps = self._segment(remaining)
      # Not read back here: the next call (a loop is several when it
      # crosses groups) is dispatched while this one runs.
      calls.append(
          (steps, self.train_loop(group, tf.constant(offset),
                                  tf.constant(steps))))
      self._used += steps
      remaining -= steps
      index = self.shapes.index(self._shape)
      per_shape[index] = per_shape.get(index, 0) + steps
    self.state.add_shape_steps(per_shape)
    loss_sum, norm_sum, applied_sum = 0.0, 0.0, 0.0
    for steps, (loss, norm, applied) in calls:
      applied = float(applied)  # waits for the device
      loss_sum += float(loss) * steps
      norm_sum += float(norm) * max(applied, 1.0)
      applied_sum += applied
    seconds = time.perf_counter() - started
    step = start + num_steps
    return controller.LoopOutput(
        start=start,
        step=step,
        position=position,
        loss=loss_sum / num_steps,
        grad_norm=norm_sum / max(applied_sum, 1.0),
        seconds=seconds,
        examples=num_steps * self.batch_size,
        learning_rate=float(self.state.optimizer.schedule(step - 1)),
        scalars=self.state.loss_scale_scalars())

  def close(self):
    """Nothing to give back (`Profiled` stops its profiler)."""

  def latest_checkpoint(self):
    return tf.train.latest_checkpoint(self.state.manager.directory)

  def roll_back(self, checkpoint, position):
    """Restores `checkpoint` and moves the data to batch `position` (past
    the batches of a bad loop); the next loop reads from there."""
    self.state.restore(checkpoint)
    self.state.skip_to(position)
    self._groups = self._group = None


class Profiled:
  """A trainer whose loops of steps FIRST..LAST (--profile_steps) run under
  `tf.profiler`, written under `logdir`/plugins/profile/. The plan cuts
  loops at the window's edges, so the trace holds exactly those steps."""

  def __init__(self, trainer, window, logdir):
    self._trainer, self.window, self.logdir = trainer, window, logdir
    self.active = False

  def __getattr__(self, name):
    return getattr(self._trainer, name)

  def train(self, num_steps):
    step = self._trainer.step  # the loop's first step is step + 1
    if not self.active and self.window[0] - 1 <= step < self.window[1]:
      tf.profiler.experimental.start(self.logdir)
      self.active = True
      logging.info("Profiling steps %d..%d into %s/plugins/profile", step + 1,
                   self.window[1], self.logdir)
    output = self._trainer.train(num_steps)
    if self.active and output.step >= self.window[1]:
      self.close()
    return output

  def close(self):
    if self.active:
      tf.profiler.experimental.stop()
      self.active = False


class Evaluator:
  """Orbit's `StandardEvaluator`: it only evaluates.

  Args:
    eval_loop: `eval_step.make_eval_loop`'s function.
    datasets: {split name: a function returning the split's distributed
      eval dataset (every example once; the same object at each call,
      iterated afresh by each eval)}; "validation", and for MNLI
      "validation_mismatched" beside it.
    metric_names: what evals report beside loss (the Task's metrics).
    class_names: the Task's classes (a tagging eval's tags, by id).
    weights: a context in which the model holds the weights to evaluate
      (default: as they are).
  """

  def __init__(self,
               eval_loop,
               datasets,
               metric_names,
               weights=None,
               class_names=()):
    self._eval_loop, self.datasets = eval_loop, datasets
    self.metric_names = tuple(metric_names)
    self.class_names = tuple(class_names)
    self._weights = weights or contextlib.nullcontext

  def evaluate_split(self, name, averaged=True):
    """The metrics of one pass over split `name` (`eval_step.evaluate`),
    inside `weights()` (the state's `averaged`: --ema_decay's average)
    unless not `averaged` (the raw weights)."""
    with self._weights() if averaged else contextlib.nullcontext():
      return eval_step.evaluate(self._eval_loop, self.datasets[name](),
                                self.metric_names, self.class_names)

  def evaluate(self, averaged=True):
    """Validation's metrics, and beside them those of each other validation
    split under its prefix (MNLI: `mismatched_accuracy`, ...)."""
    out = self.evaluate_split("validation", averaged)
    for name in self.datasets:
      if not name.startswith("validation_"):
        continue
      extra = self.evaluate_split(name, averaged)
      out.update({
          tasks.metric_key(name, k): v
          for k, v in extra.items()
          if isinstance(v, (int, float))
      })
    return out
