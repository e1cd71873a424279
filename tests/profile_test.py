"""--profile_steps writes a TensorBoard profile of exactly the steps asked
for, and benchmarks/profile_ops.py tabulates it."""

import glob
import os
import sys

import tensorflow_hub as hub

from conftest import ROOT
from conftest import run_module

sys.path.insert(0, os.path.join(ROOT, "benchmarks"))
import profile_ops  # noqa: E402  pylint: disable=g-import-not-at-top


def test_profile_holds_exactly_the_window_steps(tmp_path, demo_paths):
  result = run_module("trainer.main", "--flagfile=flags/demo_quick.flags",
                      f"--demo_cache_dir={demo_paths['root']}",
                      f"--model_dir={tmp_path}", "--export=false",
                      "--profile_steps=7,9")
  assert result.returncode == 0, result.stderr[-3000:]
  assert "Profiling steps 7..9" in result.stderr
  logdir = os.path.join(tmp_path, "summaries", "train")
  traces = glob.glob(os.path.join(logdir, "plugins/profile/*/*.xplane.pb"))
  assert len(traces) == 1

  summary = profile_ops.summarize(profile_ops.newest_trace(logdir))
  # One fused AdamW update per trainable variable per step: steps 7, 8 and
  # 9 and no other (loops are cut at steps 6 and 9 for the profile).
  trainable = len(hub.load(demo_paths["encoder"]).trainable_variables) + 2
  assert summary["by_type"]["ResourceApplyAdam"][1] == 3 * trainable
  assert summary["by_phase"]["forward (and the loop's own ops)"] > 0
  assert summary["by_phase"]["backward"] > 0
  assert summary["loops"] == 1 and summary["window_ms"] > 0


def test_profile_ops_without_a_trace_is_a_clear_error(tmp_path):
  result = run_module("benchmarks.profile_ops", f"--logdir={tmp_path}")
  assert result.returncode == 2
  assert "no profile under" in result.stderr
  assert "--profile_steps=FIRST,LAST" in result.stderr
  assert "Traceback" not in result.stderr
