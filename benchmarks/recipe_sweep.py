r"""The recipe sweep: fine-tuning runs per row and repetition, statistics
over the repetitions, one table at the end.

    python benchmarks/recipe_sweep.py \
        --flagfile=flags/sentiment140_minilm_cpu.flags \
        --rows=benchmarks/sweep_minilm_cpu.txt --work_dir=/tmp/sweep \
        --folds=5 --baseline=s48_e2_fixed

Each line of `--rows` is `<name> <flag> <flag> ...`: flags that override
the flagfile for that run (`#` starts a comment). Each row runs once per
repetition:
  --seeds=N: `--seed=0` .. `--seed=N-1`. The seed changes the data order,
    the head's initialisation and, where validation is carved from train,
    which rows are held out (a hash of seed and row index).
  --folds=K: `--validation_fold=0` .. `K-1` at the flagfile's seed: K
    disjoint held-out parts, so K runs evaluate K times as many rows.
Both together give every (seed, fold). Runs go repetition by repetition,
every row within one, so a sweep cut short still holds complete pairs.
Each run is a real `python -m trainer.main` process in its own model_dir
under `--work_dir`, with an eval only at the end and no export, so the
metrics are the final model's, never a pick among evals. A run whose record
exists is not run again: a killed sweep resumes from the runs it has, and a
run stopped midway resumes from its checkpoint (SIGTERM saves one).

Prints a Markdown table per eval metric: each row's mean, standard
deviation and standard error over its repetitions and, against
`--baseline`, the paired difference with its 95% interval (Student's t over
the repetitions both rows ran) and, for runs with --ema_decay (which also
report the raw weights' `raw_<metric>`), the average's paired difference
against the raw weights of the same runs. Those raw weights also make a row
of their own, `<row>:raw`: the same training without the average (equal to
a run without --ema_decay up to float noise, see benchmarks/RESULTS.md), so
`--baseline=<row>:raw` compares every row with fixed shapes with no second
fixed-shape run. Writes the table to
`--work_dir`/sweep.md and every run's record with the statistics to
`--work_dir`/sweep.json.
"""

import argparse
import dataclasses
import json
import os
import platform
import shlex
import subprocess
import sys
import time

import sweep_stats

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
# The sweep's own settings: final-model metrics, nothing but training timed.
FIXED = ("--eval_every=0", "--checkpoint_every=0", "--export=false")


def read_rows(path):
  rows = []
  with open(path) as f:
    for line in f:
      words = shlex.split(line, comments=True)
      if words:
        rows.append((words[0], words[1:]))
  return rows


def command(flagfile, overrides, model_dir):
  """The run's command line. The sweep's own settings come after the row's
  flags, so a row's --flagfile (read where it stands) cannot undo them."""
  base = [f"--flagfile={flagfile}"] if flagfile else []
  return ([sys.executable, "-m", "trainer.main"] + base + overrides +
          list(FIXED) + [f"--model_dir={model_dir}"])


def sets_flag(name, overrides, flagfile):
  """Whether the run's flags, in the order absl reads them (the base
  flagfile, then the row's, each --flagfile= where it stands, one level
  deep), leave --name at a value other than 0."""

  def read(path):
    with open(os.path.join(ROOT, path)) as f:
      return shlex.split(f.read(), comments=True)

  words = read(flagfile) if flagfile else []
  for w in overrides:
    words += read(w.split("=", 1)[1]) if w.startswith("--flagfile=") else [w]
  values = [
      w.partition("=")[2] if "=" in w else next_
      for w, next_ in zip(words, words[1:] + [""])
      if w == f"--{name}" or w.startswith(f"--{name}=")
  ]
  return bool(values) and values[-1] not in ("", "0", "0.0")


def repetitions(seeds, folds):
  """[(suffix, flags)] of every repetition; one plain run when both are 0."""
  seed_part = [(f"s{i}", [f"--seed={i}"]) for i in range(seeds)] or [("", [])]
  folds_ = [(f"f{k}", [f"--validation_fold={k}"]) for k in range(folds)]
  fold_part = folds_ or [("", [])]
  return [("-".join(filter(None, (s, f))), s_flags + f_flags)
          for s, s_flags in seed_part
          for f, f_flags in fold_part]


