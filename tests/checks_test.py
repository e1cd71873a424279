"""Checks of a Config: each bad flag one ConfigError line naming the flag,
the value and what is valid; batches against replicas."""

import math
import re

import numpy as np
import pytest

from trainer.foundation import checks
from trainer.foundation import config as config_lib
from trainer.foundation import errors


def test_a_folder_or_a_file_in_the_wrong_place_is_named(tmp_path):
  with pytest.raises(errors.ConfigError, match="is a folder; give a CSV/TSV"):
    checks.validate(config_lib.Config(train_file=str(tmp_path)))
  afile = tmp_path / "f"
  afile.write_text("x")
  with pytest.raises(errors.ConfigError, match="is a file; give a folder"):
    checks.validate(config_lib.Config(model_dir=str(afile)))
  # A handle that is a file is called one, not "the folder".
  graph = tmp_path / "saved_model.pb"
  graph.write_text("x")
  for path, what in ((afile, "it is a file, not a folder; give a TF Hub "
                      "SavedModel folder (the one holding saved_model.pb)"),
                     (graph, "it is the SavedModel's graph file; give its "
                      f"folder, {tmp_path}")):
    with pytest.raises(errors.ConfigError) as e:
      checks.validate(
          config_lib.Config(
              encoder_handle=str(path), preprocessor_handle=str(path)))
    assert str(e.value) == f"--encoder_handle={str(path)!r} is invalid: {what}"


@pytest.mark.parametrize("field,value,message", [
    ("strategy", "tpu", "choose one of auto"),
    ("warmup_fraction", -0.1, "must be in [0, 1]"),
    ("batch_size", 0, "must be a positive global batch size"),
    ("seq_length", 2, "must be in [3, 8192]"),
    ("learning_rate", 0.0, "must be > 0"),
    ("steps_per_loop", 0, "must be >= 1"),
    ("label_map", "0-0", "write it as raw:class pairs"),
    ("label_map", "0:0,4:2", "outside [0, --num_classes=2)"),
    ("num_classes", 0, "must be at least 1 (1 = regression)"),
    ("train_steps", -1, "must be >= 0"),
    ("validation_fraction", 1.0, "must be in (0, 1)"),
    ("train_file", "/nonexistent/x.csv", "no such file"),
    ("preprocessor_handle", "/nonexistent", "no such folder"),
    ("precision", "half", "choose one of float32, bfloat16, float16, auto"),
    ("profile_steps", "7", "give FIRST,LAST steps with 0 < FIRST <= LAST"),
    ("profile_steps", "9,7", "give FIRST,LAST steps with 0 < FIRST <= LAST"),
    ("profile_steps", "0,a", "give FIRST,LAST steps with 0 < FIRST <= LAST"),
])
def test_validation_names_flag_value_and_fix(field, value, message):
  c = config_lib.Config(**{field: value})
  with pytest.raises(config_lib.ConfigError) as info:
    checks.validate(c)
  assert f"--{field}={value!r} is invalid" in str(info.value)
  assert message in str(info.value)


def test_batch_not_divisible_by_replicas():
  c = config_lib.Config(batch_size=33)
  with pytest.raises(config_lib.ConfigError, match="multiple of 2"):
    checks.check_replicas(c, 2)
  checks.check_replicas(config_lib.Config(batch_size=34), 2)


