"""A whole run, in process: setup/train/finish on the demo, float16, a
NaN's rollback and early stopping in real runs, the GLUE tasks on TFDS's
mock, a job on TensorFlow's in-memory filesystem, and the Python API in a
plain interpreter."""

import dataclasses
import glob
import json
import os
import re
import sys

from absl import flags
import numpy as np
import pytest
import tensorflow as tf
import tensorflow_datasets as tfds

from conftest import ROOT
from conftest import run_module
from conftest import run_process
from conftest import tiny_config
from benchmarks import kill_resume
from trainer.commands import cli
from trainer.foundation import config as config_lib
from trainer.foundation import errors
from trainer.foundation import tasks
from trainer.serving import export
from trainer.serving import exported
from trainer.serving import run_folder
from trainer.training import actions
from trainer.training import launch
from trainer.training import train_lib


def _config(tmp_path, demo_paths, **kwargs):
  kwargs.setdefault("model_dir", str(tmp_path / "run"))
  return tiny_config(demo_cache_dir=demo_paths["root"], **kwargs)


@pytest.fixture(scope="module")
def trained(tmp_path_factory, demo_paths):
  """A run set up, trained and finished in this process (8 steps)."""
  tmp_path = tmp_path_factory.mktemp("train_lib")
  with actions.StopSignals() as signals:
    job = launch.setup(_config(tmp_path, demo_paths), signals=signals)
    setup_view = dict(step=job.state.step, plan=job.plan.durations())
    result = train_lib.train(job)
    summary = train_lib.finish(job, result)
    job.close()
  return tmp_path, job, setup_view, result, summary


def test_setup_resolves_everything_once(trained):
  _, job, setup_view, _, _ = trained
  # --seq_buckets=auto on the demo's short reviews: lengths of 8 for 3,352
  # of its 4,000 examples, 16 for the rest (at most 10 pieces), 32 empty; an
  # epoch is 3352 // 16 + 648 // 16 batches.
  assert job.data.layout.lengths == (8, 16, 32)
  assert setup_view == dict(
      step=0, plan=dict(steps_per_epoch=249, total_steps=8, warmup_steps=1))
  run = job.run
  assert run.chief and run.out == run.shared
  assert run.out.checkpoints == os.path.join(run.config.model_dir,
                                             "checkpoints")
  route = job.facts.route
  assert route.note == "precision: float32" and not route.jit_compile
  assert {
      k: v["rows_used"] for k, v in job.facts.counts.items()
  } == {
      "train": 4000,
      "validation": 1000
  }
  assert job.plan.next_stop(0) == 4
  assert run.task == tasks.Task(
      source="demo",
      num_classes=2,
      class_names=("negative", "positive"),
      metrics=("accuracy",))


def test_train_and_finish(trained):
  tmp_path, job, _, result, summary = trained
  run = job.run
  # finish hands over (and restored) the best checkpoint's model.
  assert job.state.step == summary["best_step"] and len(result.loop_times) == 2
  assert np.isfinite(result.train_loss) and result.recoveries == 0
  assert summary["final_step"] == 8 and summary["start_step"] == 0
  assert summary["eval_examples"] == 1000
  assert summary == json.load(open(run.out.summary_json))
  # The evals iterate the eval pipeline built at the first (one object a
  # run): another pass over it scores the handed-over model as finish did.
  validation = job.evaluator.datasets["validation"]
  assert validation() is validation()
  again = job.evaluator.evaluate()
  assert again["loss"] == summary["eval_loss"]
  assert again["accuracy"] == summary["eval_accuracy"]
  assert again["examples"] == 1000
  names = [
      os.path.basename(p) for p in tf.train.get_checkpoint_state(
          run.out.checkpoints).all_model_checkpoint_paths
  ]
  assert names == ["ckpt-4", "ckpt-8"]
  written = json.load(open(run.out.config_json))
  assert written["plan"] == job.plan.durations()
  assert written["config"] == dataclasses.asdict(run.config)
  assert written["task"] == dict(
      run.task.to_json(),
      class_names=["negative", "positive"],
      metrics=["accuracy"],
      text_fields=["text"],
      validation_splits=["validation"])
  del tmp_path


