"""The step plan: durations and cadences in steps, resolved once.

Everything the loop needs to know about "when" is here, as steps: the run's
length and warmup (from epochs and the data, or --train_steps), where loops
end (every --steps_per_loop steps, and at every eval, checkpoint and
profile edge), and which loop ends with an eval or a checkpoint.
"""

import dataclasses
import math

from trainer.foundation import errors


@dataclasses.dataclass(frozen=True)
class Plan:
  """Steps of one run; `profile` is --profile_steps as (first, last)."""

  steps_per_epoch: int
  total_steps: int
  warmup_steps: int
  steps_per_loop: int = 1
  eval_every: int = 0
  checkpoint_every: int = 0
  profile: tuple | None = None

  def durations(self):
    """What config.json records as the plan."""
    return dict(
        steps_per_epoch=self.steps_per_epoch,
        total_steps=self.total_steps,
        warmup_steps=self.warmup_steps)

  def next_stop(self, step):
    """End of the loop that starts after `step` steps.

    Loops end every `steps_per_loop` steps, at every eval and checkpoint
    step, and where the profile window starts and stops (so it covers whole
    steps). Every worker of a multi-worker job cuts at the profile window,
    although only the chief profiles: all must run the same loops, as the
    collective ops require.
    """
    stop = min(self.total_steps, step + self.steps_per_loop)
    for every in (self.eval_every, self.checkpoint_every):
      if every:
        stop = min(stop, (step // every + 1) * every)
    if self.profile:
      for edge in (self.profile[0] - 1, self.profile[1]):
        if step < edge < stop:
          stop = edge
    return stop

  def eval_due(self, stop):
    """An eval between loops (the final one is the run's own)."""
    return bool(self.eval_every and stop % self.eval_every == 0 and
                stop < self.total_steps)

  def checkpoint_due(self, stop):
    return bool(self.checkpoint_every and stop % self.checkpoint_every == 0)


def make_plan(train_examples,
              batch_size,
              epochs=1.0,
              train_steps=0,
              warmup_fraction=0.0,
              steps_per_loop=1,
              eval_every=0,
              checkpoint_every=0,
              profile=None,
              steps_per_epoch=None):
  """The Plan of a training split of `train_examples` usable examples:
  `train_steps` steps, or `epochs` passes of `steps_per_epoch` full batches
  (default examples // batch_size; length buckets fill their batches
  apart: `buckets.steps_per_epoch`); `profile` is --profile_steps as
  (first, last) or None."""
  if steps_per_epoch is None:
    steps_per_epoch = train_examples // batch_size
  if steps_per_epoch < 1:
    raise errors.TrainingError(
        f"the training split has {train_examples} usable examples, fewer "
        f"than one global batch (--batch_size={batch_size}); lower "
        "--batch_size or add data")
  total = train_steps or max(1, int(math.ceil(epochs * steps_per_epoch)))
  return Plan(
      steps_per_epoch=steps_per_epoch,
      total_steps=total,
      warmup_steps=int(round(warmup_fraction * total)),
      steps_per_loop=steps_per_loop,
      eval_every=eval_every,
      checkpoint_every=checkpoint_every,
      profile=profile)
