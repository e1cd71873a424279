"""The outer loop's pieces alone, in process: setup/train/finish on the
demo, the checkpoint layout and restore order, the between-loop actions,
the run folder's JSON, and the Python API in a plain interpreter."""

import dataclasses
import glob
import json
import os
import re
import signal
import sys

import numpy as np
import pytest
import tensorflow as tf

from conftest import ROOT
from conftest import run_module
from conftest import run_process
from trainer.base import checks
from trainer.loop import actions
from trainer.model import checkpoints
from trainer.base import config as config_lib
from trainer.base import errors
from trainer.model import classifier as model_lib
from trainer.base import run_dir
from trainer.loop import train_lib


def _config(tmp_path, demo_paths, **kwargs):
  values = dict(
      model_dir=str(tmp_path / "run"),
      demo_cache_dir=demo_paths["root"],
      train_steps=8,
      steps_per_loop=4,
      eval_every=4,
      checkpoint_every=4,
      batch_size=16,
      seq_length=32,
      learning_rate=1e-3,
      export=False)
  values.update(kwargs)
  return checks.validate(config_lib.Config(**values))


@pytest.fixture(scope="module")
def trained(tmp_path_factory, demo_paths):
  """A run set up, trained and finished in this process (8 steps)."""
  tmp_path = tmp_path_factory.mktemp("train_lib")
  with actions.StopSignals() as signals:
    run = train_lib.setup(_config(tmp_path, demo_paths))
    setup_view = dict(step=run.state.step, plan=run.plan.durations())
    result = train_lib.train(run, signals)
    summary = train_lib.finish(run, result, signals)
    run.close()
  return tmp_path, run, setup_view, result, summary


def test_setup_resolves_everything_once(trained):
  _, run, setup_view, _, _ = trained
  assert setup_view == dict(
      step=0, plan=dict(steps_per_epoch=250, total_steps=8, warmup_steps=1))
  assert run.chief and run.out == run.shared
  assert run.out.checkpoints == os.path.join(run.config.model_dir,
                                             "checkpoints")
  assert run.route.note == "precision: float32" and not run.route.jit_compile
  assert {
      k: v["rows_used"] for k, v in run.counts.items()
  } == {
      "train": 4000,
      "validation": 1000
  }
  assert run.plan.next_stop(0) == 4


def test_train_and_finish(trained):
  tmp_path, run, _, result, summary = trained
  assert run.state.step == 8 and len(result.loop_times) == 2
  assert np.isfinite(result.train_loss) and result.recoveries == 0
  assert summary["final_step"] == 8 and summary["start_step"] == 0
  assert summary["eval_examples"] == 1000
  assert summary == json.load(open(run.out.summary_json))
  names = [
      os.path.basename(p) for p in tf.train.get_checkpoint_state(
          run.out.checkpoints).all_model_checkpoint_paths
  ]
  assert names == ["ckpt-4", "ckpt-8"]
  written = json.load(open(run.out.config_json))
  assert written["plan"] == run.plan.durations()
  assert written["config"] == dataclasses.asdict(run.config)
  del tmp_path


def test_a_second_setup_resumes_where_the_first_stopped(trained, demo_paths):
  tmp_path, run, _, _, _ = trained
  again = train_lib.setup(
      dataclasses.replace(run.config, train_steps=12, checkpoint_every=0))
  again.close()
  assert again.start_step == 8 and again.state.data_position == 8
  for mine, theirs in zip(again.state.model.trainable_variables,
                          run.state.model.trainable_variables):
    np.testing.assert_array_equal(mine.numpy(), theirs.numpy())
  del tmp_path, demo_paths


def test_the_checkpoint_layout_and_reading_it_back(trained):
  _, run, _, _, _ = trained
  path = tf.train.latest_checkpoint(run.out.checkpoints)
  names = {name for name, _ in tf.train.list_variables(path)}
  for name in ("model/kernel/.ATTRIBUTES/VARIABLE_VALUE",
               "model/bias/.ATTRIBUTES/VARIABLE_VALUE",
               "optimizer/iterations/.ATTRIBUTES/VARIABLE_VALUE",
               "encoder_variables/0/.ATTRIBUTES/VARIABLE_VALUE",
               "data_skip/.ATTRIBUTES/VARIABLE_VALUE"):
    assert name in names
  # The export's view: weights and step, no optimizer slots.
  preprocessor, encoder = model_lib.load(
      "demo",
      "demo",
      tf.distribute.get_strategy(),
      demo_cache_dir=run.config.demo_cache_dir)
  del preprocessor
  model = model_lib.Classifier(encoder, 2, seed=99)
  ckpt, step = checkpoints.for_reading(model, encoder)
  ckpt.restore(path).expect_partial().assert_existing_objects_matched()
  assert int(step.numpy()) == 8
  np.testing.assert_array_equal(model.kernel.numpy(),
                                run.state.model.kernel.numpy())


