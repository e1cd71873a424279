"""The recipe sweep's statistics, against hand-worked values, and its
table and resume on records (no training run)."""

import json
import math
import os
import sys

import numpy as np
import pytest

from conftest import ROOT

sys.path.insert(0, os.path.join(ROOT, "benchmarks"))
# pylint: disable=g-import-not-at-top,wrong-import-position
import recipe_sweep  # noqa: E402
import sweep_stats  # noqa: E402


def test_summary_of_three_values():
  # 0.80, 0.82, 0.84: mean 0.82, deviations -.02, 0, .02, sum of squares
  # 0.0008 over n - 1 = 2: variance 0.0004, sd 0.02, sem 0.02 / sqrt(3).
  s = sweep_stats.summarize([0.80, 0.82, 0.84])
  assert s.n == 3
  assert s.mean == pytest.approx(0.82, abs=1e-12)
  assert s.sd == pytest.approx(0.02, abs=1e-12)
  assert s.sem == pytest.approx(0.02 / math.sqrt(3), abs=1e-12)


def test_one_value_has_no_spread():
  s = sweep_stats.summarize([0.5])
  assert (s.n, s.mean) == (1, 0.5)
  assert math.isnan(s.sd) and math.isnan(s.sem)


def test_paired_interval_over_shared_repetitions():
  # Differences over f0..f3 (f4 has no baseline): .01, .03, .02, .02;
  # mean .02, squared deviations 1e-4 + 1e-4 + 0 + 0 over 3: sd
  # sqrt(2/3) x 1e-2, sem sd / 2, half width t(0.975, 3) = 3.182 x sem.
  row = dict(f0=0.81, f1=0.83, f2=0.82, f3=0.84, f4=0.99)
  base = dict(f0=0.80, f1=0.80, f2=0.80, f3=0.82)
  p = sweep_stats.paired(row, base)
  sd = math.sqrt(2 / 3) * 1e-2
  assert p.diff.n == 4
  assert p.diff.mean == pytest.approx(0.02, abs=1e-12)
  assert p.diff.sd == pytest.approx(sd, abs=1e-12)
  assert p.half_width == pytest.approx(3.182 * sd / 2, abs=1e-12)
  assert (p.low, p.high) == pytest.approx(
      (0.02 - 3.182 * sd / 2, 0.02 + 3.182 * sd / 2))


def test_folds_sharing_training_data_widen_the_interval():
  """Differences .01, .03, .02, .02 as above, 1 held out per 9 trained:
  sd x sqrt(1/4 + 1/9) in place of sd / 2."""
  row = dict(f0=0.81, f1=0.83, f2=0.82, f3=0.84)
  base = dict(f0=0.80, f1=0.80, f2=0.80, f3=0.82)
  p = sweep_stats.paired(row, base, test_train=1 / 9)
  sd = math.sqrt(2 / 3) * 1e-2
  assert p.diff.mean == pytest.approx(0.02, abs=1e-12)
  assert p.half_width == pytest.approx(
      3.182 * sd * math.sqrt(1 / 4 + 1 / 9), abs=1e-12)


def test_paired_needs_a_shared_repetition():
  assert sweep_stats.paired(dict(s0=1.0), dict(s1=1.0)) is None
  one = sweep_stats.paired(dict(s0=0.9), dict(s0=0.8))
  assert one.diff.mean == pytest.approx(0.1) and math.isnan(one.low)


@pytest.mark.parametrize("df, t", [(1, 12.706), (2, 4.303), (4, 2.776),
                                   (30, 2.042), (40, 2.021), (60, 2.000),
                                   (120, 1.980), (10_000, 1.960)])
def test_t_quantiles(df, t):
  assert sweep_stats.t975(df) == pytest.approx(t, abs=1.5e-3)


def test_repetitions_are_seeds_then_folds():
  assert recipe_sweep.repetitions(0, 0) == [("", [])]
  assert recipe_sweep.repetitions(2, 0) == [("s0", ["--seed=0"]),
                                            ("s1", ["--seed=1"])]
  assert recipe_sweep.repetitions(0, 2) == [("f0", ["--validation_fold=0"]),
                                            ("f1", ["--validation_fold=1"])]
  names = [r for r, _ in recipe_sweep.repetitions(2, 2)]
  assert names == ["s0-f0", "s0-f1", "s1-f0", "s1-f1"]


def _record(work_dir, name, accuracy, wall_seconds=60.0, **more):
  os.makedirs(os.path.join(work_dir, name))
  record = dict(
      name=name,
      overrides=more.pop("overrides", []),
      train_examples=more.pop("train_examples", None),
      rc=0,
      wall_seconds=wall_seconds,
      start_step=more.pop("start_step", 0),
      metrics=dict(accuracy=accuracy, loss=0.4, **more),
      eval_examples=100,
      examples_per_second=10.0,
      steps=5)
  with open(os.path.join(work_dir, name, "sweep_record.json"), "w") as f:
    json.dump(record, f)


