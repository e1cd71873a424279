"""`python -m trainer.main` as a user runs it: real processes where only a
process shows it (an end-to-end run and its resume, the exit code of a bad
flag, a TPU that is not there), in process (`command`) for the rest."""

import json
import os
import re
import signal
import subprocess
import sys

import pytest
import tensorflow as tf

from conftest import run_module
from conftest import with_project
from trainer.runtime import distribute

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
def test_end_to_end_then_a_preemption_then_a_resume(tmp_path, demo_paths):
  """The demo's quick run; then the same flags with more steps resume it
  until a real SIGTERM stops them at a loop boundary with a checkpoint
  (exit 75); then a rerun resumes from that checkpoint to the end."""
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

  second = subprocess.Popen(
      [sys.executable, "-m", "trainer.main", *common, "--train_steps=2000"],
      cwd=ROOT,
      env=with_project(TF_CPP_MIN_LOG_LEVEL="2"),
      stderr=subprocess.PIPE,
      text=True)
  seen = []
  for line in second.stderr:
    seen.append(line)
    if re.search(r"step 30/2000 ", line):
      second.send_signal(signal.SIGTERM)
      break
  stderr = "".join(seen) + second.communicate(timeout=300)[1]
  assert second.returncode == 75, stderr[-3000:]
  assert "Resumed from" in stderr and "at step 20" in stderr
  match = re.search(
      r"preempted: SIGTERM received: stopped after step (\d+) with a "
      "checkpoint", stderr)
  assert match, stderr[-3000:]
  step = int(match.group(1))
  assert step >= 30 and step % 5 == 0  # a loop boundary
  latest = tf.train.latest_checkpoint(os.path.join(model_dir, "checkpoints"))
  assert latest.endswith(f"ckpt-{step}")
  assert "Traceback" not in stderr

  third = _main(*common, f"--train_steps={step + 10}")
  assert third.returncode == 0, third.stderr[-3000:]
  assert "Resumed from" in third.stderr and f"at step {step}" in third.stderr
  summary = json.load(open(os.path.join(model_dir, "summary.json")))
  assert summary["start_step"] == step and summary["final_step"] == step + 10
  assert (f"step {step + 5}/{step + 10}" in third.stderr and
          "step 5/" not in third.stderr)


@pytest.mark.core
@pytest.mark.slow
def test_bad_flag_is_one_clear_line_and_exit_2(tmp_path):
  result = _main("--warmup_fraction=1.5", f"--model_dir={tmp_path}")
  assert result.returncode == 2
  assert ("error: --warmup_fraction=1.5 is invalid: must be in [0, 1]"
          in result.stderr)
  assert "Traceback" not in result.stderr


def test_missing_handle_is_a_clear_error(tmp_path, command):
  result = command("main", f"--encoder_handle={tmp_path}/nope",
                   f"--preprocessor_handle={tmp_path}/nope2",
                   f"--model_dir={tmp_path}")
  assert result.returncode == 2
  assert f"--encoder_handle='{tmp_path}/nope' is invalid" in result.stderr
  assert "no such folder" in result.stderr
  assert "Traceback" not in result.stderr


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


def _run(command, tmp_path, csv_text, *flags):
  path = tmp_path / "d.csv"
  path.write_text(csv_text)
  return command("main", f"--train_file={path}", f"--model_dir={tmp_path}/m",
                 "--encoder_handle=demo", "--preprocessor_handle=demo", *flags)


def test_one_class_and_an_empty_carve_say_so(tmp_path, command, demo_paths):
  cache = f"--demo_cache_dir={demo_paths['root']}"
  one_class = _run(command, tmp_path, "text,label\n" + "good,1\n" * 50, cache)
  assert one_class.returncode == 2, one_class.stderr[-2000:]
  assert ("error: the training split has examples of class 1 only "
          in one_class.stderr)
  tiny = _run(command, tmp_path, "text,label\n" + "good,1\nbad,0\n" * 5, cache)
  assert tiny.returncode == 2, tiny.stderr[-2000:]
  assert ("error: the validation split carved from " in tiny.stderr and
          "at --validation_fraction=0.05 holds no usable row" in tiny.stderr)
  assert "--label_map" not in tiny.stderr.splitlines()[-1]


