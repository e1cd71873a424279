"""Where users run: ram:// (a stand-in for gs://), Vertex AI, wheels, doctor."""

import dataclasses
import json
import os
import subprocess
import sys
import sysconfig

from absl import flags
from absl import logging as absl_logging
import pytest
import tensorflow as tf

from conftest import run_process
from conftest import without_project

from trainer.model import bert
from trainer import cli
from trainer.base import config as config_lib
from trainer.model import demo
from trainer.base import distribute
from trainer import doctor
from trainer.data import preprocessing
from trainer.loop import train_lib

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _files_under(folder):
  return sorted(
      os.path.relpath(os.path.join(d, f), folder)
      for d, _, names in os.walk(folder)
      for f in names)


@pytest.fixture
def info_logging():
  """absl at INFO, as under the commands and `fit` (outside app.run its
  default is WARNING)."""
  verbosity = absl_logging.get_verbosity()
  absl_logging.set_verbosity(absl_logging.INFO)
  yield
  absl_logging.set_verbosity(verbosity)


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
  assert sorted(os.listdir(tmp_path / "run")) == [
      "config.json", "data_stats.json", "summary.json", "train.log"
  ]


def test_cluster_spec_becomes_tf_config(monkeypatch):
  spec = dict(
      cluster=dict(
          workerpool0=["host0:2222"], workerpool1=["host1:2222", "host2:2222"]),
      task=dict(type="workerpool1", index=1))
  monkeypatch.delenv("TF_CONFIG", raising=False)
  monkeypatch.setenv("CLUSTER_SPEC", json.dumps(spec))
  distribute.ensure_tf_config()
  assert json.loads(os.environ["TF_CONFIG"]) == dict(
      cluster=dict(chief=["host0:2222"], worker=["host1:2222", "host2:2222"]),
      task=dict(type="worker", index=1))


def test_remote_tpu_rejects_local_data_paths():
  with pytest.raises(
      distribute.StrategyError,
      match=r"--train_file=/data/t.csv is a local path.*gs://"):
    distribute.check_paths_for_tpu("grpc://10.0.0.2:8470",
                                   dict(train_file="/data/t.csv"))
  distribute.check_paths_for_tpu("grpc://10.0.0.2:8470",
                                 dict(train_file="gs://b/t.csv", data_dir=""))
  distribute.check_paths_for_tpu("local", dict(train_file="/data/t.csv"))


@pytest.mark.slow
def test_wheel_installs_in_a_fresh_venv_and_runs(tmp_path):
  dist = tmp_path / "dist"
  subprocess.run([
      sys.executable, "-m", "build", "--sdist", "--wheel", "--no-isolation",
      "--outdir",
      str(dist), ROOT
  ],
                 check=True,
                 capture_output=True,
                 timeout=300)
  wheels = list(dist.glob("*.whl"))
  assert len(wheels) == 1 and list(dist.glob("*.tar.gz"))
  venv = tmp_path / "venv"
  subprocess.run(
      [sys.executable, "-m", "venv", str(venv)], check=True, timeout=300)
  py = str(venv / "bin" / "python")
  subprocess.run([
      py, "-m", "pip", "install", "--quiet", "--no-deps", "--no-index",
      str(wheels[0])
  ],
                 check=True,
                 timeout=300)
  # The dependencies (TensorFlow & co.) come from this environment, so the
  # test does not download 600 MB; the trainer itself only from the wheel.
  site = subprocess.run([
      py, "-c", "import sysconfig; print(sysconfig."
      "get_paths()['purelib'])"
  ],
                        check=True,
                        capture_output=True,
                        text=True).stdout.strip()
  with open(os.path.join(site, "deps.pth"), "w") as f:
    f.write(sysconfig.get_paths()["purelib"] + "\n")
  env = without_project()
  result = run_process([py, "-m", "trainer.main", "--helpfull"],
                       cwd=tmp_path,
                       env=env)
  # absl exits with 1 after printing help.
  assert result.returncode in (0, 1), result.stderr[-2000:]
  assert "Traceback" not in result.stderr
  assert "--encoder_handle" in result.stdout
  assert "--max_bad_fraction" in result.stdout
  where = run_process([py, "-c", "import trainer; print(trainer.__file__)"],
                      cwd=tmp_path,
                      env=env).stdout
  assert str(venv) in where


def _doctor(demo_paths, tmp_path, **overrides):
  values = dict(
      model_dir=str(tmp_path / "m"),
      demo_cache_dir=demo_paths["root"],
      seq_length=32,
      batch_size=16)
  values.update(overrides)
  checks = doctor.run_checks(config_lib.Config(**values), rows=200)
  return {c.name: c for c in checks}


