"""The loop's rules (Orbit's `Controller`): loops of steps, then actions.

`train(trainer, plan, actions, max_nan_recoveries)` asks the trainer for
one loop of steps at a time (`trainer.train(num_steps) -> LoopOutput`, up
to the plan's next stop) and hands each loop's output to the actions, the
small callables that do the work between loops (progress, summaries, the
eval every N steps and its followers, checkpoints, the stop on a signal).
Three rules live here and nowhere else:

- a loop whose loss or gradient norm is not finite rolls the trainer back to
  its newest checkpoint, past the bad loop's batches, at most
  `max_nan_recoveries` times (detection comes before any action, so no
  checkpoint of the bad steps is ever written);
- an action that raises `StopTraining` (early stopping) ends the loops;
- an action that raises `Preempted` (a signal) ends the run, its checkpoint
  saved by that action.

Nothing here imports TensorFlow: the trainer is any object with `step`,
`train(num_steps)`, `latest_checkpoint()` and `roll_back(checkpoint,
position)`, so the rules are tested with a fake trainer in milliseconds.
"""

import dataclasses
import math

from absl import logging

from trainer.foundation import errors


class StopTraining(Exception):
  """Raised by an action to end training before the last step (early
  stopping); the message says why. The run then finishes as usual."""


@dataclasses.dataclass(frozen=True)
class LoopOutput:
  """What one loop did: steps `start` (done before it) to `step` (done
  after it), from data position `position` (batches consumed before it).

  `loss` is the mean over the loop's steps, `grad_norm` over the steps that
  applied their update; `learning_rate` is the loop's last update's;
  `scalars` more train summaries (float16's loss scale and skipped steps).
  """

  start: int
  step: int
  position: int
  loss: float
  grad_norm: float
  seconds: float
  examples: int
  learning_rate: float = 0.0
  scalars: dict = dataclasses.field(default_factory=dict)

  @property
  def finite(self):
    return math.isfinite(self.loss) and math.isfinite(self.grad_norm)

  @property
  def examples_per_second(self):
    return self.examples / self.seconds if self.seconds > 0 else 0.0

  @property
  def end_position(self):
    """The data position after the loop's batches."""
    return self.position + self.step - self.start


@dataclasses.dataclass
class TrainResult:
  """What `train` saw: the last loop's loss, rollbacks, early stop and
  (examples, seconds) per loop."""

  train_loss: float = float("nan")
  recoveries: int = 0
  stopped_early: bool = False
  loop_times: list = dataclasses.field(default_factory=list)


def _roll_back(trainer, output, recoveries, max_nan_recoveries):
  """After a non-finite loop: back to the newest checkpoint, past the bad
  loop's batches, or a TrainingError when that is not possible."""
  where = (f"non-finite loss {output.loss} / grad norm {output.grad_norm} "
           f"in steps {output.start}..{output.step} (batches "
           f"{output.position}..{output.end_position})")
  latest = trainer.latest_checkpoint()
  if recoveries > max_nan_recoveries or latest is None:
    reason = (f"gave up after {recoveries - 1} rollback(s) "
              f"(--max_nan_recoveries={max_nan_recoveries})"
              if latest else "no checkpoint to roll back to")
    raise errors.TrainingError(
        f"{where}; no checkpoint was written for them; {reason}. Lower "
        "--learning_rate or check the data.")
  trainer.roll_back(latest, output.end_position)
  logging.warning(
      "%s: rolled back to %s and skipping to batch %d (recovery %d of %d)",
      where, latest, output.end_position, recoveries, max_nan_recoveries)


def train(trainer, plan, actions=(), max_nan_recoveries=2):
  """Loops until `plan.total_steps`, an early stop or a preemption.

  Args:
    trainer: `train(num_steps) -> LoopOutput`, `step`, `latest_checkpoint()`,
      `roll_back(checkpoint, position)` (`trainer.training.trainer.Trainer`).
    plan: the `plan.Plan` (its `total_steps` and `next_stop`).
    actions: callables of a LoopOutput, called in order after each loop
      that ended finite.
    max_nan_recoveries: rollbacks allowed before a non-finite loop is an
      error.

  Returns:
    A TrainResult.
  """
  result = TrainResult()
  while trainer.step < plan.total_steps:
    output = trainer.train(plan.next_stop(trainer.step) - trainer.step)
    if not output.finite:
      result.recoveries += 1
      _roll_back(trainer, output, result.recoveries, max_nan_recoveries)
      continue
    result.train_loss = output.loss
    result.loop_times.append((output.examples, output.seconds))
    try:
      for action in actions:
        action(output)
    except StopTraining as stop:
      logging.info("Early stopping at step %d: %s", output.step, stop)
      result.stopped_early = True
      break
  return result


def throughput(loop_times):
  """Examples per second over the loops after the first (which traces);
  `loop_times` holds (examples, seconds) per loop."""
  timed = loop_times[1:] or loop_times
  seconds = sum(s for _, s in timed)
  return sum(e for e, _ in timed) / seconds if seconds else None
