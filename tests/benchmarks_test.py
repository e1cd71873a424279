"""The benchmark programs run: the failure drills that only a real process
shows, the kill/resume program, the throughput race in its tiny mode,
profile_ops. No timing is asserted: the figures are measured by running
the programs on a quiet machine (benchmarks/RESULTS.md)."""

import importlib.util
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
import hf_contenders  # noqa: E402
import hf_ner  # noqa: E402
import packing_bound  # noqa: E402
import profile_ops  # noqa: E402
import train_throughput  # noqa: E402


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


# One contender of each kind of code: the trainer at fixed shapes, in
# length buckets and in shared rows, and the two peers (the others are the
# same code with another setting: trainer_loop1 and trainer_bf16 are
# trainer_best with --steps_per_loop=1 and --precision=bfloat16;
# trainer_naive, keras_recipe, keras_hub in float32), to keep the suite's
# time: each contender is a process. `test_the_race_figures` checks the
# figures and report lines the others' rates give; their set-up
# (`contenders.make_contender`'s two flags) runs only in a real race.
RACED = ("trainer_best,trainer_bucketed,trainer_shared_rows,keras_recipe_spe,"
         "keras_hub_bf16")

# The Hugging Face contenders' batchings (the bfloat16 one shows autocast
# runs); hf_max_length and the others are the same code with another
# collator or sampler setting, and start only in a real race. They race in
# the same quick race as the others (one program, one matmul measurement)
# where torch, transformers and accelerate are installed.
HF_RACED = "hf_dynamic,hf_group_by_length,hf_dynamic_bf16"


def _hf_missing():
  return [
      name for name in ("torch", "transformers", "accelerate")
      if importlib.util.find_spec(name) is None
  ]


@pytest.mark.slow
def test_train_throughput_quick_mode(tmp_path):
  pytest.importorskip(
      "keras_hub",
      reason="keras-hub is not installed: pip install -e '.[bench]'")
  output = tmp_path / "results.json"
  raced = RACED + ("" if _hf_missing() else "," + HF_RACED)
  result = run_process([
      sys.executable,
      os.path.join(ROOT, "benchmarks", "train_throughput.py"), "--quick",
      "--skip=memory,input", f"--output={output}", f"--contenders={raced}"
  ],
                       env=dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2"),
                       timeout=900)
  assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-3000:]
  results = json.loads(output.read_text())
  rates = results["examples_per_second"]["demo"]
  assert sorted(rates) == sorted(raced.split(","))
  assert all(rate > 0 for rate in rates.values())
  assert results["ratio_vs_best_peer"]["demo"] == pytest.approx(
      rates["trainer_best"] / rates[results["best_peer"]["demo"]])
  flops = results["flops_per_example"]["demo"]
  mfu = results["mfu"]["demo"]
  assert mfu["trainer_best"] == pytest.approx(
      rates["trainer_best"] * flops / results["matmul_flops_per_second"])
  # A bfloat16 contender against the bfloat16 matmul rate of the same run.
  assert mfu["keras_hub_bf16"] == pytest.approx(
      rates["keras_hub_bf16"] * flops /
      results["bfloat16_matmul_flops_per_second"])
  assert all(0 < v < 1 for v in mfu.values())
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
  if _hf_missing():
    return
  assert results["best_peer"]["demo"] == max(
      ("keras_recipe_spe", "hf_dynamic", "hf_group_by_length"), key=rates.get)
  assert results["best_bf16_peer"]["demo"] == max(
      ("keras_hub_bf16", "hf_dynamic_bf16"), key=rates.get)
  # Padding counted on the batches each timed: each batch padded to its
  # longest, so some padding, and less than padding to --seq_length.
  for name in HF_RACED.split(","):
    info = results["contenders"]["demo"][name]
    assert 0 < info["real_tokens"] <= info["padded_tokens"] < seq
  assert "| demo | hf_dynamic_bf16 | bfloat16 |" in result.stdout
  # What it ran, in the report: torch on every core.
  assert f"on {os.cpu_count()} threads" in results["contenders"]["demo"][
      "hf_dynamic"]["note"]
  assert "demo: hf_dynamic: transformers " in result.stdout


def _raced(rate, padded, buckets=(128,)):
  """A contender's `race` record: `padded` tokens an example (None: a peer
  that does not report them), 18 real ones."""
  return dict(
      examples_per_second=rate,
      real_tokens=18,
      padded_tokens=padded,
      buckets=list(buckets),
      traces=len(buckets))