def test_a_second_setup_resumes_where_the_first_stopped(trained, demo_paths,
                                                        info_logging):
  tmp_path, job, _, _, _ = trained
  resume = dataclasses.replace(
      job.run.config, train_steps=12, checkpoint_every=0)
  record_path = job.run.out.config_json
  record = json.load(open(record_path))
  assert record["shuffle"] == "windows"
  # A shuffle this trainer lacks (a newer one's run) is refused first, the
  # run's files as they were.
  with open(record_path, "w") as f:
    json.dump(dict(record, shuffle="sorted"), f)
  before = [open(p).read() for p in (record_path, job.run.out.log_file)]
  with pytest.raises(
      errors.ConfigError,
      match="holds a run shuffled by "
      "'sorted', which this trainer does not know"):
    launch.setup(resume)
  assert [open(p).read() for p in (record_path, job.run.out.log_file)] == before
  # As a run whose auto buckets an older rule chose: a resume keeps them;
  # and one from before the shuffle windows keeps tf.data's buffer.
  assert record["buckets"] == [8, 16, 32]
  record["buckets"] = [8, 32]
  del record["train_group_batches"], record["config"]["bucket_group_batches"]
  del record["shuffle"]
  with open(record_path, "w") as f:
    json.dump(record, f)
  again = launch.setup(resume)
  again.close()
  assert again.data.layout.lengths == (8, 32)
  assert json.load(open(record_path))["shuffle"] == "buffer"
  assert "Resuming with the run's shuffle, tf.data's buffer" in open(
      job.run.out.log_file).read()
  windows = launch.setup(
      dataclasses.replace(
          resume,
          model_dir=str(tmp_path / "fresh"),
          seq_buckets="8,32",
          bucket_group_batches=4))
  windows.close()
  # pylint: disable-next=protected-access
  first = lambda j: next(j.trainer._dataset(0))["input_word_ids"].numpy()
  assert first(again).shape == first(windows).shape
  assert not np.array_equal(first(again), first(windows))
  # Before the group was recorded it was min(--steps_per_loop, 5): the run
  # keeps its 4, and config.json now says so in both places.
  again_record = json.load(open(record_path))
  assert again_record["train_group_batches"] == 4  # spl 4
  assert again_record["config"]["bucket_group_batches"] == 4
  assert again.facts.start_step == 8 and again.state.data_position == 8
  saved = tf.train.load_checkpoint(
      os.path.join(job.run.out.checkpoints, "ckpt-8"))
  np.testing.assert_array_equal(
      again.state.model.kernel.numpy(),
      saved.get_tensor("model/kernel/.ATTRIBUTES/VARIABLE_VALUE"))
  for i, mine in enumerate(again.state.model.encoder.variables):
    np.testing.assert_array_equal(
        mine.numpy(),
        saved.get_tensor(f"encoder_variables/{i}/.ATTRIBUTES/VARIABLE_VALUE"))
  del tmp_path, demo_paths


