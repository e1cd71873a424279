r"""The recipe sweep: one fine-tuning run per row, one table at the end.

    python benchmarks/recipe_sweep.py \
        --flagfile=flags/sentiment140_minilm_cpu.flags \
        --rows=benchmarks/sweep_minilm_cpu.txt --work_dir=/tmp/sweep

Each line of `--rows` is `<name> <flag> <flag> ...`: flags that override
the flagfile for that run (`#` starts a comment). Rows run one after the
other, as real `python -m trainer.main` processes, each in its own
model_dir under `--work_dir`, with an eval only at the end and no export,
so the eval metrics are the final model's, never a pick among evals.
A row whose summary.json exists is not run again: the sweep resumes after
a kill. Prints a Markdown table (every eval metric, train examples/s, wall
time, the command) and writes it to `--work_dir`/sweep.md.
"""

import argparse
import json
import os
import platform
import shlex
import subprocess
import sys
import time

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
  base = [f"--flagfile={flagfile}"] if flagfile else []
  return ([sys.executable, "-m", "trainer.main"] + base + list(FIXED) +
          overrides + [f"--model_dir={model_dir}"])


def run_row(flagfile, name, overrides, work_dir):
  """Runs one row unless its summary exists; returns its record."""
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
        steps=summary["final_step"])
    with open(record_path, "w") as f:
      json.dump(record, f)
  return record


def table(records, flagfile):
  lines = [
      "| row | overrides | eval metrics (final model) | train examples/s | "
      "wall |", "| --- | --- | --- | --- | --- |"
  ]
  for r in records:
    # Rows recorded before the sweep reported every metric held accuracy.
    scores = r.get("metrics") or ({
        "accuracy": r["accuracy"]
    } if "accuracy" in r else None)
    if not scores:
      lines.append(f"| {r['name']} | {' '.join(r['overrides'])} | failed "
                   f"(rc {r['rc']}) | - | - |")
      continue
    minutes, seconds = divmod(int(r["wall_seconds"]), 60)
    # None when the row only resumed a finished run (no loop timed).
    speed = r["examples_per_second"]
    lines.append(f"| {r['name']} | `{' '.join(r['overrides'])}` | "
                 f"{', '.join(f'{k} {v:.4f}' for k, v in scores.items())} | "
                 f"{'-' if speed is None else f'{speed:.1f}'} | "
                 f"{minutes} min {seconds:02d} s |")
  lines.append("")
  base = f"--flagfile={flagfile} " if flagfile else ""
  lines.append(f"Command per row: `python -m trainer.main "
               f"{base}{' '.join(FIXED)} <overrides> "
               f"--model_dir=<work_dir>/<row>`; machine: "
               f"{platform.processor() or platform.machine()}, "
               f"{os.cpu_count()} cores.")
  return "\n".join(lines)


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
  args = parser.parse_args()
  os.makedirs(args.work_dir, exist_ok=True)
  only = set(filter(None, args.only.split(",")))
  records = []
  for name, overrides in read_rows(args.rows):
    if only and name not in only:
      continue
    records.append(run_row(args.flagfile, name, overrides, args.work_dir))
    r = records[-1]
    print(
        f"{name}: {r.get('metrics', 'failed')}, "
        f"{r['wall_seconds']:.0f} s",
        file=sys.stderr,
        flush=True)
    text = table(records, args.flagfile)
    with open(os.path.join(args.work_dir, "sweep.md"), "w") as f:
      f.write(text + "\n")
  print(table(records, args.flagfile))


if __name__ == "__main__":
  main()
