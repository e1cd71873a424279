"""`python -m trainer.main` as a user runs it: real processes, real files."""

import json
import os

import pytest
import tensorflow as tf

from conftest import run_module
from trainer.base import checks
from trainer.base import config as config_lib
from trainer.base import distribute
from trainer.loop import train_lib

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _main(*args):
  return run_module("trainer.main", *args)


def _tags(folder):
  tags = set()
  for name in tf.io.gfile.listdir(folder):
    for event in tf.compat.v1.train.summary_iterator(
        os.path.join(folder, name)):
      for value in event.summary.value:
        tags.add(value.tag)
  return tags


@pytest.mark.core
@pytest.mark.slow
def test_end_to_end_then_resume_with_more_steps(tmp_path, demo_paths):
  model_dir = str(tmp_path / "run")
  flagfile = os.path.join(ROOT, "flags", "demo_quick.flags")
  common = [
      f"--flagfile={flagfile}", f"--model_dir={model_dir}",
      f"--demo_cache_dir={demo_paths['root']}"
  ]
  first = _main(*common)
  assert first.returncode == 0, first.stderr[-3000:]
  summary = json.load(open(os.path.join(model_dir, "summary.json")))
  assert summary["final_step"] == 20 and summary["start_step"] == 0
  for key in ("train_loss", "eval_accuracy", "eval_loss",
              "examples_per_second"):
    assert isinstance(summary[key], float), key
  assert summary["examples"] == {"train": 4000, "validation": 1000}
  assert summary["eval_examples"] == 1000
  assert summary["data.train.rows_used"] == 4000
  config = json.load(open(os.path.join(model_dir, "config.json")))
  assert config["plan"]["total_steps"] == 20
  assert config["plan"]["warmup_steps"] == 2
  assert config["config"]["batch_size"] == 16
  ckpts = tf.train.get_checkpoint_state(os.path.join(model_dir, "checkpoints"))
  names = [os.path.basename(p) for p in ckpts.all_model_checkpoint_paths]
  assert names == ["ckpt-10", "ckpt-20"]
  assert _tags(os.path.join(model_dir, "summaries", "train")) == {
      "train/loss", "train/learning_rate", "train/grad_norm",
      "train/examples_per_second"
  }
  assert _tags(os.path.join(model_dir, "summaries", "eval")) == {
      "eval/accuracy", "eval/loss", "eval/confusion_matrix",
      "eval/pr_curve/pr_curves"
  }
  assert "step 20/20" in first.stderr and "examples/s ETA" in first.stderr

  second = _main(*common, "--train_steps=30")
  assert second.returncode == 0, second.stderr[-3000:]
  assert "Resumed from" in second.stderr and "at step 20" in second.stderr
  summary = json.load(open(os.path.join(model_dir, "summary.json")))
  assert summary["start_step"] == 20 and summary["final_step"] == 30
  assert "step 25/30" in second.stderr and "step 5/30" not in second.stderr


@pytest.mark.core
@pytest.mark.slow
def test_bad_flag_is_one_clear_line_and_exit_2(tmp_path):
  result = _main("--warmup_fraction=1.5", f"--model_dir={tmp_path}")
  assert result.returncode == 2
  assert ("error: --warmup_fraction=1.5 is invalid: must be in [0, 1]"
          in result.stderr)
  assert "Traceback" not in result.stderr


@pytest.mark.slow
def test_missing_handle_is_a_clear_error(tmp_path):
  result = _main(f"--encoder_handle={tmp_path}/nope",
                 f"--preprocessor_handle={tmp_path}/nope2",
                 f"--model_dir={tmp_path}")
  assert result.returncode == 2
  assert f"--encoder_handle='{tmp_path}/nope' is invalid" in result.stderr
  assert "no such folder" in result.stderr
  assert "Traceback" not in result.stderr


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


def test_seq_length_above_encoder_positions(demo_paths):
  c = config_lib.Config(seq_length=129, demo_cache_dir=demo_paths["root"])
  with pytest.raises(
      config_lib.ConfigError,
      match=r"--seq_length=129 is invalid: the encoder has 128"):
    train_lib.load_model(c, tf.distribute.get_strategy())


@pytest.mark.core
@pytest.mark.slow
def test_no_tpu_on_this_machine_is_a_clear_error(tmp_path):
  """On the CPU stack and on tensorflow-tpu off a TPU VM alike."""
  assert not distribute.local_tpu_devices()
  result = _main("--tpu=local", f"--model_dir={tmp_path}")
  assert result.returncode == 2
  lines = [s for s in result.stderr.splitlines() if s.startswith("error:")]
  assert len(lines) == 1, result.stderr[-2000:]
  assert lines[0].startswith(
      "error: --tpu=local: this machine has no TPU (no /dev/accel* or "
      "/dev/vfio devices); --tpu=local works on a Cloud TPU VM")
  assert "Graph execution error" not in lines[0]
  assert "Traceback" not in result.stderr


def test_unreachable_tpu_is_a_clear_error():
  with pytest.raises(distribute.StrategyError, match="cannot reach"):
    distribute.build_strategy(tpu="grpc://127.0.0.1:1")
