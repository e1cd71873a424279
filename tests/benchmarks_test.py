"""The benchmark programs run: the failure drills that only a real process
shows, the kill/resume program, the throughput race in its tiny mode,
profile_ops. No timing is asserted: the figures are measured by running
the programs on a quiet machine (benchmarks/RESULTS.md)."""

import json
import os
import sys

import pytest

from conftest import ROOT
from conftest import SHARED_CSV
from conftest import run_process
from conftest import with_project
from trainer.foundation import shared_rows

sys.path.insert(0, os.path.join(ROOT, "benchmarks"))
# pylint: disable=g-import-not-at-top,wrong-import-position
import failure_drills  # noqa: E402
import packing_bound  # noqa: E402
import profile_ops  # noqa: E402


@pytest.mark.slow
def test_kill_resume_program_runs(demo_paths, tmp_path):
  # Seed 1 draws a single kill: the smallest run that still kills, restarts
  # and compares (the 20-trial figures are in benchmarks/RESULTS.md), here with
  # two micro-batches per update (checkpoints fall on updates), float16
  # (the loss scale resumes too) and shared rows (the row counts resume).
  program = os.path.join(ROOT, "benchmarks", "kill_resume.py")
  result = run_process([
      sys.executable, program, "--trials=1", "--steps=12", "--seed=1",
      "--grad_accumulation_steps=2", "--precision=float16",
      "--shared_rows=auto", f"--demo_cache_dir={demo_paths['root']}",
      f"--work_dir={tmp_path}"
  ],
                       env=with_project(TF_CPP_MIN_LOG_LEVEL="2"),
                       timeout=600)
  assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-2000:]
  assert "1/1 identical" in result.stdout
  assert "| 0 |" in result.stdout


# The drills whose failure only a real process shows (an exit code, a lock
# between processes, a hang, a changed folder); the others are covered in
# process (files_test, main_test, evaluate_test, distribute_test).
QUICK = ("unknown flag", "resume with other num_classes",
         "second trainer on one model_dir", "multi-worker peer never starts")


@pytest.fixture(scope="module")
def drills(tmp_path_factory, demo_paths, demo_run):
  return {
      r.name: r for r in failure_drills.run_drills(
          QUICK, str(tmp_path_factory.mktemp("drills")), demo_paths["root"],
          demo_run["model_dir"])
  }


@pytest.mark.slow
@pytest.mark.parametrize("name", QUICK)
def test_drill(drills, name):
  result = drills[name]
  assert result.ok, result


# One contender of each kind (the others are the same code with another
# setting: trainer_naive, keras_recipe, keras_hub in float32), to keep the
# suite's time.
RACED = ("trainer_best,trainer_loop1,trainer_bf16,trainer_bucketed,"
         "trainer_shared_rows,keras_recipe_spe,keras_hub_bf16")


@pytest.mark.slow
def test_train_throughput_quick_mode(tmp_path):
  pytest.importorskip(
      "keras_hub",
      reason="keras-hub is not installed: pip install -e '.[bench]'")
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
  # The bucketed contender: its buckets' loops traced once each, before
  # timing; fewer padded tokens than --seq_length, the same real ones.
  raced = results["contenders"]["demo"]
  seq, batch = (results["settings"][k] for k in ("seq_length", "batch_size"))
  bucketed, fixed = raced["trainer_bucketed"], raced["trainer_best"]
  assert bucketed["buckets"][-1] == seq
  assert 1 <= bucketed["traces"] <= len(bucketed["buckets"])
  assert fixed["traces"] == 1 and fixed["buckets"] == [seq]
  assert bucketed["real_tokens"] == fixed["real_tokens"]
  assert bucketed["real_tokens"] <= bucketed["padded_tokens"] <= seq
  if os.path.exists(SHARED_CSV):  # generated text is of one length
    assert len(bucketed["buckets"]) > 1 and bucketed["padded_tokens"] < seq
    # Tweets reach every bucket: each loop traced once.
    assert bucketed["traces"] == len(bucketed["buckets"])
  assert fixed["padded_tokens"] == seq
  assert results["bucketed"]["demo"]["vs_fixed"] == pytest.approx(
      rates["trainer_bucketed"] / rates["trainer_best"])
  # Shared rows, chosen (tweets of about 56 demo tokens, or generated ones
  # of about 37, at seq 128): row counts below the batch (the batch last:
  # one example a row), each traced once at most; the real tokens of fixed
  # shapes in fewer computed ones.
  shared = raced["trainer_shared_rows"]
  assert len(shared["buckets"]) > 1 and shared["buckets"][-1] == batch
  assert shared["buckets"] == sorted(shared["buckets"])
  assert 1 <= shared["traces"] <= len(shared["buckets"])
  assert shared["real_tokens"] == fixed["real_tokens"]
  assert shared["real_tokens"] <= shared["padded_tokens"] < seq
  assert results["shared_rows"]["demo"]["vs_fixed"] == pytest.approx(
      rates["trainer_shared_rows"] / rates["trainer_best"])


def test_profile_ops_without_a_trace_is_a_clear_error(tmp_path, capsys):
  with pytest.raises(SystemExit) as info:
    profile_ops.main([f"--logdir={tmp_path}"])
  assert info.value.code == 2
  stderr = capsys.readouterr().err
  assert "no profile under" in stderr
  assert "--profile_steps=FIRST,LAST" in stderr
  assert "Traceback" not in stderr


def test_packing_bound_finds_fewer_rows_than_first_fit_where_there_are():
  # First-fit decreasing: 6+5 | 4+4+3 | 2, three rows; 6+4+2 | 5+4+3 fit
  # in two, the token bound (24 / 12).
  lengths = [6, 5, 4, 4, 3, 2]
  assert shared_rows.rows_needed([lengths], 12, 6).tolist() == [3]
  assert packing_bound.fewest_rows(lengths, 12, 3, 1000) == (2, True)
  assert packing_bound.fits(lengths, 2, 12, 1000)
  assert not packing_bound.fits([7, 7, 7], 2, 12, 1000)
  # A search past its limit keeps the count known to fit, unproven.
  assert packing_bound.fewest_rows(lengths, 12, 3, 1) == (3, False)


def test_packing_bound_program_reads_a_runs_length_stats(tmp_path, capsys):
  stats = tmp_path / "length_stats.json"
  histogram = [0, 0, 3, 5, 4, 2, 1, 0, 2, 1, 0, 0, 1]  # seq 12
  stats.write_text(json.dumps(dict(key="k", histogram=histogram)))
  out = packing_bound.measure(histogram, 8, 50, 10_000)
  assert out["unproven"] == 0
  assert out["token_bound"] <= out["fewest"] <= out["first_fit"]
  assert sum(out["beyond"].values()) == 50
  assert out["first_fit"] - out["fewest"] == pytest.approx(
      sum(k * n for k, n in out["beyond"].items()) / 50)
  packing_bound.main(
      [f"--length_stats={stats}", "--batch_size=8", "--batches=50"])
  printed = capsys.readouterr().out
  assert f"| fewest rows | {out['fewest']:.2f} |" in printed
  with pytest.raises(SystemExit) as info:
    packing_bound.main([f"--length_stats={tmp_path / 'missing.json'}"])
  assert "not a run's length_stats.json" in str(info.value.code)
