"""finish.finish with fakes, as the controller is tested: what the end of a
run saves, evaluates, restores, writes and exports, in milliseconds.

The weights are a number: the fake state's `weights` (the model the
evaluator sees), its checkpoints a dict from path to weights.
"""

import json

import pytest

from trainer.foundation import errors
from trainer.foundation import layout
from trainer.runtime import run_dir
from trainer.training import actions
from trainer.training import controller
from trainer.training import finish


class FakeState:

  def __init__(self, step, weights, average=None, buckets=None):
    self.step, self.weights, self.average = step, weights, average
    self.checkpoints = {}
    self.saves = 0
    self.bucket_steps = dict(buckets or {})

  @property
  def has_average(self):
    return self.average is not None

  def save_unless_saved(self):
    self.saves += 1
    self.checkpoints[f"ckpt-{self.step}"] = (self.step, self.weights)

  def restore(self, path):
    self.step, self.weights = self.checkpoints[path]

  def steps_per_shape(self, shapes):
    return {b: self.bucket_steps[b] for b in shapes if b in self.bucket_steps}

  def loss_scale_scalars(self):
    return {}


class FakeEvaluator:
  """accuracy = the weights / 10; the moving average stands for the weights
  unless `averaged=False`."""

  def __init__(self, state):
    self.state, self.calls = state, []

  def evaluate_split(self, name, averaged=True):
    self.calls.append((name, averaged, self.state.step))
    weights = self.state.weights
    if averaged and self.state.has_average:
      weights = self.state.average
    return dict(accuracy=weights / 10, loss=1 - weights / 10, examples=50)

  def evaluate(self, averaged=True):
    return self.evaluate_split("validation", averaged)


class FakeBest:

  def __init__(self, step, latest=None):
    self.step, self.latest = step, latest
    self.metric = "eval/accuracy"
    self.state = dict(value=0.9 if step else None)


class FakeStop:

  def __init__(self, signalled=False):
    self.signalled, self.checked = signalled, []

  def check(self, step, save=True):
    self.checked.append((step, save))
    if self.signalled:
      raise errors.Preempted("stopped by SIGTERM; rerun to resume")


def _counts(test_rows=0):
  split = lambda n: dict(rows_read=n, rows_used=n, rejected={})  # noqa: E731
  counts = dict(train=split(100), validation=split(50))
  if test_rows:
    counts["test"] = split(test_rows)
  return counts


def _facts(counts=None, buckets=(16, 32)):
  return finish.RunFacts(
      start_step=0,
      total_steps=20,
      replicas=2,
      route=type("Route", (), dict(precision="float32"))(),
      layout=layout.Layout(
          seq_length=buckets[-1], batch_size=32, lengths=tuple(buckets)),
      counts=counts or _counts())


def _finish(tmp_path,
            state,
            best,
            *,
            facts=None,
            stop=None,
            exporter=None,
            chief=True,
            evaluations=None):
  evaluator = FakeEvaluator(state)
  evaluations = evaluations or actions.Evaluations(evaluator.evaluate)
  (tmp_path / "run").mkdir(exist_ok=True)
  out = run_dir.locations(str(tmp_path / "run"), "", "", "")
  result = controller.TrainResult(
      train_loss=0.25, loop_times=[(64, 10.0), (128, 2.0), (128, 2.0)])
  summary = finish.finish(
      result,
      state,
      evaluator,
      evaluations,
      best,
      facts or _facts(),
      out=out,
      stop=stop or FakeStop(),
      exporter=exporter,
      chief=chief)
  return summary, evaluator, out


def test_final_model_summary_with_every_key(tmp_path):
  state = FakeState(20, 8, buckets={16: 12, 32: 8, 64: 0})
  summary, evaluator, out = _finish(tmp_path, state, FakeBest(20))
  assert state.saves == 1 and evaluator.calls == [("validation", True, 20)]
  assert summary == {
      "final_step": 20,
      "best_step": 20,
      "best_metric": {
          "eval/accuracy": 0.9
      },
      "stopped_early": False,
      "start_step": 0,
      "train_loss": 0.25,
      "eval_examples": 50,
      "examples_per_second": 64.0,  # (128 + 128) / 4 s: the first loop traces
      "examples": {
          "train": 100,
          "validation": 50
      },
      "nan_recoveries": 0,
      "replicas": 2,
      "total_steps": 20,
      "precision": "float32",
      "buckets": [16, 32],
      "steps_per_bucket": {
          "16": 12,
          "32": 8
      },
      "eval_accuracy": 0.8,
      "eval_loss": pytest.approx(0.2),
      "data.train.rows_read": 100,
      "data.train.rows_used": 100,
      "data.validation.rows_read": 50,
      "data.validation.rows_used": 50,
  }
  with open(out.summary_json) as f:
    assert json.load(f) == summary


