"""The doctor: one line per check, each failure named with its fix."""

import dataclasses
import os
import re
import shutil

import pytest
import tensorflow as tf

import testing

from trainer.commands import doctor_checks as doctor
from trainer.data import preprocessing
from trainer.encoders import demo
from trainer.foundation import config as config_lib


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
def test_doctor_passes_on_the_demo(demo_paths, tmp_path, info_logging):
  checks = _doctor(demo_paths, tmp_path)
  assert all(c.ok for c in checks.values()), [c.line() for c in checks.values()]
  assert {
      "stack", "flags", "strategy", "model_dir", "handles", "vocabulary",
      "seq_length", "data.train", "data.validation", "shared_rows", "xla"
  } == set(checks)
  # auto's choice, in training's words, on the first 200 training rows.
  assert re.fullmatch(
      r"Shared rows \(--shared_rows=auto\): a batch of 16 in .* rows of 32 "
      r"tokens .*padding \(one example a row: \d+%\) \(measured on the "
      r"first 200 training rows\)", checks["shared_rows"].detail)
  assert os.listdir(tmp_path / "m") == []  # the length pass left nothing


def test_doctor_fails_an_opaque_encoder_with_a_row_list_as_training_does(
    demo_paths, opaque_encoder, tmp_path, command):
  """An encoder this trainer cannot rebuild and --shared_rows=14,16: the
  doctor fails (exit 1) with the line trainer.main stops with."""
  flags = (f"--encoder_handle={opaque_encoder}",
           f"--preprocessor_handle={demo_paths['preprocessor']}",
           "--shared_rows=14,16", "--batch_size=32", "--seq_length=32",
           f"--model_dir={tmp_path}/m", "--doctor_rows=200")
  doctor = command("doctor", *flags)
  trained = command("main", *flags[:-1])
  assert (doctor.returncode, trained.returncode) == (1, 2)
  training_says = (
      "--shared_rows=14,16 cannot apply: --encoder_handle="
      f"{opaque_encoder} is a SavedModel this trainer cannot rebuild "
      "(neither its own encoder nor a Model Garden BERT), whose graph takes "
      "one example a row; use --shared_rows=none (or auto, which falls back "
      "by itself)")
  assert trained.stderr.strip().splitlines()[-1] == f"error: {training_says}"
  lines = doctor.stdout.strip().splitlines()
  assert lines[-2:] == [
      f"[FAIL] shared_rows: {training_says} -> training stops with this line",
      "9 passed, 1 failed: shared_rows"
  ]


@pytest.mark.parametrize(
    "overrides,ok,detail",
    [
        (dict(grad_accumulation_steps=2, shared_rows="3"), False,
         "--shared_rows=3 is invalid: 3 rows do not split over 1 replica x 2 "
         "accumulation steps; use multiples of 2"),
        (dict(batch_size=1), True,
         "Shared rows (--shared_rows=auto): off, one example a row (a batch of "
         "one example (--batch_size=1) has no other to share a row with)"),
        (dict(shared_rows="none"), True,
         "--shared_rows=none: one example a row"),
        # The layout the data gets: buckets, as training chooses them.
        (dict(seq_buckets="auto"), True,
         "Shared rows: off, one example a row (--seq_buckets=auto cuts the "
         "padding instead); Length buckets (--seq_buckets=auto): 16: 100.0% of "
         "examples, 52% padding; 32: 0.0% of examples, 0% padding (empty); 50% "
         "of the tokens of --seq_length=32 for all, 52% padding"),
    ])
def test_doctor_decides_shared_rows_as_training_does(demo_paths, tmp_path,
                                                     info_logging, overrides,
                                                     ok, detail):
  """A list against the batch, the replicas and the accumulation steps;
  rows off, with training's reason; with buckets, the buckets training
  chooses (the doctor resolves the run's whole `Layout`)."""
  check = _doctor(demo_paths, tmp_path, **overrides)["shared_rows"]
  assert (check.ok, check.detail) == (ok, detail)


def test_doctor_fails_checkpoints_without_their_record(demo_run, demo_paths,
                                                       tmp_path):
  """A run folder that lost its config.json: the model_dir check fails with
  training's line, and the folder is left as it was."""
  model_dir = tmp_path / "run"
  shutil.copytree(demo_run["model_dir"], model_dir)
  os.remove(model_dir / "config.json")
  before = testing.tree_digest(model_dir)
  check = _doctor(demo_paths, tmp_path, model_dir=str(model_dir))["model_dir"]
  assert not check.ok
  assert check.line() == (
      f"[FAIL] model_dir: --model_dir={model_dir} holds a run's checkpoints "
      f"({model_dir}/checkpoints) but its config.json is missing, so this "
      "run's flags cannot be checked against them; restore it (the run keeps "
      f"a copy: cp {model_dir}/checkpoints/run_config.json "
      f"{model_dir}/config.json), or use a new --model_dir; nothing was "
      "changed -> training stops with this line")
  assert testing.tree_digest(model_dir) == before


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


def test_doctor_reports_what_training_does_about_xla(no_dropout_encoder):
  """The decision training takes (`encoder_setup.prepare`): a foreign encoder
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