_NOTEBOOK = r"""
import json, sys
from trainer import Config, fit, export, predict, evaluate
summary = fit(Config(model_dir=sys.argv[1], demo_cache_dir=sys.argv[2],
                     train_steps=12, deterministic=True))
again = export(sys.argv[1], export_base_dir=sys.argv[1] + "/again")
rows = list(predict(again, ["what a day", "awful"]))
scored = evaluate(Config(model_dir=sys.argv[1]), split="validation")
print(json.dumps(dict(summary=summary, again=again, rows=rows, scored=scored)))
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
  out = json.loads(api.stdout.strip().splitlines()[-1])
  summary = out["summary"]
  # export, predict, evaluate beside fit: the commands' work from Python.
  assert out["again"] == os.path.join(api_dir, "again", "12")
  assert [r["text"] for r in out["rows"]] == ["what a day", "awful"]
  assert out["scored"]["examples"] == 1000
  assert out["scored"]["accuracy"] == pytest.approx(
      summary["eval_accuracy"], abs=1e-6)
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
      os.path.basename(n)[:-3] for n in glob.glob(
          os.path.join(ROOT, "trainer", "**", "*.py"), recursive=True)
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
      train_steps=20, steps_per_loop=10, eval_every=0, checkpoint_every=10)
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

  monkeypatch.setenv("BERT_TRAINER_FAULT_NAN_BATCHES", "23")
  resumed = train_lib.run(
      _config(
          tmp_path / "float32",
          demo_paths,
          precision="float16",
          model_dir=str(tmp_path / "float32"),
          **dict(common, train_steps=30, steps_per_loop=5)))
  assert resumed["start_step"] == 20 and resumed["final_step"] == 30
  assert resumed["precision"] == "float16" and resumed["skipped_steps"] == 0
  assert resumed["nan_recoveries"] == 1


def _mock_main(command, tmp_path, demo_paths, tfds_name, *flags):
  """`trainer.main` on TFDS's mock of `tfds_name` (48 examples a split);
  (model_dir, summary)."""
  model_dir = str(tmp_path / tfds_name.replace("/", "_"))
  with tfds.testing.mock_data(num_examples=48):
    result = command("main", f"--tfds_name={tfds_name}",
                     f"--model_dir={model_dir}", "--train_steps=4",
                     "--seq_length=32", "--batch_size=16", "--steps_per_loop=2",
                     "--learning_rate=1e-3",
                     f"--demo_cache_dir={demo_paths['root']}", *flags)
  assert result.returncode == 0, result.stderr[-3000:]
  with open(os.path.join(model_dir, "summary.json")) as f:
    return model_dir, json.load(f)


@pytest.mark.slow
def test_tfds_glue_mnli_and_stsb_end_to_end(tmp_path, command, demo_paths):
  _, mnli = _mock_main(command, tmp_path, demo_paths, "glue/mnli",
                       "--export=false")
  # Matched is the validation split; mismatched is evaluated beside it;
  # test_matched/test_mismatched (hidden labels) are not evaluated.
  assert mnli["examples"] == dict(
      train=48, validation=48, validation_mismatched=48)
  assert 0 <= mnli["eval_mismatched_accuracy"] <= 1
  assert {"eval_accuracy", "eval_loss"} <= set(mnli)
  assert not any(k.startswith("test_") for k in mnli)
  model_dir, stsb = _mock_main(command, tmp_path, demo_paths, "glue/stsb",
                               "--early_stopping_metric=eval/spearman")
  assert -1 <= stsb["eval_pearson"] <= 1 and -1 <= stsb["eval_spearman"] <= 1
  assert "eval_accuracy" not in stsb
  assert stsb["best_metric"] == {"eval/spearman": stsb["eval_spearman"]}
  serve, classes = exported.load_serving(stsb["export_dir"])
  assert classes == 1 and exported.pairs(serve)
  scores = serve(text=tf.constant(["a b"]), text_pair=tf.constant(["c"]))
  assert scores["scores"].shape == [1] and scores["scores"].dtype == tf.float32
  with open(os.path.join(model_dir, "config.json")) as f:
    assert json.load(f)["config"]["num_classes"] == 1
  # evaluate scores a labelled split with the task's metrics.
  with tfds.testing.mock_data(num_examples=48):
    scored = command("evaluate", f"--export_dir={stsb['export_dir']}",
                     "--tfds_name=glue/stsb", "--split=validation")
  assert scored.returncode == 0, scored.stderr[-3000:]
  scores = json.loads(scored.stdout)
  assert scores["examples"] == 48 and {"pearson", "spearman"} <= set(scores)


@pytest.mark.slow
def test_tfds_glue_mrpc_reports_f1_and_accuracy(mrpc_run):
  summary = mrpc_run["summary"]
  assert {"eval_f1", "eval_accuracy", "eval_loss"} <= set(summary)
  assert summary["examples"] == dict(train=48, validation=48)


def _all_finite(directory):
  for prefix in glob.glob(os.path.join(directory, "ckpt-*.index")):
    reader = tf.train.load_checkpoint(prefix[:-len(".index")])
    for name in reader.get_variable_to_shape_map():
      value = reader.get_tensor(name)
      if hasattr(value, "dtype") and value.dtype.kind == "f":
        assert np.isfinite(value).all(), (prefix, name)


def _nan_config(tmp_path, demo_paths, steps):
  return config_lib.Config(
      model_dir=str(tmp_path / "run"),
      demo_cache_dir=demo_paths["root"],
      train_steps=steps,
      batch_size=16,
      seq_length=32,
      steps_per_loop=6,
      checkpoint_every=6,
      export=False)


def test_nan_rolls_back_skips_the_bad_batches_and_finishes(
    tmp_path, demo_paths, monkeypatch):
  monkeypatch.setenv("BERT_TRAINER_FAULT_NAN_BATCHES", "14")
  c = _nan_config(tmp_path, demo_paths, 24)
  summary = train_lib.run(c)
  assert summary["final_step"] == 24 and summary["nan_recoveries"] == 1
  directory = os.path.join(c.model_dir, "checkpoints")
  _all_finite(directory)
  reader = tf.train.load_checkpoint(tf.train.latest_checkpoint(directory))
  # Steps 12..18 consumed batches 12..18 and were thrown away: from then on
  # the data runs 6 batches ahead of the step counter.
  assert reader.get_tensor("data_skip/.ATTRIBUTES/VARIABLE_VALUE") == 6


def test_repeated_nan_stops_after_max_recoveries(tmp_path, demo_paths,
                                                 monkeypatch):
  monkeypatch.setenv("BERT_TRAINER_FAULT_NAN_BATCHES", "14,20,26")
  c = _nan_config(tmp_path, demo_paths, 36)
  with pytest.raises(
      errors.TrainingError,
      match=r"gave up after 2 rollback\(s\) "
      r"\(--max_nan_recoveries=2\)"):
    train_lib.run(c)
  directory = os.path.join(c.model_dir, "checkpoints")
  _all_finite(directory)
  assert tf.train.latest_checkpoint(directory).endswith("ckpt-12")


def test_early_stopping_keeps_and_restores_the_best_checkpoint(
    tmp_path, demo_paths):
  # A learning rate this large makes the validation loss worse after the
  # first eval, so patience runs out and the best checkpoint is the first.
  small_eval = tmp_path / "eval.csv"
  with open(demo_paths["validation"]) as f:
    small_eval.write_text("".join(f.readlines()[:201]))
  c = config_lib.Config(
      model_dir=str(tmp_path / "run"),
      encoder_handle=demo_paths["encoder"],
      preprocessor_handle=demo_paths["preprocessor"],
      train_file=demo_paths["train"],
      eval_file=str(small_eval),
      train_steps=60,
      batch_size=16,
      seq_length=32,
      steps_per_loop=5,
      eval_every=5,
      checkpoint_every=5,
      learning_rate=0.5,
      warmup_fraction=0.0,
      early_stopping_patience=2)
  summary = train_lib.run(c)
  best = json.load(
      open(os.path.join(c.model_dir, "checkpoints", "best", "best.json")))
  assert summary["stopped_early"] is True
  assert summary["final_step"] == best["step"] + 2 * 5
  assert summary["best_step"] == best["step"]
  assert best["evals_since_best"] == 2
  # Steps per row count (shared rows, the default) are the whole run's,
  # not the restored best one's.
  assert sum(summary["steps_per_rows"].values()) == summary["final_step"]
  # What the run reports and exports is the best model.
  assert summary["eval_loss"] == pytest.approx(best["value"], rel=1e-6)
  assert summary["export_dir"].endswith(f"/export/{best['step']}")
  assert tf.train.latest_checkpoint(
      os.path.join(c.model_dir, "checkpoints",
                   "best")).endswith(f"best-{best['step']}")


def _files_under(folder):
  return sorted(
      os.path.relpath(os.path.join(d, f), folder)
      for d, _, names in os.walk(folder)
      for f in names)


def test_end_to_end_on_ram_filesystem(tmp_path, demo_paths, monkeypatch,
                                      info_logging):
  del info_logging
  """Everything through tf.io.gfile: model_dir and data on ram://."""
  cwd = tmp_path / "cwd"
  cwd.mkdir()
  monkeypatch.chdir(cwd)
  monkeypatch.setenv("HOME", str(tmp_path / "home"))
  with tf.io.gfile.GFile(demo_paths["train"]) as f:
    rows = f.read().splitlines()
  data = "ram://data/reviews.csv"
  with tf.io.gfile.GFile(data, "w") as f:
    f.write("\n".join(rows[:801]) + "\n")
  c = config_lib.Config(
      model_dir="ram://runs/r1",
      train_file=data,
      demo_cache_dir=demo_paths["root"],
      train_steps=12,
      seq_length=32,
      batch_size=16,
      learning_rate=1e-3,
      steps_per_loop=6,
      checkpoint_every=6,
      validation_fraction=0.2,
      layer_decay=0.5)
  summary = train_lib.run(c)
  assert summary["final_step"] == 12
  listing = tf.io.gfile.listdir("ram://runs/r1")
  for name in ("config.json", "summary.json", "data_stats.json", "train.log"):
    assert name in listing, listing
  with tf.io.gfile.GFile("ram://runs/r1/train.log") as f:
    log = f.read()
  assert "Done at step 12" in log.splitlines()[-1]
  # --layer_decay: the table logged once and kept in config.json.
  table = ("  embeddings   0.125\n  layer_0      0.25\n  layer_1      0.5\n"
           "  pooler       0.5\n  head         1\n")
  assert log.count("Layer-wise learning rates") == 1 and table in log
  with tf.io.gfile.GFile("ram://runs/r1/config.json") as f:
    assert json.load(f)["layer_rates"] == dict(
        embeddings=0.125, layer_0=0.25, layer_1=0.5, pooler=0.5, head=1.0)
  assert tf.train.latest_checkpoint("ram://runs/r1/checkpoints").endswith(
      "ckpt-12")
  assert tf.io.gfile.glob("ram://runs/r1/summaries/train/events*")
  assert tf.io.gfile.exists("ram://runs/r1/export/12/saved_model.pb")
  with tf.io.gfile.GFile("ram://runs/r1/summary.json") as f:
    written = json.load(f)
  assert written["final_step"] == 12
  assert written["export_dir"] == "ram://runs/r1/export/12"
  assert (written["data.train.rows_read"] +
          written["data.validation.rows_read"]) == 800
  # Nothing reached the local disk outside the temporary folders.
  assert _files_under(cwd) == []
  assert not (tmp_path / "home").exists()