@pytest.mark.parametrize(
    "field,value,message",
    [
        ("learning_rate", math.inf, "must be > 0"),
        ("learning_rate", math.nan, "must be > 0"),
        ("weight_decay", math.nan, "must be >= 0"),
        ("warmup_fraction", math.nan, "must be in [0, 1]"),
        ("clip_norm", -1.0, "must be >= 0 (0 disables clipping)"),
        ("epochs", math.inf, "must be > 0 when --train_steps=0"),
        ("strategy", "ps", "choose one of auto, one_device, mirrored, "
         "multi_worker_mirrored"),
        ("early_stopping_metric", "eval/f2",
         "choose one of eval/loss, eval/accuracy, eval/f1, eval/mcc, "
         "eval/pearson, eval/spearman, eval/precision, eval/recall, "
         "eval/mismatched_loss, eval/mismatched_accuracy"),
        ("early_stopping_metric", "eval/f1",
         "evals report eval/loss, eval/accuracy (--eval_metrics)"),
        ("eval_metrics", "pearson", "pearson is not a classification metric; "
         "choose from accuracy, f1, mcc"),
        ("num_classes", 0, "must be at least 1 (1 = regression)"),
        ("header", "maybe", "choose one of auto, yes, no"),
        ("text_column", "a,b,c", "give one field, or two for a sentence pair"),
        ("quoting", "double", "choose one of csv, none"),
        ("model_dir", "", "give a folder (local or gs://)"),
        ("layer_decay", 0.0, "must be in (0, 1]"),
        ("layer_decay", 1.5, "must be in (0, 1]"),
        ("grad_accumulation_steps", 0, "must be >= 1"),
        ("label_names", "pos,pos", "each class needs a name of its own "
         "(predictions and exports key the classes by name)"),
        ("label_names", "neg,", "each class needs a name of its own "
         "(predictions and exports key the classes by name)"),
        # The Python API takes any object: the kind is checked first.
        ("batch_size", "32", "must be a whole number, not str"),
        ("train_steps", 4.7, "must be a whole number, not float"),
        ("batch_size", True, "must be a whole number, not bool"),
        ("seq_buckets", [16, 32], "must be a string, not list"),
        ("learning_rate", "1e-3", "must be a number, not str"),
        ("deterministic", 1, "must be True or False, not int"),
        ("jit_compile", "yes", "must be True or False or None, not str"),
        ("validation_fold", 1.0, "must be a whole number, not float"),
    ])
def test_validation_table(field, value, message):
  c = config_lib.Config(**{field: value})
  with pytest.raises(errors.ConfigError) as info:
    checks.validate(c)
  assert str(info.value) == f"--{field}={value!r} is invalid: {message}"


def test_micro_batches_must_split_the_batch_evenly():
  c = config_lib.Config(batch_size=32, grad_accumulation_steps=3)
  with pytest.raises(errors.ConfigError) as info:
    checks.check_replicas(c, 2)
  assert str(info.value) == (
      "--batch_size=32 is invalid: the global batch must be divisible by "
      "the 2 replicas x 3 micro-batches; use a multiple of 6")
  checks.check_replicas(
      config_lib.Config(batch_size=32, grad_accumulation_steps=4), 2)


def test_an_int_where_a_float_belongs_passes_and_numpy_is_named():
  """An int where a float belongs is fine; a numpy scalar is refused in
  one line (it would fail only when config.json is written), and before
  `complete` reads the fields, as `fit` calls it."""
  checks.validate(config_lib.Config(epochs=2, learning_rate=1))
  with pytest.raises(errors.ConfigError) as e:
    checks.validate(config_lib.Config(batch_size=np.int64(32)))
  assert str(e.value) == ("--batch_size=np.int64(32) is invalid: must be a "
                          "whole number, not int64")
  with pytest.raises(errors.ConfigError) as e:
    config_lib.complete(config_lib.Config(tfds_name=5))
  assert str(e.value) == ("--tfds_name=5 is invalid: must be a string, not "
                          "int")


def test_remote_paths_are_checked_and_named():
  """ram:// is TensorFlow's in-memory filesystem: a remote path that
  answers; gs:// here has no network, and the line names the flag."""
  with pytest.raises(errors.ConfigError) as e:
    checks.validate(config_lib.Config(train_file="ram://nope/x.csv"))
  assert str(e.value) == ("--train_file='ram://nope/x.csv' is invalid: no "
                          "such file")
  with pytest.raises(errors.ConfigError) as e:
    checks.validate(
        config_lib.Config(
            encoder_handle="ram://nope/enc", preprocessor_handle="demo"))
  assert str(e.value) == ("--encoder_handle='ram://nope/enc' is invalid: no "
                          "such folder; give a TF Hub SavedModel folder")
  # Offline (as here and in CI) gs:// cannot be reached; with a network,
  # the store answers that the file is not there.
  with pytest.raises((errors.ResourceError, errors.ConfigError)) as e:
    checks.validate(config_lib.Config(train_file="gs://no-bucket-xyz/x.csv"))
  offline = re.fullmatch(
      r"--train_file=gs://no-bucket-xyz/x.csv: cannot reach it \(.+\); "
      r"check the path, the network and credentials", str(e.value))
  online = str(e.value) == ("--train_file='gs://no-bucket-xyz/x.csv' is "
                            "invalid: no such file")
  assert offline or online, str(e.value)