def test_the_sweep_resumes_from_its_records_and_tabulates(tmp_path):
  """Every run has its record, so the sweep runs nothing and prints the
  statistics of the records: the resume path and the table together."""
  rows = tmp_path / "rows.txt"
  rows.write_text("fixed --seq_buckets=none\nauto --seq_buckets=auto\n")
  work = str(tmp_path / "work")
  for fold, (a, b) in enumerate([(0.80, 0.81), (0.82, 0.84), (0.84, 0.83)]):
    _record(work, f"fixed-f{fold}", a)
    _record(work, f"auto-f{fold}", b)
  sys.argv = [
      "recipe_sweep", f"--rows={rows}", f"--work_dir={work}", "--folds=3",
      "--baseline=fixed"
  ]
  recipe_sweep.main()
  with open(os.path.join(work, "sweep.json")) as f:
    out = json.load(f)
  auto = out["statistics"]["auto"]["accuracy"]
  # Differences .01, .02, -.01: mean 1/150, sd sqrt(7) / 100 x sqrt(1/3).
  assert auto["summary"]["mean"] == pytest.approx(0.8267, abs=1e-4)
  assert auto["paired"]["diff"]["mean"] == pytest.approx(0.01 / 1.5)
  sd = math.sqrt(
      ((0.01 - 1 / 150)**2 + (0.02 - 1 / 150)**2 + (-0.01 - 1 / 150)**2) / 2)
  assert auto["paired"]["diff"]["sd"] == pytest.approx(sd)
  text = open(os.path.join(work, "sweep.md")).read()
  assert "| auto | 3 | 82.67 | 1.53 | 0.88 | 0.67 |" in text
  fixed = "| fixed | 3 | 82.00 | 2.00 | 1.15 | - | - | - | 10.0 | 1.0 min |"
  assert fixed in text


def test_folds_of_one_data_set_get_the_widened_interval(tmp_path):
  """Runs of --validation_fold that count 100 held out and 900 trained:
  the table gives the plain interval and, after it, the one widened by
  sqrt(1/3 + 1/9) / sqrt(1/3)."""
  rows = tmp_path / "rows.txt"
  rows.write_text("fixed --seq_buckets=none\nauto --seq_buckets=auto\n")
  work = str(tmp_path / "work")
  for fold, (a, b) in enumerate([(0.80, 0.81), (0.82, 0.84), (0.84, 0.83)]):
    for row, value in (("fixed", a), ("auto", b)):
      _record(
          work,
          f"{row}-f{fold}",
          value,
          train_examples=900,
          overrides=[f"--validation_fold={fold}"])
  sys.argv = [
      "recipe_sweep", f"--rows={rows}", f"--work_dir={work}", "--folds=3",
      "--baseline=fixed"
  ]
  recipe_sweep.main()
  with open(os.path.join(work, "sweep.json")) as f:
    auto = json.load(f)["statistics"]["auto"]["accuracy"]
  # Differences .01, .02, -.01 (the test above): sd sqrt(7/3) x 1e-2.
  sd = math.sqrt(7 / 3) * 1e-2
  plain = auto["paired"]["high"] - auto["paired"]["low"]
  folds = auto["paired_folds"]["high"] - auto["paired_folds"]["low"]
  assert plain == pytest.approx(2 * 4.303 * sd / math.sqrt(3))
  assert folds == pytest.approx(2 * 4.303 * sd * math.sqrt(1 / 3 + 1 / 9))
  text = open(os.path.join(work, "sweep.md")).read()
  assert "| 0.67 | [-3.13, 4.46]; folds [-3.72, 5.05] |" in text


def test_averaged_weights_paired_against_the_same_runs_raw_ones(tmp_path):
  """--ema_decay runs report eval_raw_* beside the average's metrics: the
  row's `vs_raw` pairs them run by run."""
  work = str(tmp_path / "work")
  for fold, (average, raw) in enumerate([(0.82, 0.80), (0.83, 0.82),
                                         (0.81, 0.81)]):
    _record(work, f"ema-f{fold}", average, raw_accuracy=raw)
  rows = tmp_path / "rows.txt"
  rows.write_text("ema --ema_decay=0.99\n")
  sys.argv = [
      "recipe_sweep", f"--rows={rows}", f"--work_dir={work}", "--folds=3"
  ]
  recipe_sweep.main()
  with open(os.path.join(work, "sweep.json")) as f:
    entry = json.load(f)["statistics"]["ema"]["accuracy"]
  # Differences .02, .01, 0: mean .01, sd .01, sem .01 / sqrt(3), t(2).
  assert entry["vs_raw"]["diff"]["mean"] == pytest.approx(0.01)
  assert entry["vs_raw"]["diff"]["sd"] == pytest.approx(0.01)
  half = 4.303 * 0.01 / math.sqrt(3)
  assert entry["vs_raw"]["low"] == pytest.approx(0.01 - half, abs=1e-4)
  text = open(os.path.join(work, "sweep.md")).read()
  assert "| ema | 3 | 82.00 | 1.00 | 0.58 | - | - | 1.00 [-1.48, 3.48] |" in (
      text)


