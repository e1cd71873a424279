"""The between-loop actions: the stop on a signal, the eval and its
followers (summaries, the best checkpoint, early stopping), checkpoints,
train summaries, the progress line."""

import json
import os
import signal

import numpy as np
import pytest
import tensorflow as tf

from trainer.foundation import errors
from trainer.training import actions
from trainer.training import controller


class _State:
  """Stands in for a TrainState at the boundary: counts its saves."""

  def __init__(self, directory):
    self.manager = type("M", (), dict(directory=directory))
    self.saves = 0

  def save_unless_saved(self):
    self.saves += 1


def test_a_stop_signal_saves_then_raises_preempted(tmp_path):
  state = _State(str(tmp_path))
  with actions.StopSignals() as signals:
    signals.check(state, 10)  # nothing arrived
    os.kill(os.getpid(), signal.SIGTERM)
    with pytest.raises(errors.Preempted) as info:
      signals.check(state, 20)
  assert state.saves == 1 and info.value.exit_code == 75
  assert str(info.value) == (
      f"SIGTERM received: stopped after step 20 with a checkpoint in "
      f"{tmp_path}; run the same command again to resume")


def test_best_keeper_and_evaluator(tmp_path):
  """The best checkpoint and early stopping follow the evals; the same step
  is evaluated once; a resumed run keeps counting."""
  variable = tf.Variable(0.0)
  checkpoint = tf.train.Checkpoint(v=variable)
  losses = iter([0.5, 0.4, 0.45, 0.41])
  calls = []

  def evaluate():
    calls.append(1)
    return dict(
        loss=next(losses),
        accuracy=0.5,
        examples=10,
        confusion=np.array([[3, 2], [3, 2]]),
        histograms=(np.arange(200) % 2, np.zeros(200, np.int64)))

  best = actions.BestCheckpoint(str(tmp_path), checkpoint, None, "eval/loss")
  writer = tf.summary.create_file_writer(str(tmp_path / "eval"))
  seen = []
  evaluations = actions.Evaluations(evaluate, [
      actions.log_eval,
      actions.EvalSummaries(writer, ["neg", "pos"]), best,
      actions.EarlyStopping(best, patience=2), lambda step, m: seen.append(step)
  ])
  for step in (5, 10, 15):
    evaluations.at(step)
  assert evaluations.at(15)["loss"] == 0.45 and len(calls) == 3  # cached
  assert seen == [5, 10, 15]
  with pytest.raises(controller.StopTraining) as info:
    evaluations.at(20)  # two evals without a better loss
  assert str(info.value) == "no better eval/loss in 2 evals"
  assert json.load(open(tmp_path / "best.json")) == dict(
      value=0.4, step=10, evals_since_best=2)
  resumed = actions.BestCheckpoint(str(tmp_path), checkpoint, None, "eval/loss")
  assert resumed.state["step"] == 10 and resumed.step == 10
  assert tf.train.latest_checkpoint(str(tmp_path)).endswith("best-10")
  assert resumed.latest.endswith("best-10")
  actions.EarlyStopping(resumed, patience=0)(25, {})  # 0: never stops


def _output(step, **kwargs):
  values = dict(
      start=step - 5,
      step=step,
      position=step - 5,
      loss=0.5,
      grad_norm=2.0,
      seconds=0.5,
      examples=80,
      learning_rate=1e-4)
  values.update(kwargs)
  return controller.LoopOutput(**values)


def test_checkpoints_and_evals_fall_where_the_plan_says(tmp_path):
  saved, evaluated = [], []
  save = actions.SaveCheckpoints(lambda step: step % 10 == 0, saved.append)
  evals = actions.EvalEvery(
      lambda step: step % 15 == 0,
      actions.Evaluations(lambda: evaluated.append(1) or dict(loss=1.0)))
  for step in (5, 10, 15, 20, 25, 30):
    save(_output(step))
    evals(_output(step))
  assert saved == [10, 20, 30] and len(evaluated) == 2


def test_train_summaries_are_the_loops_figures(tmp_path):
  writer = tf.summary.create_file_writer(str(tmp_path))
  actions.TrainSummaries(writer)(
      _output(10, scalars={"train/loss_scale": 1024.0}))
  writer.flush()
  found = {}
  for name in os.listdir(tmp_path):
    for event in tf.compat.v1.train.summary_iterator(str(tmp_path / name)):
      for value in event.summary.value:
        found[value.tag] = (event.step, float(tf.make_ndarray(value.tensor)))
  assert found == {
      "train/loss": (10, 0.5),
      "train/learning_rate": (10, pytest.approx(1e-4)),
      "train/grad_norm": (10, 2.0),
      "train/examples_per_second": (10, 160.0),
      "train/loss_scale": (10, 1024.0)
  }


def test_progress_line():
  progress = actions.Progress(total=100, batch_size=32, tty=False)
  assert progress.line(
      40, 0.12345, 3e-5,
      64.0) == ("step 40/100 loss 0.1235 lr 3e-05 64.0 examples/s ETA 00:00:30")


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
def test_sigterm_and_sigint_become_a_stop_request(sig):
  # Whatever the handlers were (a shell's background job starts with SIGINT
  # ignored), they are what StopSignals restores.
  before = {s: signal.getsignal(s) for s in (signal.SIGTERM, signal.SIGINT)}
  with actions.StopSignals() as signals:
    assert signals.received is None
    os.kill(os.getpid(), sig)
    assert signals.received == sig.name
  assert {s: signal.getsignal(s) for s in before} == before


@pytest.mark.parametrize("exiting", [False, True])
def test_after_a_signal_an_exiting_process_ignores_the_next(exiting):
  """The command (exiting) ignores SIGINT/SIGTERM once a signal stopped
  its run, so a second Ctrl-C cannot turn exit code 75 into 130; the
  Python API (a notebook) gets its own handlers back."""
  before = [signal.getsignal(s) for s in (signal.SIGINT, signal.SIGTERM)]
  with actions.StopSignals(exiting=exiting) as signals:
    os.kill(os.getpid(), signal.SIGINT)
    assert signals.received == "SIGINT"
  after = [signal.getsignal(s) for s in (signal.SIGINT, signal.SIGTERM)]
  signal.signal(signal.SIGINT, before[0])
  signal.signal(signal.SIGTERM, before[1])
  if exiting:
    assert after == [signal.SIG_IGN, signal.SIG_IGN]
  else:
    assert after == before
