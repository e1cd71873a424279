"""The doctor: one line per check, each failure named with its fix."""

import dataclasses

import pytest
import tensorflow as tf

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