def test_vertex_ai_variables_choose_the_output_locations(
    tmp_path, demo_paths, monkeypatch):
  for name, sub in (("AIP_MODEL_DIR", "aip_model"), ("AIP_CHECKPOINT_DIR",
                                                     "aip_ckpt"),
                    ("AIP_TENSORBOARD_LOG_DIR", "aip_tb")):
    monkeypatch.setenv(name, str(tmp_path / sub))
  flag_values = flags.FlagValues()
  cli.define_config_flags(flag_values=flag_values)
  flag_values([
      "trainer.main", f"--flagfile={ROOT}/flags/demo_quick.flags",
      "--train_steps=10", f"--model_dir={tmp_path}/run",
      f"--demo_cache_dir={demo_paths['root']}"
  ])
  c = cli.config_from_flags(flag_values)
  assert (c.checkpoint_dir, c.summary_dir,
          c.export_base_dir) == (str(tmp_path / "aip_ckpt"),
                                 str(tmp_path / "aip_tb"),
                                 str(tmp_path / "aip_model"))
  train_lib.run(c)
  assert tf.train.latest_checkpoint(str(tmp_path /
                                        "aip_ckpt")).endswith("ckpt-10")
  assert tf.io.gfile.glob(str(tmp_path / "aip_tb" / "train" / "events*"))
  assert (tmp_path / "aip_model" / "10" / "saved_model.pb").exists()
  # The run's own folder keeps its records; length_stats.json is the
  # length pass --shared_rows=auto made to choose its row counts.
  assert sorted(os.listdir(tmp_path / "run")) == [
      "config.json", "data_stats.json", "length_stats.json", "summary.json",
      "train.log"
  ]