@pytest.mark.core
def test_doctor_passes_on_the_demo(demo_paths, tmp_path):
  checks = _doctor(demo_paths, tmp_path)
  assert all(c.ok for c in checks.values()), [c.line() for c in checks.values()]
  assert {
      "stack", "flags", "strategy", "model_dir", "handles", "vocabulary",
      "seq_length", "data.train", "data.validation", "xla"
  } == set(checks)


def test_doctor_names_a_vocabulary_that_does_not_fit(demo_paths, tmp_path):
  vocab = tmp_path / "vocab.txt"
  vocab.write_text("\n".join(demo.vocabulary() +
                             [f"extra{i}" for i in range(50)]) + "\n")
  pre = str(tmp_path / "big_preprocessor")
  preprocessing.save_preprocessor(
      preprocessing.BertPreprocessor(str(vocab)), pre)
  checks = _doctor(
      demo_paths,
      tmp_path,
      encoder_handle=demo_paths["encoder"],
      preprocessor_handle=pre)
  assert not checks["vocabulary"].ok
  assert "preprocessor vocabulary 234, encoder embedding table 184" in checks[
      "vocabulary"].line()


def test_doctor_names_seq_length_above_positions(demo_paths, tmp_path):
  checks = _doctor(demo_paths, tmp_path, seq_length=200)
  assert not checks["seq_length"].ok
  assert "use at most 128" in checks["seq_length"].line()


def test_doctor_names_an_unreadable_data_file(demo_paths, tmp_path):
  bad = tmp_path / "not_a_zip.zip"
  bad.write_bytes(b"this is not a zip archive")
  checks = _doctor(demo_paths, tmp_path, train_file=str(bad))
  assert not checks["data"].ok
  assert "is not a readable zip archive" in checks["data"].line()


def test_doctor_names_an_unwritable_model_dir(demo_paths, tmp_path):
  blocker = tmp_path / "file"
  blocker.write_text("a file, not a folder")
  checks = _doctor(demo_paths, tmp_path, model_dir=str(blocker / "run"))
  assert not checks["model_dir"].ok
  assert "is not writable" in checks["model_dir"].line()


def test_bert_config_round_trip(demo_paths):
  encoder = tf.saved_model.load(demo_paths["encoder"])
  config = json.loads(encoder.get_config_json().numpy())
  assert config == json.loads(
      bert.BertConfig(vocab_size=len(demo.vocabulary()),
                      **demo.DEMO_BERT).to_json())


def test_doctor_reports_what_training_does_about_xla(no_dropout_encoder):
  """The decision training takes (`launch.prepare`): a foreign encoder
  trains without XLA, and --jit_compile=true on it fails, as training
  would; this project's encoder with --jit_compile=true is compiled."""

  class Foreign(tf.Module):  # a TF Hub encoder: no config of ours inside

    def __init__(self, loaded):
      super().__init__()
      self.loaded = loaded

    def __call__(self, inputs, training=False):
      return self.loaded(inputs, training=training)

  foreign = Foreign(tf.saved_model.load(no_dropout_encoder))
  strategy = tf.distribute.get_strategy()
  c = config_lib.Config(encoder_handle="gs://b/enc", seq_length=16)
  unset = doctor.check_xla(c, strategy, foreign)
  assert unset.ok and unset.detail == (
      "training runs the step without XLA (--jit_compile unset: off for a "
      "SavedModel not saved by this project, whose gradient XLA would "
      "recompile at every step; --jit_compile=true is refused)")
  refused = doctor.check_xla(
      dataclasses.replace(c, jit_compile=True), strategy, foreign)
  assert not refused.ok and refused.detail.startswith(
      "--jit_compile=true cannot train --encoder_handle=gs://b/enc: XLA "
      "recompiles the gradient of a loaded SavedModel at every step")
  own = tf.saved_model.load(no_dropout_encoder)
  assert doctor.check_xla(c, strategy, own).detail == (
      "training runs the step without XLA (--jit_compile unset: off on the "
      "CPU; --jit_compile=true turns it on)")


@pytest.mark.xla
def test_doctor_compiles_the_step_training_would_compile(no_dropout_encoder):
  own = tf.saved_model.load(no_dropout_encoder)
  check = doctor.check_xla(
      config_lib.Config(jit_compile=True, seq_length=16),
      tf.distribute.get_strategy(), own)
  assert check.ok and check.detail == (
      "training compiles the step with XLA (compiled here once)")
