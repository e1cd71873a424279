"""The throughput benchmark runs end to end in its tiny mode.

No timing is asserted: the figures are measured by running the program on a
quiet machine (BUILD_NOTES.md). This only proves every contender builds and
trains and that the report carries every figure the benchmark promises.
"""

import json
import os
import sys

import pytest

from conftest import ROOT
from conftest import run_process

pytest.importorskip(
    "keras_hub",
    reason="keras-hub is not installed: "
    "pip install -e '.[bench]'")

# One contender of each kind (the others are the same code with another
# setting: trainer_naive, keras_recipe, keras_hub in float32), to keep the
# suite's time.
RACED = ("trainer_best,trainer_loop1,trainer_bf16,keras_recipe_spe,"
         "keras_hub_bf16")


@pytest.mark.slow
def test_train_throughput_quick_mode(tmp_path):
  output = tmp_path / "results.json"
  result = run_process([
      sys.executable,
      os.path.join(ROOT, "benchmarks", "train_throughput.py"), "--quick",
      "--skip=memory,input", f"--output={output}", f"--contenders={RACED}"
  ],
                       env=dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2"),
                       timeout=900)
  assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-3000:]
  results = json.loads(output.read_text())
  rates = results["examples_per_second"]["demo"]
  assert sorted(rates) == sorted(RACED.split(","))
  assert all(rate > 0 for rate in rates.values())
  assert results["ratio_vs_best_peer"]["demo"] == pytest.approx(
      rates["trainer_best"] / rates["keras_recipe_spe"])
  flops = results["flops_per_example"]["demo"]
  mfu = results["mfu"]["demo"]
  assert mfu["trainer_best"] == pytest.approx(
      rates["trainer_best"] * flops / results["matmul_flops_per_second"])
  # bfloat16 contenders against the bfloat16 matmul rate of the same run.
  for name in ("trainer_bf16", "keras_hub_bf16"):
    assert mfu[name] == pytest.approx(
        rates[name] * flops / results["bfloat16_matmul_flops_per_second"])
  assert all(0 < v < 1 for v in mfu.values())
  assert results["bf16_speedup"]["demo"] == pytest.approx(
      rates["trainer_bf16"] / rates["trainer_best"])
  assert results["bf16_vs_keras_hub"]["demo"] == pytest.approx(
      rates["trainer_bf16"] / rates["keras_hub_bf16"])
  assert results["per_step_overhead_ms"] == pytest.approx(
      1000 * results["settings"]["batch_size"] *
      (1 / rates["trainer_loop1"] - 1 / rates["trainer_best"]))
  assert results["settings"]["jit_compile"] == {"demo": True, "minilm": False}
  # The peak-memory runs (two trainer processes over generated files) and
  # the pinned host-input processes are measured by the program alone
  # (BUILD_NOTES.md): here they would double the test's time.
  assert "peak_rss_mib" not in results and "host_input_ratio" not in results
  assert "| demo | keras_hub_bf16 | bfloat16 |" in result.stdout