class _StopAfter(actions.StopSignals):
  """A SIGTERM that arrives during the loop ending at or after `step`."""

  def __init__(self, step):
    super().__init__()
    self.step = step

  def check(self, state, step, save=True):
    if step >= self.step:
      self.received = "SIGTERM"
    super().check(state, step, save)


def _train_until(c, stop_after=None):
  """Trains Config `c` in process (no final eval, no export) until its end
  or a stop after `stop_after`; returns the final checkpoint's tensors."""
  signals = _StopAfter(stop_after or 1 << 30)
  job = launch.setup(c, signals=signals)
  try:
    train_lib.train(job)
    job.state.save_unless_saved()
  except errors.Preempted:
    pass
  finally:
    job.close()
  reader = tf.train.load_checkpoint(job.run.out.checkpoints)
  return {
      name: reader.get_tensor(name)
      for name in reader.get_variable_to_shape_map()
      if name.startswith(("model/", "encoder_variables/", "optimizer/",
                          "bucket_steps/"))
  }, json.load(open(job.run.out.config_json))


@pytest.mark.slow
def test_a_bucketed_resume_with_other_steps_per_loop_is_bit_identical(
    tmp_path, demo_paths):
  """Two buckets (7 and 32: the demo's reviews split near their median, so
  both fill groups of 5 batches within 14 steps); stopped after step 9 of
  loops of 2 (checkpoints every 7), resumed with loops of 10: every tensor
  equals the uninterrupted run's. Before the group was fixed, a
  bucketed epoch's order followed --steps_per_loop and the resume trained
  other rows."""
  common = dict(
      train_steps=14,
      checkpoint_every=7,
      eval_every=0,
      deterministic=True,
      seq_buckets="7,32",
      ema_decay=0.9)  # the moving average resumes exactly too
  whole, record = _train_until(
      _config(tmp_path / "whole", demo_paths, steps_per_loop=2, **common))
  assert record["buckets"] == [7, 32] and record["train_group_batches"] == 5
  split = _config(tmp_path / "split", demo_paths, steps_per_loop=2, **common)
  _train_until(split, stop_after=9)
  saved = tf.train.get_checkpoint_state(split.model_dir + "/checkpoints")
  assert saved.model_checkpoint_path.endswith("ckpt-9")
  resumed, _ = _train_until(dataclasses.replace(split, steps_per_loop=10))
  assert len(whole) > 100 and sorted(whole) == sorted(resumed)
  assert sum(k.startswith("optimizer/ema/") for k in whole) == sum(
      k.startswith("optimizer/m/") for k in whole)
  different = [k for k in whole if not np.array_equal(whole[k], resumed[k])]
  assert not different
  # The steps per bucket add up over both attempts: 14 in all.
  steps = whole["bucket_steps/.ATTRIBUTES/VARIABLE_VALUE"]
  assert steps.sum() == 14 and steps[:2].all() and not steps[2:].any()