def test_the_raw_weights_of_averaged_runs_are_a_baseline_row(tmp_path):
  """`--baseline=ema:raw` pairs every row with the raw weights of the ema
  row's runs, shown as a row of their own; no raw_* table is printed."""
  work = str(tmp_path / "work")
  for seed, (average, raw, auto) in enumerate([(0.82, 0.80, 0.79),
                                               (0.83, 0.82, 0.80),
                                               (0.81, 0.81, 0.78)]):
    _record(work, f"ema-s{seed}", average, raw_accuracy=raw, raw_loss=0.5)
    _record(work, f"auto-s{seed}", auto)
  rows = tmp_path / "rows.txt"
  rows.write_text("ema --ema_decay=0.99\nauto --seq_buckets=auto\n")
  sys.argv = [
      "recipe_sweep", f"--rows={rows}", f"--work_dir={work}", "--seeds=3",
      "--baseline=ema:raw"
  ]
  recipe_sweep.main()
  with open(os.path.join(work, "sweep.json")) as f:
    stats = json.load(f)["statistics"]
  assert stats["ema:raw"]["accuracy"]["summary"]["mean"] == pytest.approx(2.43 /
                                                                          3)
  assert stats["ema:raw"]["loss"]["summary"]["mean"] == pytest.approx(0.5)
  # auto - raw: -.01, -.02, -.03: mean -.02, sd .01; ema - raw as vs_raw.
  auto = stats["auto"]["accuracy"]["paired"]["diff"]
  assert (auto["mean"], auto["sd"]) == pytest.approx((-0.02, 0.01))
  ema = stats["ema"]["accuracy"]["paired"]["diff"]
  assert ema["mean"] == pytest.approx(0.01)
  text = open(os.path.join(work, "sweep.md")).read()
  assert "**raw_accuracy**" not in text and "**accuracy**" in text
  assert "| ema:raw | 3 | 81.00 | 1.00 | 0.58 | - | - | - |" in text
  assert "| auto | 3 | 79.00 | 1.00 | 0.58 | -2.00 | [-4.48, 0.48] | - |" in (
      text)


def _refusal(tmp_path, capsys, rows_text, flag):
  """The sweep's one-line refusal of `flag` over rows `rows_text`."""
  rows = tmp_path / "rows.txt"
  rows.write_text(rows_text)
  sys.argv = ["recipe_sweep", f"--rows={rows}", f"--work_dir={tmp_path}", flag]
  with pytest.raises(SystemExit):
    recipe_sweep.main()
  return capsys.readouterr().err


def test_a_baseline_must_name_a_row_or_its_raw_weights(tmp_path, capsys):
  err = _refusal(tmp_path, capsys, "ema --ema_decay=0.99\n",
                 "--baseline=fixed:raw")
  assert "--baseline=fixed:raw is not a row of --rows" in err


def test_a_raw_baseline_may_take_its_average_from_a_flagfile(tmp_path):
  """--ema_decay in the base flagfile makes every row's raw weights a
  baseline; --ema_decay=0 there (or a later 0) leaves none."""
  flags = tmp_path / "base.flags"
  flags.write_text("# the recipe\n--ema_decay=0.998\n--seed=0\n")
  assert recipe_sweep.sets_flag("ema_decay", [], str(flags))
  assert not recipe_sweep.sets_flag("ema_decay", ["--ema_decay=0"], str(flags))
  assert recipe_sweep.sets_flag("ema_decay", ["--ema_decay", "0.9"], "")
  assert not recipe_sweep.sets_flag("ema_decay", ["--ema_decay", "0"], "")
  assert not recipe_sweep.sets_flag("ema_decay", ["--seed=1"], "")
  own = tmp_path / "own.flags"
  own.write_text("--ema_decay=0.99\n")
  assert recipe_sweep.sets_flag("ema_decay", [f"--flagfile={own}"], "")