def test_the_race_figures(capsys):
  """What `add_figures` derives from a size's rates, with every contender
  the ratios read (examples/s chosen to give round figures), and the
  report's lines of them."""
  results = train_throughput.new_results(
      "test", dict(steps_per_loop=dict(demo=4, minilm=5)), 1e12, 2e12)
  raced = dict(
      trainer_best=_raced(100.0, 128),
      trainer_loop1=_raced(80.0, 128),
      trainer_bf16=_raced(150.0, 128),
      trainer_bucketed=_raced(250.0, 40, (32, 64, 128)),
      trainer_shared_rows=_raced(400.0, 20, (5, 6, 8)),
      trainer_shared_rows_bf16=_raced(600.0, 20, (5, 6, 8)),
      keras_recipe_spe=_raced(50.0, 128),
      keras_hub=_raced(80.0, None),
      keras_hub_bf16=_raced(120.0, 128))
  config = dict(hidden_size=8, num_layers=2, intermediate_size=32)
  train_throughput.add_figures(results, "demo", raced, config, 128, 32)
  assert results["contenders"]["demo"] is raced
  assert results["ratio_vs_best_peer"]["demo"] == 100 / 80
  assert results["best_peer"]["demo"] == "keras_hub"
  assert results["best_bf16_peer"]["demo"] == "keras_hub_bf16"
  assert results["ratio_vs_best_bf16_peer"]["demo"] == 150 / 120
  assert results["bf16_speedup"]["demo"] == 1.5
  assert results["bf16_vs_keras_hub"]["demo"] == 150 / 120
  assert results["bucketed"]["demo"] == dict(
      vs_fixed=2.5,
      vs_best_peer=250 / 80,
      bf16_vs_fixed_bf16=None,
      bf16_vs_best_bf16_peer=None)
  assert results["shared_rows"]["demo"] == dict(
      vs_fixed=4.0,
      vs_best_peer=5.0,
      bf16_vs_fixed_bf16=4.0,
      bf16_vs_best_bf16_peer=5.0)
  assert results["vs_hf"] == {}  # no Hugging Face contender raced
  # 32 examples a step: 1/80 - 1/100 s an example is 2.5 ms an example.
  assert results["per_step_overhead_ms"] == pytest.approx(80.0)
  flops = train_throughput.training_flops_per_example(config, 128)
  assert results["flops_per_example"]["demo"] == flops
  mfu = results["mfu"]["demo"]
  assert mfu["trainer_best"] == 100 * flops / 1e12
  assert mfu["trainer_bf16"] == 150 * flops / 2e12
  assert mfu["keras_hub"] == 80 * flops / 1e12  # no padded length: 128
  # A shorter padded length computes fewer FLOPs an example.
  assert mfu["trainer_shared_rows"] == (
      400 * train_throughput.training_flops_per_example(config, 20) / 1e12)
  train_throughput.report(results)
  printed = capsys.readouterr().out
  expected = [
      "| demo | trainer_shared_rows | float32 | 400.0 | 4.00x | 7200 | 10% |",
      "demo: trainer_shared_rows row counts [5, 6, 8], its train loop "
      "traced 3 times",
      "demo: trainer_bucketed vs fixed 2.50x, vs best peer (keras_hub) 3.12x",
      "demo: trainer_shared_rows vs fixed 4.00x, vs best peer (keras_hub) "
      "5.00x, bf16 vs fixed bf16 4.00x, bf16 vs best bf16 peer "
      "(keras_hub_bf16) 5.00x",
      "demo: trainer_best / best float32 peer (keras_hub) = 1.25x",
      "demo: trainer_bf16 / best bfloat16 peer (keras_hub_bf16) = 1.25x",
      "demo: bfloat16 / float32 (trainer) = 1.50x",
      "demo: trainer_bf16 / keras_hub_bf16 = 1.25x",
      "per-step host overhead saved by steps_per_loop=4 (demo): 80.00 ms/step",
  ]
  assert [line for line in expected if line not in printed] == []
  # No per-step overhead without trainer_loop1, nor for the MiniLM size.
  without = dict(raced)
  del without["trainer_loop1"]
  for size, contenders_raced in (("demo", without), ("minilm", raced)):
    later = train_throughput.new_results("test", {}, 1e12, 2e12)
    train_throughput.add_figures(later, size, contenders_raced, config, 128, 32)
    assert "per_step_overhead_ms" not in later