@pytest.mark.slow
def test_a_shared_rows_resume_with_other_steps_per_loop_is_bit_identical(
    tmp_path, demo_paths):
  """Shared rows of 2 (or 4) a batch of 16 reviews, one example a row when
  4 do not hold it: stopped after step 9 of loops of 2, resumed with loops
  of 10, every tensor equals the uninterrupted run's; steps counted per row
  count add up to the plan. A resume with another --shared_rows is refused
  in one line naming the recorded one."""
  common = dict(
      train_steps=14,
      checkpoint_every=7,
      eval_every=0,
      deterministic=True,
      seq_buckets="none",
      shared_rows="2,4")
  whole, record = _train_until(
      _config(tmp_path / "whole", demo_paths, steps_per_loop=2, **common))
  assert record["shared_rows"] == [2, 4] and record["buckets"] == [32]
  split = _config(tmp_path / "split", demo_paths, steps_per_loop=2, **common)
  _train_until(split, stop_after=9)
  with pytest.raises(
      errors.ConfigError,
      match=r"other flags \(--shared_rows: '2,4' -> 'none'\)"):
    launch.setup(dataclasses.replace(split, shared_rows="none"))
  resumed, _ = _train_until(dataclasses.replace(split, steps_per_loop=10))
  different = [k for k in whole if not np.array_equal(whole[k], resumed[k])]
  assert len(whole) > 100 and not different
  # Steps per row count (2, 4, then 16: one example a row), 14 in all;
  # the demo's reviews need 3 to 6 rows, so the 2 is never enough.
  steps = whole["bucket_steps/.ATTRIBUTES/VARIABLE_VALUE"]
  assert steps.sum() == 14 and steps[1] and steps[2] and not steps[0]