def test_the_checkpoint_to_export(trained, tmp_path):
  _, run, _, _, _ = trained
  where = run.out
  # The best (by eval loss) of this run is a `best-N` checkpoint.
  assert os.path.basename(
      checkpoints.for_export(where.checkpoints, where.best)).startswith("best-")
  explicit = os.path.join(where.checkpoints, "ckpt-4")
  assert checkpoints.for_export(where.checkpoints, where.best,
                                explicit) == explicit
  assert checkpoints.for_export(where.checkpoints,
                                str(tmp_path)).endswith("ckpt-8")
  with pytest.raises(errors.ExportError, match="no such checkpoint"):
    checkpoints.for_export(where.checkpoints, where.best, explicit + "x")
  with pytest.raises(errors.ExportError, match="no checkpoint to export in"):
    checkpoints.for_export(str(tmp_path), str(tmp_path))
  # A worker reads the chief's state as it is; the chief repairs first.
  assert checkpoints.resume_point(
      where.checkpoints, chief=False).endswith("ckpt-8")
  assert checkpoints.resume_point(str(tmp_path / "none")) is None


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

  best = actions.BestKeeper(
      str(tmp_path), checkpoint, None, "eval/loss", patience=2)
  writer = tf.summary.create_file_writer(str(tmp_path / "eval"))
  evaluator = actions.Evaluator(evaluate, writer, best, ["neg", "pos"])
  stops = [evaluator(step)[1] for step in (5, 10, 15)]
  assert evaluator(15)[1] is False and len(calls) == 3  # cached
  assert stops == [False, False, False]
  assert evaluator(20)[1] is True  # two evals without a better loss
  assert json.load(open(tmp_path / "best.json")) == dict(
      value=0.4, step=10, evals_since_best=2)
  resumed = actions.BestKeeper(
      str(tmp_path), checkpoint, None, "eval/loss", patience=2)
  assert resumed.state["step"] == 10
  assert tf.train.latest_checkpoint(str(tmp_path)).endswith("best-10")


def test_progress_line():
  progress = actions.Progress(total=100, batch_size=32, tty=False)
  assert progress.line(
      40, 0.12345, 3e-5,
      64.0) == ("step 40/100 loss 0.1235 lr 3e-05 64.0 examples/s ETA 00:00:30")


def test_json_state_is_replaced_whole(tmp_path):
  path = str(tmp_path / "state.json")
  run_dir.write_json(path, dict(a=1))
  run_dir.write_json(path, dict(b=[1, 2]))
  assert os.listdir(tmp_path) == ["state.json"]  # no temporary left
  assert run_dir.read_json(path) == dict(b=[1, 2])
  (tmp_path / "broken.json").write_text('{"a": ')
  assert run_dir.read_json(str(tmp_path / "broken.json")) is None
  assert run_dir.read_json(str(tmp_path / "missing.json")) is None


def test_locations():
  c = config_lib.Config(model_dir="gs://b/r", summary_dir="gs://b/tb")
  where = run_dir.locations(c)
  assert (where.checkpoints, where.best, where.summaries,
          where.export_dir(7)) == ("gs://b/r/checkpoints",
                                   "gs://b/r/checkpoints/best", "gs://b/tb",
                                   "gs://b/r/export/7")
  worker = run_dir.for_worker("gs://b/r", 2)
  assert worker.model_dir == "gs://b/r/.worker-2-tmp"
  assert worker.checkpoints == "gs://b/r/.worker-2-tmp/checkpoints"


_NOTEBOOK = r"""
import json, sys
from trainer import Config, fit
summary = fit(Config(model_dir=sys.argv[1], demo_cache_dir=sys.argv[2],
                     train_steps=12, deterministic=True))
print(json.dumps(summary))
"""