def test_the_race_figures_against_hugging_face(capsys):
  """"vs best peer" is against the fastest peer, Hugging Face's included,
  and names it; `vs_hf` puts each trainer layout over each HF batching in
  its precision."""
  results = train_throughput.new_results("test", {}, 1e12, 2e12)
  raced = dict(
      trainer_best=_raced(100.0, 128),
      trainer_bf16=_raced(150.0, 128),
      trainer_shared_rows=_raced(400.0, 20, (5, 6, 8)),
      trainer_shared_rows_bf16=_raced(600.0, 20, (5, 6, 8)),
      keras_hub=_raced(80.0, None),
      keras_hub_bf16=_raced(120.0, 128),
      hf_dynamic=_raced(125.0, 40),
      hf_group_by_length=_raced(200.0, 25),
      hf_max_length=_raced(50.0, 128),
      hf_dynamic_bf16=_raced(150.0, 40),
      hf_group_by_length_bf16=_raced(240.0, 25))
  raced["hf_dynamic"]["note"] = "transformers 5 Trainer, torch on 2 threads"
  config = dict(hidden_size=8, num_layers=2, intermediate_size=32)
  train_throughput.add_figures(results, "demo", raced, config, 128, 32)
  assert results["best_peer"]["demo"] == "hf_group_by_length"
  assert results["ratio_vs_best_peer"]["demo"] == 0.5
  assert results["best_bf16_peer"]["demo"] == "hf_group_by_length_bf16"
  assert results["ratio_vs_best_bf16_peer"]["demo"] == 150 / 240
  assert results["shared_rows"]["demo"]["vs_best_peer"] == 2.0
  assert results["shared_rows"]["demo"]["bf16_vs_best_bf16_peer"] == 2.5
  assert results["vs_hf"]["demo"] == {
      "trainer_best":
          dict(hf_dynamic=0.8, hf_group_by_length=0.5, hf_max_length=2.0),
      "trainer_bf16":
          dict(hf_dynamic_bf16=1.0, hf_group_by_length_bf16=150 / 240),
      "trainer_shared_rows":
          dict(hf_dynamic=3.2, hf_group_by_length=2.0, hf_max_length=8.0),
      "trainer_shared_rows_bf16":
          dict(hf_dynamic_bf16=4.0, hf_group_by_length_bf16=2.5),
  }
  # An HF contender computes at the mean padded length of its batches.
  assert results["mfu"]["demo"]["hf_dynamic_bf16"] == (
      150 * train_throughput.training_flops_per_example(config, 40) / 2e12)
  train_throughput.report(results)
  printed = capsys.readouterr().out
  expected = [
      "| demo | hf_group_by_length | float32 | 200.0 | 2.00x | 3600 | 28% |",
      "| encoder | trainer | precision | vs hf_dynamic | vs hf_group_by_length "
      "| vs hf_max_length |",
      "| demo | trainer_shared_rows | float32 | 3.20x | 2.00x | 8.00x |",
      "| demo | trainer_shared_rows_bf16 | bfloat16 | 4.00x | 2.50x | - |",
      "demo: trainer_shared_rows vs fixed 4.00x, vs best peer "
      "(hf_group_by_length) 2.00x",
      "demo: trainer_best / best float32 peer (hf_group_by_length) = 0.50x",
      "demo: trainer_bf16 / best bfloat16 peer (hf_group_by_length_bf16) "
      "= 0.62x",
      "demo: hf_dynamic: transformers 5 Trainer, torch on 2 threads",
  ]
  assert [line for line in expected if line not in printed] == []


