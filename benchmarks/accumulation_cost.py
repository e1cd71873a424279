r"""Step-time cost of gradient accumulation at the same effective batch.

    python benchmarks/accumulation_cost.py [--size=minilm] [--ks=1,2,4] \
        [--batch_size=32] [--seq_length=128] [--steps=24]

Trains `python -m trainer.main` once per K (`--grad_accumulation_steps`)
with the same global batch, encoder shape and data, and prints examples per
second (the trainer's own figure: the loops after the first, which traces)
and each K's ratio to K=1, in one run on one machine.
"""

import argparse
import json
import os
import platform
import subprocess
import sys
import tempfile

import contenders

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _rate(paths, data, k, args, model_dir):
  cmd = [
      sys.executable, "-m", "trainer.main", f"--model_dir={model_dir}",
      f"--encoder_handle={paths['encoder']}",
      f"--preprocessor_handle={paths['preprocessor']}", f"--train_file={data}",
      f"--batch_size={args.batch_size}", f"--seq_length={args.seq_length}",
      f"--train_steps={args.steps}",
      f"--steps_per_loop={max(args.steps // 3, 1)}",
      f"--grad_accumulation_steps={k}", "--export=false",
      "--validation_fraction=0.01"
  ]
  result = subprocess.run(
      cmd,
      cwd=ROOT,
      env=dict(os.environ, PYTHONPATH=ROOT),
      capture_output=True,
      text=True,
      check=False)
  if result.returncode:
    raise RuntimeError(result.stderr[-2000:])
  with open(os.path.join(model_dir, "summary.json")) as f:
    return json.load(f)["examples_per_second"]


def main():
  parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
  parser.add_argument("--size", default="minilm", choices=["demo", "minilm"])
  parser.add_argument("--ks", default="1,2,4")
  parser.add_argument("--batch_size", type=int, default=32)
  parser.add_argument("--seq_length", type=int, default=128)
  parser.add_argument("--steps", type=int, default=24)
  args = parser.parse_args()
  work = os.path.join(tempfile.gettempdir(), "bert_trainer_bench")
  os.makedirs(work, exist_ok=True)
  paths = contenders.build_assets(work, args.size)
  data = contenders.text_file(work)
  rates = {}
  for k in (int(k) for k in args.ks.split(",")):
    rates[k] = _rate(paths, data, k, args, tempfile.mkdtemp(dir=work))
    print(f"K={k}: {rates[k]:.1f} examples/s", file=sys.stderr, flush=True)
  print(f"machine: {platform.processor() or platform.machine()}, "
        f"{os.cpu_count()} cores; {args.size} shape, batch {args.batch_size}"
        f" per update, seq {args.seq_length}, {args.steps} updates\n")
  first = rates[min(rates)]
  print(f"| K | micro-batch | examples/s | vs K={min(rates)} |")
  print("| --- | --- | --- | --- |")
  for k, rate in rates.items():
    print(f"| {k} | {args.batch_size // k} | {rate:.1f} | {rate / first:.2f} |")


if __name__ == "__main__":
  main()
