"""Preemption with real signals and real processes."""

import dataclasses
import glob
import json
import os
import re
import shutil
import signal
import subprocess
import sys

import numpy as np
import pytest
import tensorflow as tf

from conftest import run_process
from trainer.loop import actions
from trainer.model import checkpoints
from trainer.base import config as config_lib
from trainer.base import errors
from trainer.loop import train_lib

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _command(model_dir, demo_paths, steps):
  return [
      sys.executable, "-m", "trainer.main", f"--model_dir={model_dir}",
      f"--demo_cache_dir={demo_paths['root']}", f"--train_steps={steps}",
      "--batch_size=16", "--seq_length=32", "--steps_per_loop=10",
      "--checkpoint_every=0", "--eval_every=0", "--export=false"
  ]


def _env():
  return dict(os.environ, PYTHONPATH=ROOT, TF_CPP_MIN_LOG_LEVEL="2")


@pytest.mark.core
@pytest.mark.slow
def test_sigterm_saves_a_checkpoint_exits_75_and_the_run_resumes(
    tmp_path, demo_paths):
  sig = signal.SIGTERM
  model_dir = str(tmp_path / "run")
  proc = subprocess.Popen(
      _command(model_dir, demo_paths, 2000),
      cwd=ROOT,
      env=_env(),
      stderr=subprocess.PIPE,
      text=True)
  seen = []
  for line in proc.stderr:
    seen.append(line)
    if re.search(r"step 30/2000 ", line):
      proc.send_signal(sig)
      break
  rest = proc.communicate(timeout=300)[1]
  stderr = "".join(seen) + rest
  assert proc.returncode == 75, stderr[-3000:]
  match = re.search(
      rf"preempted: {sig.name} received: stopped after step "
      r"(\d+) with a checkpoint", stderr)
  assert match, stderr[-3000:]
  step = int(match.group(1))
  assert step >= 30 and step % 10 == 0  # a loop boundary
  latest = tf.train.latest_checkpoint(os.path.join(model_dir, "checkpoints"))
  assert latest.endswith(f"ckpt-{step}")
  assert "Traceback" not in stderr
  resumed = run_process(_command(model_dir, demo_paths, step + 20), env=_env())
  assert resumed.returncode == 0, resumed.stderr[-3000:]
  assert f"at step {step}" in resumed.stderr
  summary = json.load(open(os.path.join(model_dir, "summary.json")))
  assert summary["start_step"] == step
  assert summary["final_step"] == step + 20


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


@pytest.mark.slow
def test_kill_resume_program_runs(demo_paths, tmp_path):
  # Seed 1 draws a single kill: the smallest run that still kills, restarts
  # and compares (the 20-trial figures are in BUILD_NOTES.md), here with
  # two micro-batches per update (checkpoints fall on updates) and float16
  # (the loss scale resumes too).
  program = os.path.join(ROOT, "benchmarks", "kill_resume.py")
  result = run_process([
      sys.executable, program, "--trials=1", "--steps=12", "--seed=1",
      "--grad_accumulation_steps=2", "--precision=float16",
      f"--demo_cache_dir={demo_paths['root']}", f"--work_dir={tmp_path}"
  ],
                       env=_env(),
                       timeout=600)
  assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-2000:]
  assert "1/1 identical" in result.stdout
  assert "| 0 |" in result.stdout


@pytest.fixture(scope="module")
def trained(tmp_path_factory, demo_paths):
  """A run with checkpoints at steps 6 and 12."""
  model_dir = str(tmp_path_factory.mktemp("ckpt_run"))
  c = config_lib.Config(
      model_dir=model_dir,
      demo_cache_dir=demo_paths["root"],
      train_steps=12,
      batch_size=16,
      seq_length=32,
      steps_per_loop=6,
      checkpoint_every=6,
      export=False)
  train_lib.run(c)
  return c


def _copy_run(c, tmp_path):
  target = str(tmp_path / "run")
  shutil.copytree(c.model_dir, target)
  return dataclasses.replace(
      c, model_dir=target), os.path.join(target, "checkpoints")


def _data_shard(directory, step):
  return glob.glob(os.path.join(directory, f"ckpt-{step}.data-*"))[0]


CORRUPTIONS = {
    "empty state file":
        lambda d: open(os.path.join(d, "checkpoint"), "w").close(),
    "garbled state file":
        lambda d: open(os.path.join(d, "checkpoint"), "w").write(
            "model_checkpoint_path: \x00\x01 garbage {{{"),
    "missing index":
        lambda d: os.remove(os.path.join(d, "ckpt-12.index")),
    "truncated data shard":
        lambda d: open(_data_shard(d, 12), "r+b").truncate(
            os.path.getsize(_data_shard(d, 12)) // 2),
    "leftover temporary folder":
        lambda d: os.makedirs(os.path.join(d, "ckpt-18_temp", "part-00000")),
}
# Which checkpoint the run must resume from after each corruption.
EXPECTED = {
    "empty state file": 12,
    "garbled state file": 12,
    "missing index": 6,
    "truncated data shard": 6,
    "leftover temporary folder": 12,
}


@pytest.mark.parametrize("case", sorted(CORRUPTIONS))
def test_corrupted_checkpoints_fall_back_to_the_newest_intact(
    trained, tmp_path, case):
  _, directory = _copy_run(trained, tmp_path)
  CORRUPTIONS[case](directory)
  report = checkpoints.repair(directory)
  assert report.intact == os.path.join(directory, f"ckpt-{EXPECTED[case]}")
  if EXPECTED[case] == 6:
    assert [os.path.basename(p) for p, _ in report.skipped] == ["ckpt-12"]
    assert glob.glob(os.path.join(directory, "broken-ckpt-12.*"))
  if "state file" in case:
    assert report.state_file_broken
  if "temporary" in case:
    assert report.removed == ["ckpt-18_temp"]
    assert not os.path.exists(os.path.join(directory, "ckpt-18_temp"))
  # The state file now names the intact checkpoint.
  assert tf.train.latest_checkpoint(directory) == report.intact


def test_resume_after_a_truncated_shard_starts_from_the_older_checkpoint(
    trained, tmp_path):
  c, directory = _copy_run(trained, tmp_path)
  CORRUPTIONS["truncated data shard"](directory)
  summary = train_lib.run(dataclasses.replace(c, train_steps=18))
  assert summary["start_step"] == 6 and summary["final_step"] == 18


def test_no_intact_checkpoint_is_a_clear_error(trained, tmp_path):
  _, directory = _copy_run(trained, tmp_path)
  for step in (6, 12):
    os.remove(os.path.join(directory, f"ckpt-{step}.index"))
  with pytest.raises(
      checkpoints.CheckpointError,
      match=r"holds checkpoints \[12, 6\] but none is intact"):
    checkpoints.repair(directory)


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
  # What the run reports and exports is the best model.
  assert summary["eval_loss"] == pytest.approx(best["value"], rel=1e-6)
  assert summary["export_dir"].endswith(f"/export/{best['step']}")
  assert tf.train.latest_checkpoint(
      os.path.join(c.model_dir, "checkpoints",
                   "best")).endswith(f"best-{best['step']}")
