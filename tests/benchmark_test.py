"""The throughput benchmark runs end to end in its tiny mode.

No timing is asserted: the figures are measured by running the program on a
quiet machine (BUILD_NOTES.md). This only proves every contender builds and
trains and that the report carries every figure the benchmark promises.
"""

import json
import os
import subprocess
import sys

import pytest

from conftest import ROOT

pytest.importorskip(
    "keras_hub",
    reason="keras-hub is not installed: "
    "pip install -e '.[bench]'")


@pytest.mark.slow
def test_train_throughput_quick_mode(tmp_path):
  output = tmp_path / "results.json"
  result = subprocess.run([
      sys.executable,
      os.path.join(ROOT, "benchmarks", "train_throughput.py"), "--quick",
      "--skip=memory,input", f"--output={output}"
  ],
                          cwd=ROOT,
                          env=dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2"),
                          capture_output=True,
                          text=True,
                          timeout=900,
                          check=False)
  assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-3000:]
  results = json.loads(output.read_text())
  rates = results["examples_per_second"]["demo"]
  assert sorted(rates) == sorted([
      "trainer_best", "trainer_loop1", "trainer_naive", "trainer_bf16",
      "keras_recipe", "keras_recipe_spe", "keras_hub"
  ])
  assert all(rate > 0 for rate in rates.values())
  best_peer = max(
      rates[k] for k in ("keras_recipe", "keras_recipe_spe", "keras_hub"))
  assert results["ratio_vs_best_peer"]["demo"] == pytest.approx(
      rates["trainer_best"] / best_peer)
  assert 0 < results["mfu"]["demo"] < 1
  assert results["bf16_speedup"]["demo"] == pytest.approx(
      rates["trainer_bf16"] / rates["trainer_best"])
  assert results["per_step_overhead_ms"] == pytest.approx(
      1000 * results["settings"]["batch_size"] *
      (1 / rates["trainer_loop1"] - 1 / rates["trainer_best"]))
  assert results["settings"]["jit_compile"] == {"demo": True, "minilm": False}
  # The peak-memory runs (two trainer processes over generated files) and
  # the pinned host-input processes are measured by the program alone
  # (BUILD_NOTES.md): here they would double the test's time.
  assert "peak_rss_mib" not in results and "host_input_ratio" not in results
  assert "| demo | keras_hub |" in result.stdout
