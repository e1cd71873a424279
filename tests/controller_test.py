"""The loop's rules with a fake trainer, in milliseconds: loops end where
the plan says, a NaN rolls back past its batches (and gives up after
--max_nan_recoveries), patience stops training, a signal saves and exits
75. The same rules run real runs end to end in train_lib_test and
main_test."""

import os
import signal

import pytest

from trainer.commands import cli
from trainer.foundation import errors
from trainer.training import actions
from trainer.training import controller
from trainer.training import plan as plan_lib


class FakeTrainer:
  """The trainer contract (`train`, `step`, `latest_checkpoint`,
  `roll_back`) over plain numbers: a loop's loss is NaN when it consumes a
  batch in `nan_batches`; checkpoints are the steps `save` was called at,
  each with the data position it held."""

  def __init__(self, nan_batches=(), on_loop=None):
    self.step, self.position = 0, 0
    self.nan_batches = set(nan_batches)
    self.on_loop = on_loop or (lambda loop: None)
    self.checkpoints = {}  # step -> data position
    self.loops, self.rollbacks = [], []

  def train(self, num_steps):
    start, position = self.step, self.position
    self.step, self.position = start + num_steps, position + num_steps
    self.loops.append((start, self.step))
    self.on_loop(len(self.loops))
    bad = any(position <= b < self.position for b in self.nan_batches)
    return controller.LoopOutput(start, self.step, position,
                                 float("nan") if bad else 0.25, 1.0, 0.01,
                                 16 * num_steps)

  def save(self, step):
    self.checkpoints[step] = self.position

  def save_unless_saved(self):
    if self.step not in self.checkpoints:
      self.save(self.step)

  def latest_checkpoint(self):
    return f"ckpt-{max(self.checkpoints)}" if self.checkpoints else None

  def roll_back(self, checkpoint, position):
    self.rollbacks.append((checkpoint, position))
    self.step = int(checkpoint.split("-")[1])
    self.position = position


def _plan(total=20, steps_per_loop=4, eval_every=0, checkpoint_every=4):
  return plan_lib.Plan(
      steps_per_epoch=100,
      total_steps=total,
      warmup_steps=0,
      steps_per_loop=steps_per_loop,
      eval_every=eval_every,
      checkpoint_every=checkpoint_every)


def _checkpoints(trainer, plan):
  return actions.SaveCheckpoints(plan.checkpoint_due, trainer.save)


def test_loops_end_where_the_plan_says_and_every_action_sees_each():
  trainer, plan, seen = FakeTrainer(), _plan(total=10, checkpoint_every=6), []
  result = controller.train(
      trainer, plan, [lambda o: seen.append((o.start, o.step, o.examples))])
  assert trainer.loops == [(0, 4), (4, 6), (6, 10)]
  assert seen == [(0, 4, 64), (4, 6, 32), (6, 10, 64)]
  assert result.train_loss == 0.25 and result.recoveries == 0
  assert result.loop_times == [(64, 0.01), (32, 0.01), (64, 0.01)]
  assert not result.stopped_early


def test_nan_at_loop_k_rolls_back_past_its_batches():
  trainer, plan = FakeTrainer(nan_batches={9}), _plan()
  seen = []
  result = controller.train(
      trainer,
      plan, [_checkpoints(trainer, plan), lambda o: seen.append(o)],
      max_nan_recoveries=2)
  # Loop 3 (steps 8..12, batches 8..12) was bad: back to step 8, the data
  # at batch 12, so from then on 4 batches ahead of the step counter.
  assert trainer.rollbacks == [("ckpt-8", 12)]
  assert result.recoveries == 1 and trainer.step == 20
  assert trainer.checkpoints == {4: 4, 8: 8, 12: 16, 16: 20, 20: 24}
  assert all(o.finite for o in seen)  # no action saw the bad loop
  assert [(o.start, o.step) for o in seen] == [(0, 4), (4, 8), (8, 12),
                                               (12, 16), (16, 20)]


def test_repeated_nans_give_up_after_max_recoveries():
  trainer, plan = FakeTrainer(nan_batches={9, 13, 17}), _plan()
  with pytest.raises(errors.TrainingError) as info:
    controller.train(
        trainer, plan, [_checkpoints(trainer, plan)], max_nan_recoveries=2)
  assert str(info.value) == (
      "non-finite loss nan / grad norm 1.0 in steps 8..12 (batches 16..20); "
      "no checkpoint was written for them; gave up after 2 rollback(s) "
      "(--max_nan_recoveries=2). Lower --learning_rate or check the data.")
  assert [c for c, _ in trainer.rollbacks] == ["ckpt-8", "ckpt-8"]
  assert max(trainer.checkpoints) == 8  # nothing saved past the bad loops


def test_a_nan_before_any_checkpoint_is_an_error():
  trainer = FakeTrainer(nan_batches={1})
  with pytest.raises(errors.TrainingError, match="no checkpoint to roll back"):
    controller.train(trainer, _plan(), [])


def test_patience_stops_training(tmp_path):
  """Early stopping after two evals without a better loss: the real best
  checkpoint and early stopping followers, a fake trainer under them."""
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  trainer, plan = FakeTrainer(), _plan(total=40, eval_every=8)
  losses = iter([0.5, 0.4, 0.45, 0.41, 0.3])
  best = actions.BestCheckpoint(
      str(tmp_path), tf.train.Checkpoint(), None, "eval/loss")
  evaluations = actions.Evaluations(
      lambda: dict(loss=next(losses)),
      [best, actions.EarlyStopping(best, patience=2)])
  result = controller.train(trainer, plan, [
      actions.EvalEvery(plan.eval_due, evaluations),
      _checkpoints(trainer, plan)
  ])
  assert result.stopped_early and trainer.step == 32
  assert best.state == dict(value=0.4, step=16, evals_since_best=2)
  assert 32 not in trainer.checkpoints  # stopped before the loop's save


def test_a_signal_saves_and_exits_75(tmp_path, capsys):
  """SIGTERM during loop 2: the loop ends, a checkpoint is saved at its
  step, `Preempted` reaches the command's boundary, which exits 75."""
  trainer = FakeTrainer(
      on_loop=lambda k: k == 2 and os.kill(os.getpid(), signal.SIGTERM))
  trainer.manager = type("Manager", (), dict(directory=str(tmp_path)))

  def main(flag_values):
    del flag_values
    with actions.StopSignals() as signals:
      stop = actions.StopOnSignal(signals, trainer)
      controller.train(trainer, _plan(checkpoint_every=0), [stop])

  code = cli.invoke(cli.Command("fake", main, check_stack=False), [])
  assert code == 75 and trainer.loops == [(0, 4), (4, 8)]
  assert trainer.checkpoints == {8: 8}
  assert capsys.readouterr().err == (
      f"preempted: SIGTERM received: stopped after step 8 with a checkpoint "
      f"in {tmp_path}; run the same command again to resume\n")
