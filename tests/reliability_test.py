"""Preemption with real signals and real processes."""

import json
import os
import re
import signal
import subprocess
import sys

import pytest
import tensorflow as tf

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


@pytest.mark.slow
@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
def test_signal_saves_a_checkpoint_exits_75_and_the_run_resumes(
    tmp_path, demo_paths, sig):
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
  if sig != signal.SIGTERM:
    return
  resumed = subprocess.run(
      _command(model_dir, demo_paths, step + 20),
      cwd=ROOT,
      env=_env(),
      capture_output=True,
      text=True,
      timeout=300,
      check=False)
  assert resumed.returncode == 0, resumed.stderr[-3000:]
  assert f"at step {step}" in resumed.stderr
  summary = json.load(open(os.path.join(model_dir, "summary.json")))
  assert summary["start_step"] == step
  assert summary["final_step"] == step + 20