def run_one(flagfile, name, overrides, work_dir):
  """Runs one (row, repetition) unless its record exists; returns it."""
  model_dir = os.path.join(work_dir, name)
  record_path = os.path.join(model_dir, "sweep_record.json")
  if os.path.exists(record_path):
    with open(record_path) as f:
      return json.load(f)
  cmd = command(flagfile, overrides, model_dir)
  started = time.time()
  with open(os.path.join(work_dir, f"{name}.log"), "w") as log:
    rc = subprocess.run(
        cmd, cwd=ROOT, stdout=log, stderr=log, check=False).returncode
  wall = time.time() - started
  record = dict(name=name, overrides=overrides, rc=rc, wall_seconds=wall)
  summary_path = os.path.join(model_dir, "summary.json")
  if rc == 0 and os.path.exists(summary_path):
    with open(summary_path) as f:
      summary = json.load(f)
    record.update(
        metrics={
            k.removeprefix("eval_"): v
            for k, v in summary.items()
            if k.startswith("eval_") and isinstance(v, float)
        },
        eval_examples=summary["eval_examples"],
        examples_per_second=summary["examples_per_second"],
        steps=summary["final_step"],
        train_examples=summary["examples"]["train"],
        # A run killed before its record (SIGTERM saves a checkpoint)
        # resumes there: the same metrics, but its wall is only the rest.
        start_step=summary["start_step"])
    with open(record_path, "w") as f:
      json.dump(record, f)
  return record


RAW = ":raw"


def with_raw_rows(runs):
  """runs plus, for every row whose runs report the raw weights
  (--ema_decay), a row `<row>:raw` whose metrics are those raw ones."""
  out = dict(runs)
  for row, reps in runs.items():
    raw = {}
    for rep, r in reps.items():
      metrics = {
          m.removeprefix("raw_"): v
          for m, v in r.get("metrics", {}).items()
          if m.startswith("raw_")
      }
      if metrics:
        raw[rep] = dict(r, metrics=metrics)
    if raw:
      out[row + RAW] = raw
  return out


def held_out_share(reps):
  """Held-out over training examples when every run of a row is a fold of
  one data set (and its record counts both), else 0: folds share their
  training data, which sweep_stats.paired allows for."""
  done = [r for r in reps.values() if "metrics" in r]
  if not done or not all(
      r.get("train_examples") and any(
          o.startswith("--validation_fold=")
          for o in r["overrides"])
      for r in done):
    return 0.0
  return (sum(r["eval_examples"] for r in done) /
          sum(r["train_examples"] for r in done))


def statistics(runs, baseline):
  """runs: {row: {repetition: record}} -> {row: {metric: dict}} with the
  Summary over the row's finished repetitions, for rows other than
  `baseline` the Paired difference against it and, where the runs also
  report the raw weights' `raw_<metric>` (--ema_decay), the Paired
  difference of the averaged weights against them (`vs_raw`: the same
  runs, so the pairing removes all but the average's own effect). For
  folds, `paired_folds` is the interval widened for the training data the
  folds share."""

  def values(row, metric):
    return {
        rep: r["metrics"][metric]
        for rep, r in runs[row].items()
        if metric in r.get("metrics", {})
    }

  out = {}
  for row in runs:
    metrics = sorted(
        {m for r in runs[row].values() for m in r.get("metrics", {})})
    out[row] = {}
    for metric in metrics:
      mine = values(row, metric)
      entry = dict(summary=sweep_stats.summarize(mine.values()))
      if baseline in runs and row != baseline:
        theirs = values(baseline, metric)
        entry["paired"] = sweep_stats.paired(mine, theirs)
        share = held_out_share(runs[row])
        if share:
          entry["paired_folds"] = sweep_stats.paired(mine, theirs, share)
      if f"raw_{metric}" in metrics:
        entry["vs_raw"] = sweep_stats.paired(mine, values(row, f"raw_{metric}"))
      out[row][metric] = entry
  return out


def _points(v, scale=100):
  return "-" if v is None or v != v else f"{v * scale:.2f}"


def _interval(p):
  if not p or p.low != p.low:
    return "-"
  return f"[{_points(p.low)}, {_points(p.high)}]"


def table(runs, stats, baseline, flagfile):
  # The raw weights' metrics show as the `<row>:raw` rows.
  metrics = sorted(
      {m for row in stats.values() for m in row if not m.startswith("raw_")})
  lines = []
  for metric in metrics:
    paired = (f"paired: row - {baseline}, 95% interval over the "
              "repetitions both ran; `folds`: widened for the training data "
              "folds share" if baseline else "no --baseline row")
    lines += [
        f"**{metric}** (x100; {paired})", "",
        "| row | runs | mean | sd | sem | paired diff | 95% interval | "
        "average - raw weights [95%] | train examples/s | wall per run |",
        "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |"
    ]
    for row, entries in stats.items():
      done = [r for r in runs[row].values() if "metrics" in r]
      failed = len(runs[row]) - len(done)
      if metric not in entries:
        # A row of another task (its own --flagfile) reports other metrics;
        # a row none of whose runs finished reports none.
        if not done:
          lines.append(f"| {row} | 0 of {len(runs[row])} | failed | | | | "
                       "| | | |")
        continue
      s, p = entries[metric]["summary"], entries[metric].get("paired")
      interval = _interval(p)
      if entries[metric].get("paired_folds"):
        interval += f"; folds {_interval(entries[metric]['paired_folds'])}"
      speeds = [
          r["examples_per_second"] for r in done if r.get("examples_per_second")
      ]
      speed = f"{sum(speeds) / len(speeds):.1f}" if speeds else "-"
      # A resumed run's wall is part of one; its examples/s is whole.
      walls = [r["wall_seconds"] for r in done if not r.get("start_step")]
      wall = f"{sum(walls) / len(walls) / 60:.1f} min" if walls else "-"
      raw = entries[metric].get("vs_raw")
      vs_raw = "-"
      if raw:
        vs_raw = f"{_points(raw.diff.mean)} {_interval(raw)}"
      lines.append(
          f"| {row} | {s.n}{f' ({failed} failed)' if failed else ''} | "
          f"{_points(s.mean)} | {_points(s.sd)} | {_points(s.sem)} | "
          f"{_points(p.diff.mean) if p else '-'} | {interval} | "
          f"{vs_raw} | {speed} | {wall} |")
    lines.append("")
  base = f"--flagfile={flagfile} " if flagfile else ""
  lines.append(f"Command per run: `python -m trainer.main "
               f"{base}<row's flags> <repetition's --seed/--validation_fold> "
               f"{' '.join(FIXED)} --model_dir=<work_dir>/<row>-<rep>`"
               f"; machine: {machine()}.")
  return "\n".join(lines)


