"""The step plan: durations, loop boundaries, eval and checkpoint cadence."""

import pytest

from trainer.foundation import errors
from trainer.training import plan as plan_lib


def _plan(**kwargs):
  values = dict(steps_per_epoch=100, total_steps=100, warmup_steps=10)
  values.update(kwargs)
  return plan_lib.Plan(**values)


def test_loop_boundaries_fall_on_evals_checkpoints_and_the_profile():
  plan = _plan(steps_per_loop=30, eval_every=25, checkpoint_every=40)
  stops, step = [], 0
  while step < plan.total_steps:
    step = plan.next_stop(step)
    stops.append(step)
  assert stops == [25, 40, 50, 75, 80, 100]
  assert [s for s in stops if plan.eval_due(s)] == [25, 50, 75]
  assert [s for s in stops if plan.checkpoint_due(s)] == [40, 80]
  profiled = _plan(steps_per_loop=30, profile=(7, 9))
  assert [profiled.next_stop(s) for s in (0, 6, 9)] == [6, 9, 39]


def test_make_plan_in_steps():
  plan = plan_lib.make_plan(1000, 32, epochs=2.5, warmup_fraction=0.1)
  assert plan.durations() == dict(
      steps_per_epoch=31, total_steps=78, warmup_steps=8)
  fixed = plan_lib.make_plan(
      1000, 32, epochs=2.5, train_steps=5, warmup_fraction=0.1)
  assert fixed.total_steps == 5 and fixed.warmup_steps == 0
  with pytest.raises(
      errors.TrainingError,
      match=r"the training split has 10 usable examples, fewer than one "
      r"global batch \(--batch_size=32\)"):
    plan_lib.make_plan(10, 32, epochs=2.5, warmup_fraction=0.1)