def test_only_must_name_rows(tmp_path, capsys):
  err = _refusal(tmp_path, capsys,
                 "fixed --seq_buckets=none\nauto --seq_buckets=auto\n",
                 "--only=fixed,atuo")
  assert "--only names atuo, not rows of" in err


def test_a_resumed_runs_wall_is_left_out_of_the_mean(tmp_path):
  """A run killed before its record resumes from its checkpoint: its wall
  is only the rest, so the wall column averages the whole runs."""
  rows = tmp_path / "rows.txt"
  rows.write_text("fixed --seq_buckets=none\n")
  work = str(tmp_path / "work")
  _record(work, "fixed-f0", 0.80, wall_seconds=600.0)
  _record(work, "fixed-f1", 0.82, wall_seconds=60.0, start_step=50)
  _record(work, "fixed-f2", 0.84, wall_seconds=720.0)
  sys.argv = [
      "recipe_sweep", f"--rows={rows}", f"--work_dir={work}", "--folds=3"
  ]
  recipe_sweep.main()
  text = open(os.path.join(work, "sweep.md")).read()
  wall = "| - | 10.0 | 11.0 min |"
  assert "| fixed | 3 | 82.00 | 2.00 | 1.15 | - | - " + wall in text


def test_the_sweeps_settings_follow_a_rows_own_flagfile():
  """absl reads a --flagfile where it stands: a row's flagfile with
  --checkpoint_every=200 must not undo the sweep's --checkpoint_every=0."""
  cmd = recipe_sweep.command("", ["--flagfile=flags/x.flags", "--seed=1"],
                             "/tmp/m")
  assert cmd[1:] == [
      "-m", "trainer.main", "--flagfile=flags/x.flags", "--seed=1",
      "--eval_every=0", "--checkpoint_every=0", "--export=false",
      "--model_dir=/tmp/m"
  ]


def test_tokens_per_example_under_three_batchings():
  """Three rows of length 4 and one of 8 in buckets (4, 8), batches of 2:
  one-length .75 x 4 + .25 x 8 = 5; mixed batches hold only rows of 4 with
  chance .75^2 = .5625: 4 x .5625 + 8 x .4375 = 5.75."""
  import bucket_padding  # pylint: disable=g-import-not-at-top
  histogram = [0, 0, 0, 0, 3, 0, 0, 0, 1]
  t = bucket_padding.tokens_per_example(histogram, (4, 8), 2)
  assert t == pytest.approx(
      dict(fixed=8.0, one_length=5.0, mixed=5.75, mixed_in_last=0.4375))
  # The table, and each bucket's mean label: 2 of the 3 short rows and
  # the long one are class 1.
  text = bucket_padding.report(
      np.array([4, 4, 4, 8]), np.array([1, 0, 1, 1]), (4, 8), 2, 8)
  assert "| one-length batches (--seq_buckets) | 5.0 | 1.60x |" in text
  assert "| mixed batches cut to their longest | 5.8 | 1.39x |" in text
  assert ("| 4 | 75.0% | 0.667 |\n| 8 | 25.0% | 1.000 |\n"
          "| all | 100% | 0.750 |") in text
  # One bucket: every batching pays --seq_length.
  one = bucket_padding.tokens_per_example(histogram, (8,), 2)
  assert one == pytest.approx(
      dict(fixed=8.0, one_length=8.0, mixed=8.0, mixed_in_last=1.0))


def test_rows_of_other_tasks_leave_a_metrics_table():
  """A sweep over several tasks' flagfiles: a finished row that does not
  report a metric is left out of its table; a row none of whose runs
  finished (run_one's record of a failed run: no metrics) shows as
  failed."""

  def done(accuracy, **more):
    return dict(
        rc=0,
        wall_seconds=60.0,
        examples_per_second=10.0,
        metrics=dict(accuracy=accuracy, **more))

  runs = dict(
      cola=dict(s0=done(0.71, mcc=0.24), s1=done(0.71, mcc=0.25)),
      rte=dict(s0=done(0.60), s1=done(0.60)),
      sst2=dict(
          s0=dict(rc=1, wall_seconds=5.0), s1=dict(rc=1, wall_seconds=5.0)))
  stats = recipe_sweep.statistics(runs, None)
  text = recipe_sweep.table(runs, stats, None, "")
  mcc = text.split("**mcc**")[1].split("**")[0]
  assert "(x100; no --baseline row)" in mcc
  assert "| cola | 2 | 24.50 | 0.71 | 0.50 | - | - | - |" in mcc
  assert "| sst2 | 0 of 2 | failed |" in mcc
  assert "rte" not in mcc
  accuracy = text.split("**accuracy**")[1].split("**")[0]
  assert "| rte | 2 | 60.00 |" in accuracy