@pytest.mark.slow
def test_a_tagging_resume_in_shared_rows_is_bit_identical(tmp_path, demo_paths):
  """A tagging run on the first 200 sentences of CoNLL-2003's train.txt
  (as benchmarks/kill_resume.py --task=tagging writes them) in shared rows
  of 12 (two traced shapes: 12 rows, or 16 when a batch needs more):
  stopped after step 7 of loops of 2, resumed with loops of 10, every
  tensor (the per-token head, the encoder, the optimizer, the data
  position) equals the uninterrupted run's."""
  if not os.path.exists(kill_resume.CONLL):
    pytest.skip(f"{kill_resume.CONLL} is absent (../shared/data/conll2003)")
  subset = kill_resume.conll_head(kill_resume.CONLL, 200,
                                  str(tmp_path / "conll_head.txt"))
  common = dict(
      task="tagging",
      train_file=subset,
      validation_fraction=0.1,
      eval_metrics="",
      seq_length=64,
      train_steps=10,
      checkpoint_every=5,
      eval_every=0,
      deterministic=True,
      seq_buckets="none",
      shared_rows="12")
  whole, record = _train_until(
      _config(tmp_path / "whole", demo_paths, steps_per_loop=2, **common))
  assert record["task"]["kind"] == "tagging" and record["shared_rows"] == [12]
  split = _config(tmp_path / "split", demo_paths, steps_per_loop=2, **common)
  _train_until(split, stop_after=7)
  saved = tf.train.get_checkpoint_state(split.model_dir + "/checkpoints")
  assert saved.model_checkpoint_path.endswith("ckpt-7")
  resumed, _ = _train_until(dataclasses.replace(split, steps_per_loop=10))
  different = [k for k in whole if not np.array_equal(whole[k], resumed[k])]
  assert len(whole) > 100 and sorted(whole) == sorted(resumed)
  assert not different
  # The demo's small vocabulary cuts CoNLL's words into many pieces (auto
  # would choose 12 to 15 rows of 64): a batch often fits in 12.
  steps = whole["bucket_steps/.ATTRIBUTES/VARIABLE_VALUE"]
  assert steps.sum() == 10 and steps[0]


def test_the_bucket_group_flag_is_the_runs_group(tmp_path, demo_paths):
  c = _config(tmp_path, demo_paths, bucket_group_batches=2, train_steps=4)
  job = launch.setup(c)
  job.close()
  record = json.load(open(job.run.out.config_json))
  assert record["buckets"] == [8, 16, 32] and record["train_group_batches"] == 2


