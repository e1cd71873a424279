"""The trainer object and its wrappers: --profile_steps' profiler around
exactly the loops of its window; NaNs injected where a drill asks."""

import glob
import logging
import os
import sys

import tensorflow_hub as hub

from conftest import ROOT
from trainer.training import controller
from trainer.training import faults

sys.path.insert(0, os.path.join(ROOT, "benchmarks"))
import profile_ops  # noqa: E402  pylint: disable=g-import-not-at-top


def test_profile_holds_exactly_the_window_steps(tmp_path, demo_paths, command,
                                                caplog, info_logging):
  del info_logging
  caplog.set_level(logging.INFO)
  result = command("main", f"--flagfile={ROOT}/flags/demo_quick.flags",
                   f"--demo_cache_dir={demo_paths['root']}",
                   f"--model_dir={tmp_path}", "--export=false",
                   "--profile_steps=7,9")
  assert result.returncode == 0, result.stderr[-3000:]
  assert "Profiling steps 7..9" in caplog.text
  logdir = os.path.join(tmp_path, "summaries", "train")
  traces = glob.glob(os.path.join(logdir, "plugins/profile/*/*.xplane.pb"))
  assert len(traces) == 1

  summary = profile_ops.summarize(profile_ops.newest_trace(logdir))
  # One fused AdamW kernel per trainable variable per step: steps 7, 8 and
  # 9 and no other (loops are cut at steps 6 and 9 for the profile).
  trainable = len(hub.load(demo_paths["encoder"]).trainable_variables) + 2
  assert summary["by_type"]["xla:adamw_update"][1] == 3 * trainable
  assert summary["by_phase"]["optimizer"] > 0
  assert summary["by_phase"]["forward (and the loop's own ops)"] > 0
  assert summary["by_phase"]["backward"] > 0
  assert summary["loops"] == 1 and summary["window_ms"] > 0


class _Loops:
  """A trainer of loops that train nothing: each loop's output only."""

  def __init__(self):
    self.step = 0

  def train(self, num_steps):
    start, self.step = self.step, self.step + num_steps
    return controller.LoopOutput(start, self.step, start, 0.5, 1.0, 0.1,
                                 16 * num_steps)


def test_injected_nans_fall_on_the_loops_that_consume_their_batches():
  assert faults.wrap(_Loops(), environ={}).__class__ is _Loops
  trainer = faults.wrap(_Loops(), {faults.NAN_BATCHES: "5, 12"})
  losses = [trainer.train(4).loss for _ in range(4)]  # batches 0..15
  assert [loss != loss for loss in losses] == [False, True, False, True]
  assert trainer.step == 16  # the rest of the trainer is the wrapped one
