r"""Host input throughput: tweets/second through read, clean, tokenize, pack.

    python benchmarks/input_throughput.py [--csv=PATH] [--seq_length=128]

Runs the trainer's own training input pipeline (`input_pipeline.train_dataset`
over a `FileSource`, the demo preprocessor unless --preprocessor_handle is
given) pinned to 1 and then 2 cores (`taskset`), and prints a markdown table.
The data is ../shared/data/sentiment140_sample.csv when present, else a
generated file in the same layout.
"""

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SHARED = os.path.join(
    os.path.dirname(ROOT), "shared", "data", "sentiment140_sample.csv")


def generated_csv(path, rows=20_000):
  """`rows` generated tweets in the six-column Sentiment140 layout at `path`
  (kept when it exists: a 1.6M-row file takes a while)."""
  import random  # pylint: disable=g-import-not-at-top
  sys.path.insert(0, ROOT)
  from trainer.encoders import demo  # pylint: disable=g-import-not-at-top
  if os.path.exists(path):
    return path
  rng = random.Random(0)
  with open(path + ".tmp", "w", encoding="latin-1") as f:
    for i in range(rows):
      label = 4 * (i % 2)
      text = demo.sentence(rng, label == 4)
      f.write(f'"{label}","{i}","Mon Apr 06 22:19:45 PDT 2009","NO_QUERY",'
              f'"user{i}","@friend {text} http://t.co/x &amp; more"\n')
  os.replace(path + ".tmp", path)
  return path


def pinned_rates(csv_path, preprocessor_handle, seq_length, batch_size,
                 batches):
  """{cores: tweets/second}, each measured by a fresh process of this
  script pinned (`taskset`) to 1 core, then to 2."""
  rates = {}
  for cores in ("0", "0,1"):
    cmd = [
        "taskset", "-c", cores, sys.executable,
        os.path.abspath(__file__), f"--csv={csv_path}",
        f"--preprocessor_handle={preprocessor_handle}",
        f"--seq_length={seq_length}", f"--batch_size={batch_size}",
        f"--batches={batches}", f"--cores={cores}"
    ]
    out = subprocess.run(
        cmd,
        capture_output=True,
        text=True,
        check=True,
        env=dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2"))
    rates[len(cores.split(","))] = json.loads(
        out.stdout.strip().splitlines()[-1])["tweets_per_second"]
  return rates


def measure(csv_path, preprocessor_handle, seq_length, batch_size, batches):
  sys.path.insert(0, ROOT)
  # Imported here so the parent process (which only spawns) stays light.
  from trainer.foundation import tasks  # pylint: disable=g-import-not-at-top
  from trainer.encoders import demo  # pylint: disable=g-import-not-at-top
  from trainer.data import input_pipeline  # pylint: disable=g-import-not-at-top
  from trainer.encoders import handles  # pylint: disable=g-import-not-at-top
  from trainer.data import preprocessing  # pylint: disable=g-import-not-at-top
  from trainer.data import sources  # pylint: disable=g-import-not-at-top
  from trainer.data import splits  # pylint: disable=g-import-not-at-top
  if preprocessor_handle == "demo":
    preprocessor_handle = demo.ensure_assets()["preprocessor"]
  preprocessor = handles.load_handle(preprocessor_handle, "preprocessor_handle")
  packer = preprocessing.make_packer(preprocessor, seq_length)
  split = splits.Split(
      "train", sources.FileSource(csv_path, tasks.SENTIMENT140_LABEL_MAP))
  ds = input_pipeline.train_dataset(
      split,
      packer, (seq_length,),
      batch_size,
      steps_per_epoch=10**6,
      read_stripes=16,
      shuffle_buffer=10_000)
  it = iter(ds)
  for _ in range(5):  # warm-up: tracing, stripe scan, buffer fill
    next(it)
  start = time.perf_counter()
  for _ in range(batches):
    next(it)
  seconds = time.perf_counter() - start
  return batches * batch_size / seconds


def main():
  parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
  parser.add_argument("--csv", default="")
  parser.add_argument("--preprocessor_handle", default="demo")
  parser.add_argument("--seq_length", type=int, default=128)
  parser.add_argument("--batch_size", type=int, default=128)
  parser.add_argument("--batches", type=int, default=100)
  parser.add_argument("--cores", default="", help="internal: run pinned")
  parser.add_argument("--output", default="")
  args = parser.parse_args()
  csv_path = args.csv or (SHARED if os.path.exists(SHARED) else "")
  if not csv_path:
    csv_path = generated_csv(os.path.join(tempfile.mkdtemp(), "gen.csv"))
  if args.cores:
    rate = measure(csv_path, args.preprocessor_handle, args.seq_length,
                   args.batch_size, args.batches)
    print(json.dumps(dict(cores=args.cores, tweets_per_second=rate)))
    return
  rates = pinned_rates(csv_path, args.preprocessor_handle, args.seq_length,
                       args.batch_size, args.batches)
  print(f"data: {csv_path}; seq_length {args.seq_length}, batch "
        f"{args.batch_size}, preprocessor {args.preprocessor_handle}\n")
  print("| cores | tweets/second | vs 1 core |")
  print("| --- | --- | --- |")
  for n, rate in rates.items():
    print(f"| {n} | {rate:,.0f} | {rate / rates[1]:.2f}x |")
  if args.output:
    with open(args.output, "w") as f:
      json.dump(rates, f, indent=2)


if __name__ == "__main__":
  main()