def test_a_resume_on_a_grown_training_file_is_refused(tmp_path, demo_paths):
  """The file grows from 300 to 600 rows between start and resume: one
  line naming the change, before any step, and the run's folder as it
  was."""
  path = tmp_path / "d.csv"
  rows = [
      f"review {i} {'good' if i % 2 else 'bad'},{i % 2}\n" for i in range(600)
  ]
  path.write_text("text,label\n" + "".join(rows[:300]))
  c = _config(
      tmp_path,
      demo_paths,
      train_file=str(path),
      train_steps=2,
      steps_per_loop=2,
      checkpoint_every=2,
      eval_every=0,
      seq_buckets="none",
      validation_fraction=0.2)
  _train_until(c)
  before = open(os.path.join(c.model_dir, "config.json")).read()
  saved = sorted(os.listdir(os.path.join(c.model_dir, "checkpoints")))
  path.write_text("text,label\n" + "".join(rows))
  with pytest.raises(errors.ConfigError) as e:
    launch.setup(dataclasses.replace(c, train_steps=4))
  assert re.fullmatch(
      rf"--model_dir={re.escape(c.model_dir)} holds the checkpoints of a run "
      r"trained on other data \(train rows_read 2\d\d -> [45]\d\d; "
      r"validation rows_read \d\d -> 1\d\d\): resuming would change its "
      r"splits, order and validation set. Restore the data the run began "
      r"with, or use a new --model_dir; nothing was changed", str(e.value))
  assert open(os.path.join(c.model_dir, "config.json")).read() == before
  assert sorted(os.listdir(os.path.join(c.model_dir, "checkpoints"))) == saved


def test_the_moving_average_is_what_evals_and_exports_use(
    tmp_path, demo_paths, command):
  """--ema_decay: the export at the end and `trainer.export` from the
  checkpoint serve the averaged weights alike, the raw weights score
  otherwise, and `trainer.evaluate` of the run's checkpoint gives the
  run's own eval (the average's)."""
  c = _config(
      tmp_path,
      demo_paths,
      ema_decay=0.8,
      export=True,
      eval_every=0,
      checkpoint_every=0)
  summary = train_lib.run(c)
  texts = tf.constant(["what a great day", "awful service", "meh"])
  at_end = tf.saved_model.load(summary["export_dir"])
  again = tf.saved_model.load(
      export.export_run(c.model_dir, export_base_dir=str(tmp_path / "again")))
  probabilities = [
      m.signatures["serving_default"](text=texts)["probabilities"].numpy()
      for m in (at_end, again)
  ]
  np.testing.assert_allclose(probabilities[0], probabilities[1], atol=1e-6)
  raw = dataclasses.replace(
      run_folder.read_run_config(c.model_dir), ema_decay=0.0)
  preprocessor, model, _, _ = run_folder.load_classifier(raw)
  served = export.serving_module(model, preprocessor, c.seq_length,
                                 tasks.resolve(raw))
  raw_probabilities = served.serve(texts)["probabilities"].numpy()
  assert np.abs(raw_probabilities - probabilities[0]).max() > 1e-4
  scored = command("evaluate", f"--model_dir={c.model_dir}",
                   "--split=validation")
  assert scored.returncode == 0, scored.stderr
  assert json.loads(scored.stdout)["accuracy"] == pytest.approx(
      summary["eval_accuracy"], abs=1e-6)


def test_shared_rows_evals_iterate_one_pipeline_afresh(tmp_path, demo_paths):
  """Every eval of a run iterates the eval pipeline built at the first: in
  shared rows (the layout's stream restarts at each pass) two evals of the
  same weights score the same, every validation review counted once."""
  c = _config(tmp_path, demo_paths, seq_buckets="none", train_steps=4)
  job = launch.setup(c)
  try:
    assert job.data.layout.rows  # row counts, chosen by `auto`
    validation = job.evaluator.datasets["validation"]
    first = job.evaluator.evaluate()
    second = job.evaluator.evaluate()
    assert validation() is validation()
  finally:
    job.close()
  assert sorted(first) == sorted(second) and first["examples"] == 1000
  assert [k for k in first if not np.array_equal(first[k], second[k])] == []