def test_hugging_face_contenders_tokenize_as_the_trainer(demo_paths, tmp_path):
  """The same ids as the trainer's preprocessor over the same vocab file,
  for single texts (truncated alike) and for pairs that need no trimming
  (the trainer trims a pair round-robin, transformers longest first)."""
  pytest.importorskip(
      "transformers",
      reason="transformers is not installed: pip install -e '.[bench]'")
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  from trainer.data import preprocessing  # pylint: disable=g-import-not-at-top
  vocab = os.path.join(demo_paths["preprocessor"], "assets", "vocab.txt")
  seq = 32
  pack = preprocessing.make_packer(
      tf.saved_model.load(demo_paths["preprocessor"]), seq)
  singles = ["An AMAZING film, again!", "@xyz so sad... 42", "a " * 40]
  pairs = [["hello world", "good movie"], ["The Dog sat.", "a cat, ran!"]]
  for texts in (singles, pairs):
    path = tmp_path / "texts.json"
    path.write_text(json.dumps(dict(texts=texts, labels=[1] * len(texts))))
    _, rows = hf_contenders.tokenized(str(path), vocab, seq)
    want = pack(tf.constant(texts))
    for i, row in enumerate(rows):
      length = want["input_mask"][i].numpy().sum()
      assert row["input_ids"] == want["input_word_ids"][i][:length].numpy(
      ).tolist()
      assert row["token_type_ids"] == want["input_type_ids"][i][:length].numpy(
      ).tolist()
      assert row["labels"] == 1
    if texts is singles:
      assert [len(row["input_ids"]) for row in rows] == [12, 13, seq]


def test_hugging_face_tagging_rows_label_the_trainers_first_pieces(
    demo_paths, tmp_path):
  """run_ner's rows (`hf_contenders.tokenized_words`) against the trainer's
  tagging encoding over the same vocab file: the same ids, and a tag
  exactly where the trainer weighs a piece (a word's first), -100 where it
  does not; a sentence longer than the row is truncated at --seq_length."""
  pytest.importorskip(
      "transformers",
      reason="transformers is not installed: pip install -e '.[bench]'")
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  from trainer.data import word_pieces  # pylint: disable=g-import-not-at-top
  vocab = os.path.join(demo_paths["preprocessor"], "assets", "vocab.txt")
  seq = 16
  sentences = [["An", "AMAZING", "film", ",", "again!"], ["sad", "42"],
               ["good"] * 20]
  tags = [[1, 2, 0, 0, 3], [4, 0], [0, 1] * 10]
  path = tmp_path / "tagged.json"
  path.write_text(
      json.dumps(
          dict(task="tagging", texts=sentences, labels=tags, tag_names=[])))
  _, rows = hf_contenders.tokenized(str(path), vocab, seq)
  encode = word_pieces.tagged(
      tf.saved_model.load(demo_paths["preprocessor"]), seq)
  want = encode(
      tf.constant([" ".join(words) for words in sentences]),
      dict(
          tags=tf.constant([" ".join(map(str, t)) for t in tags]),
          index=tf.range(3, dtype=tf.int64)))
  for i, row in enumerate(rows[:2]):
    length = want["input_mask"][i].numpy().sum()
    assert row["input_ids"] == want["input_word_ids"][i][:length].numpy(
    ).tolist()
    weighted = want["weight"][i][:length].numpy() > 0
    labels = want["label"][i][:length].numpy()
    assert row["labels"] == [
        int(label) if w else -100 for label, w in zip(labels, weighted)
    ]
  labelled = [sum(label != -100 for label in row["labels"]) for row in rows]
  assert labelled == [5, 2, seq - 2]
  assert len(rows[2]["input_ids"]) == seq


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


def test_the_tagging_accuracy_pairs_by_seed(tmp_path):
  """hf_ner's report: the trainer's sweep row beside Hugging Face's seeds,
  each side's mean +- sd, and the paired difference over the seeds both
  ran with its Student-t interval (t_{0.975,1} = 12.706 for 2 pairs)."""
  hf = tmp_path / "hf.json"
  hf.write_text(
      json.dumps(dict(seeds=[dict(seed=0, f1=0.89),
                             dict(seed=1, f1=0.895)])))
  sweep = tmp_path / "sweep.json"
  sweep.write_text(
      json.dumps(
          dict(
              runs=dict(
                  ner=dict(
                      s0=dict(metrics=dict(f1=0.9)),
                      s1=dict(metrics=dict(f1=0.906)),
                      s2=dict(metrics=dict(f1=0.91)),
                      s3=dict(rc=1))))))
  table = hf_ner.report([str(hf)], str(sweep), "ner").splitlines()
  assert table[2:] == [
      "| 0 | 90.00 | 89.00 | +1.00 |",
      "| 1 | 90.60 | 89.50 | +1.10 |",
      "| 2 | 91.00 | - | - |",
      "| mean +- sd | 90.53 +- 0.50 | 89.25 +- 0.35 | |",
      "| trainer - Hugging Face, 2 pairs | | | +1.05 [+0.41, +1.69] |",
  ]