@pytest.mark.slow
def test_python_api_runs_the_demo_as_the_command_does(tmp_path, demo_paths):
  """`fit(Config(...))` in a plain interpreter (no absl app.run, as in a
  notebook) does what `python -m trainer.main` with those flags does:
  the same completed config and, with --deterministic, the same model."""
  api_dir, cli_dir = str(tmp_path / "api"), str(tmp_path / "cli")
  env = dict(os.environ, PYTHONPATH=ROOT, TF_CPP_MIN_LOG_LEVEL="2")
  api = run_process(
      [sys.executable, "-c", _NOTEBOOK, api_dir, demo_paths["root"]],
      cwd=str(tmp_path),
      env=env)
  assert api.returncode == 0, api.stderr[-3000:]
  assert "step 12/12" in api.stderr  # the log reaches a notebook's cell
  summary = json.loads(api.stdout.strip().splitlines()[-1])
  cli = run_module("trainer.main", f"--model_dir={cli_dir}",
                   f"--demo_cache_dir={demo_paths['root']}", "--train_steps=12",
                   "--deterministic")
  assert cli.returncode == 0, cli.stderr[-3000:]
  # A quiet run: every line the terminal gets is one of this project's
  # (TensorFlow's start-up and INFO lines filtered), and train.log holds
  # those from the lock on.
  ours = re.compile(r"I\d{4} [\d:.]+ +\d+ (\w+)\.py:\d+\] .+")
  printed = cli.stderr.splitlines()
  modules = {m.group(1) for m in map(ours.fullmatch, printed) if m}
  assert printed and all(ours.fullmatch(line) for line in printed), printed
  assert modules <= {
      os.path.basename(n)[:-3]
      for n in glob.glob(os.path.join(ROOT, "trainer", "**", "*.py"),
                         recursive=True)
  }
  logged = open(os.path.join(cli_dir, "train.log")).read().splitlines()
  assert logged == printed[printed.index(logged[0]):]
  assert [line for line in logged if "step 12/12 loss" in line]
  assert "Done at step 12: eval accuracy" in logged[-1]
  configs = [
      json.load(open(os.path.join(d, "config.json")))["config"]
      for d in (api_dir, cli_dir)
  ]
  assert configs[0]["seq_length"] == 32  # the demo's default, applied
  assert dict(configs[0], model_dir="") == dict(configs[1], model_dir="")
  by_cli = json.load(open(os.path.join(cli_dir, "summary.json")))
  assert summary["eval_loss"] == by_cli["eval_loss"]
  assert summary["export_dir"].startswith(api_dir)
  assert sorted(summary) == sorted(by_cli)


def test_python_api_raises_the_commands_errors():
  with pytest.raises(errors.ConfigError) as info:
    train_lib.fit(config_lib.Config(warmup_fraction=1.5))
  assert str(info.value) == "--warmup_fraction=1.5 is invalid: must be in " \
                            "[0, 1]"


def test_float16_tracks_float32_and_a_float32_run_resumes_in_float16(
    tmp_path, demo_paths, monkeypatch):
  """--precision=float16 on the demo: same eval within float16's rounding,
  its loss scale and skipped steps in summary.json and the checkpoint; a
  float32 run's checkpoint (no loss scale) resumes in float16, and a real
  divergence there (an injected NaN loss) still rolls back, without
  counting as a skipped overflow."""
  common = dict(
      train_steps=40, steps_per_loop=20, eval_every=0, checkpoint_every=20)
  summaries = {}
  for precision in ("float32", "float16"):
    summaries[precision] = train_lib.run(
        _config(
            tmp_path / precision,
            demo_paths,
            precision=precision,
            model_dir=str(tmp_path / precision),
            **common))
  f32, f16 = summaries["float32"], summaries["float16"]
  assert f16["precision"] == "float16" and f32["precision"] == "float32"
  assert f16["loss_scale"] == 2.0**15 and f16["skipped_steps"] == 0
  assert "loss_scale" not in f32
  assert abs(f16["eval_loss"] - f32["eval_loss"]) < 0.02, (f16, f32)
  assert abs(f16["eval_accuracy"] - f32["eval_accuracy"]) <= 0.01
  saved = json.load(open(tmp_path / "float16" / "config.json"))
  assert saved["precision"] == "float16"
  assert saved["precision_note"].startswith("precision: float16 matmuls")
  names = dict(
      tf.train.list_variables(
          tf.train.latest_checkpoint(str(tmp_path / "float16" /
                                         "checkpoints"))))
  assert {
      "loss_scale/scale/.ATTRIBUTES/VARIABLE_VALUE",
      "loss_scale/skipped/.ATTRIBUTES/VARIABLE_VALUE"
  } <= set(names)

  monkeypatch.setenv("BERT_TRAINER_FAULT_NAN_BATCHES", "45")
  resumed = train_lib.run(
      _config(
          tmp_path / "float32",
          demo_paths,
          precision="float16",
          model_dir=str(tmp_path / "float32"),
          **dict(common, train_steps=60, steps_per_loop=10)))
  assert resumed["start_step"] == 40 and resumed["final_step"] == 60
  assert resumed["precision"] == "float16" and resumed["skipped_steps"] == 0
  assert resumed["nan_recoveries"] == 1