def machine():
  """The machine line: the CPU's model name and vector units, cores."""
  name, flags = platform.machine(), set()
  try:
    with open("/proc/cpuinfo") as f:
      for line in f:
        key, _, value = line.partition(":")
        if key.strip() == "model name":
          name = value.strip()
        elif key.strip() == "flags":
          flags = set(value.split())
  except OSError:
    pass
  units = [
      u for u in ("avx2", "avx512f", "avx512_bf16", "amx_bf16") if u in flags
  ]
  return f"{name} ({', '.join(units) or 'no AVX2'}), {os.cpu_count()} cores"


def write(work_dir, runs, stats, baseline, flagfile):
  text = table(runs, stats, baseline, flagfile)
  with open(os.path.join(work_dir, "sweep.md"), "w") as f:
    f.write(text + "\n")
  as_json = {
      row: {
          metric: {
              k: dataclasses.asdict(v) if v is not None else None
              for k, v in entry.items()
          }
          for metric, entry in entries.items()
      } for row, entries in stats.items()
  }
  tmp = os.path.join(work_dir, "sweep.json.tmp")
  with open(tmp, "w") as f:
    json.dump(
        dict(runs=runs, statistics=as_json, baseline=baseline),
        f,
        indent=1,
        default=str)
  os.replace(tmp, os.path.join(work_dir, "sweep.json"))
  return text


def main():
  parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
  parser.add_argument(
      "--flagfile",
      default="",
      help="The base flagfile ('' = each row gives its own --flagfile).")
  parser.add_argument("--rows", required=True)
  parser.add_argument("--work_dir", required=True)
  parser.add_argument(
      "--only",
      default="",
      help="Comma-separated row names to run (default all).")
  parser.add_argument(
      "--seeds", type=int, default=0, help="Runs per row with --seed=0..N-1.")
  parser.add_argument(
      "--folds",
      type=int,
      default=0,
      help="Runs per row with --validation_fold=0..K-1.")
  parser.add_argument(
      "--baseline",
      default="",
      help="The row every other is compared with, paired per repetition; "
      f"<row>{RAW} names the raw weights of a row's --ema_decay runs.")
  args = parser.parse_args()
  os.makedirs(args.work_dir, exist_ok=True)
  only = set(filter(None, args.only.split(",")))
  every_row = read_rows(args.rows)
  unknown = sorted(only - {n for n, _ in every_row})
  if unknown:
    parser.error(f"--only names {', '.join(unknown)}, not rows of "
                 f"{args.rows}")
  rows = [(n, o) for n, o in every_row if not only or n in only]
  base = args.baseline.removesuffix(RAW)
  if args.baseline and base not in dict(rows):
    parser.error(f"--baseline={args.baseline} is not a row of --rows "
                 f"(or a row's raw weights, <row>{RAW})")
  if args.baseline.endswith(RAW) and not sets_flag("ema_decay",
                                                   dict(rows)[base],
                                                   args.flagfile):
    parser.error(f"--baseline={args.baseline}: row {base} has no "
                 "--ema_decay, so its runs report no raw weights")
  runs = {name: {} for name, _ in rows}
  for rep, rep_flags in repetitions(args.seeds, args.folds):
    for name, overrides in rows:
      run_name = f"{name}-{rep}" if rep else name
      r = run_one(args.flagfile, run_name, overrides + rep_flags, args.work_dir)
      runs[name][rep or "-"] = r
      print(
          f"{run_name}: {r.get('metrics', 'failed')}, "
          f"{r['wall_seconds']:.0f} s",
          file=sys.stderr,
          flush=True)
      every = with_raw_rows(runs)
      stats = statistics(every, args.baseline)
      text = write(args.work_dir, every, stats, args.baseline, args.flagfile)
  print(text)


if __name__ == "__main__":
  main()