def test_best_checkpoint_restored_and_evaluated_again(tmp_path):
  state = FakeState(20, 8)
  state.checkpoints["best-12"] = (12, 9)
  summary, evaluator, _ = _finish(tmp_path, state, FakeBest(12, "best-12"))
  # The final model is evaluated, then the best one it hands over.
  assert evaluator.calls == [("validation", True, 20), ("validation", True, 12)]
  assert state.step == 12 and state.weights == 9
  assert summary["final_step"] == 20 and summary["best_step"] == 12
  assert summary["eval_accuracy"] == 0.9


def test_final_eval_reuses_the_last_loops_eval(tmp_path):
  state = FakeState(20, 8)
  evaluator = FakeEvaluator(state)
  evaluations = actions.Evaluations(evaluator.evaluate)
  evaluations.at(20)  # the loop's eval at the last step
  summary, fresh, _ = _finish(
      tmp_path, state, FakeBest(20), evaluations=evaluations)
  assert fresh.calls == [] and len(evaluator.calls) == 1
  assert summary["eval_accuracy"] == 0.8


def test_moving_average_reports_raw_metrics_beside(tmp_path):
  state = FakeState(20, 6, average=8)
  summary, evaluator, _ = _finish(tmp_path, state, FakeBest(20))
  assert summary["eval_accuracy"] == 0.8  # the average serves
  assert summary["eval_raw_accuracy"] == 0.6
  assert evaluator.calls == [("validation", True, 20),
                             ("validation", False, 20)]


def test_test_split_evaluated_when_it_has_rows(tmp_path):
  state = FakeState(20, 7)
  summary, evaluator, _ = _finish(
      tmp_path, state, FakeBest(20), facts=_facts(_counts(test_rows=30)))
  assert ("test", True, 20) in evaluator.calls
  assert summary["test_accuracy"] == 0.7
  assert summary["data.test.rows_used"] == 30


def test_export_after_summary_and_its_folder_recorded(tmp_path):
  state = FakeState(20, 8)
  seen = []

  def exporter():
    with open(tmp_path / "run" / "summary.json") as f:
      seen.append("export_dir" in json.load(f))  # summary first
    return "/exports/20"

  summary, _, out = _finish(tmp_path, state, FakeBest(20), exporter=exporter)
  assert seen == [False] and summary["export_dir"] == "/exports/20"
  with open(out.summary_json) as f:
    assert json.load(f)["export_dir"] == "/exports/20"


def test_signal_during_finish_stops_before_the_export(tmp_path):
  state = FakeState(20, 8)
  exported, stop = [], FakeStop(signalled=True)
  with pytest.raises(errors.Preempted):
    _finish(
        tmp_path,
        state,
        FakeBest(20),
        stop=stop,
        exporter=lambda: exported.append(1))
  assert exported == [] and state.saves == 1
  # Its check saves nothing: the state may hold the best model by now.
  assert stop.checked == [(20, False)]
  # The rerun finds the summary written and every step saved.
  assert (tmp_path / "run" / "summary.json").exists()


def test_worker_removes_its_private_folder(tmp_path):
  state = FakeState(20, 8)
  summary, _, out = _finish(tmp_path, state, FakeBest(20), chief=False)
  assert summary["final_step"] == 20
  assert not (tmp_path / "run").exists()


def test_patience_running_out_at_the_final_eval_still_finishes(tmp_path):
  """Early stopping's follower raises StopTraining at the final eval (no
  better than the best, patience used up): the run still finishes with
  that eval, once."""
  state = FakeState(20, 8)
  evaluator = FakeEvaluator(state)

  def early_stopping(step, metrics):
    del step, metrics
    raise controller.StopTraining("no better eval/accuracy in 1 evals")

  evaluations = actions.Evaluations(evaluator.evaluate, [early_stopping])
  summary, _, _ = _finish(
      tmp_path, state, FakeBest(20), evaluations=evaluations)
  assert summary["eval_accuracy"] == 0.8 and len(evaluator.calls) == 1