def test_main_stops_on_a_wrong_file_format(tmp_path, command, demo_paths):
  path = tmp_path / "d.csv"
  path.write_text("text,label\n" +
                  "".join(f"row {i},{i % 2}\n" for i in range(50)))
  result = command("main", f"--train_file={path}", "--label_column=0",
                   f"--model_dir={tmp_path}/m", "--encoder_handle=demo",
                   "--preprocessor_handle=demo",
                   f"--demo_cache_dir={demo_paths['root']}")
  assert result.returncode == 2, result.stderr[-2000:]
  # The train part of the carve (95% of 50 rows, seeded) is checked first.
  assert re.search(
      r"d\.csv \(remaining 95%\): (\d+) of \1 rows rejected "
      r"\(label_not_a_number: \1\)", result.stderr), result.stderr
  assert "most are label_not_a_number, e.g. lines 2, 3, 4" in result.stderr
  assert "Traceback" not in result.stderr


@pytest.mark.parametrize("flags,line", [
    (("--batch_size=1", "--shared_rows=1"),
     "error: --shared_rows=1 is invalid: a batch of one example "
     "(--batch_size=1) has no other to share a row with; use "
     "--shared_rows=none (auto turns rows off by itself)"),
    (("--grad_accumulation_steps=2", "--shared_rows=3"),
     "error: --shared_rows=3 is invalid: 3 rows do not split over 1 replica "
     "x 2 accumulation steps; use multiples of 2"),
])
def test_a_row_list_that_cannot_apply_says_why(tmp_path, command, demo_paths,
                                               flags, line):
  """No fix that does not exist (fewer rows than 1), and what the rows
  split over as it is (one replica, two accumulation steps)."""
  result = command("main", f"--model_dir={tmp_path}/m",
                   f"--demo_cache_dir={demo_paths['root']}", *flags)
  assert result.returncode == 2, result.stderr[-2000:]
  errors = [s for s in result.stderr.splitlines() if s.startswith("error")]
  assert errors == [line]
  assert "Traceback" not in result.stderr


def test_a_handle_that_is_a_file_is_called_a_file(tmp_path, command):
  handle = tmp_path / "encoder.tar.gz"
  handle.write_bytes(b"not a folder")
  result = command("main", f"--encoder_handle={handle}",
                   f"--preprocessor_handle={handle}",
                   f"--model_dir={tmp_path}/m")
  assert result.returncode == 2
  assert [s for s in result.stderr.splitlines() if s.startswith("error")] == [
      f"error: --encoder_handle='{handle}' is invalid: it is a file, not a "
      "folder; give a TF Hub SavedModel folder (the one holding "
      "saved_model.pb)"
  ]


@pytest.mark.parametrize("flags,said", [
    (("--batch_size=1",),
     ("I", "Shared rows (--shared_rows=auto): off, one example a row (a "
      "batch of one example (--batch_size=1) has no other to share a row "
      "with)")),
    (("--seq_length=16", "--shared_rows=4,8"),
     ("W", "Shared rows: no batch fits --shared_rows=4,8 (batches of 32 at "
      "--seq_length=16 need more rows), so every step runs one example a "
      "row; --shared_rows=auto would choose 16,17,18,20")),
])
def test_rows_off_or_unused_say_why_once(tmp_path, command, demo_paths, caplog,
                                         info_logging, flags, said):
  """The demo trains one example a row at batch 1 because a batch holds one
  example (not because its texts are long: they are 76% padding); a row
  list no batch fits trains, with one warning naming auto's choice."""
  result = command("main", f"--model_dir={tmp_path}/m",
                   f"--demo_cache_dir={demo_paths['root']}", "--train_steps=2",
                   "--steps_per_loop=2", "--eval_every=0", "--export=false",
                   *flags)
  assert result.returncode == 0, result.stderr[-2000:]
  rows = [(r.levelname[0], r.getMessage())
          for r in caplog.records
          if r.getMessage().startswith("Shared rows")]
  assert rows == [said]
