r"""Host input throughput: tweets/second through read, clean, tokenize, pack.

    python benchmarks/input_throughput.py [--csv=PATH] [--seq_length=128] \
        [--layouts=fixed,shared_rows]

Runs the trainer's own training input pipeline (`input_pipeline.
train_groups` over a `FileSource`, the demo preprocessor unless
--preprocessor_handle is given; groups of 8 batches, as the trainer takes
them) pinned to 1 and then 2 cores (`taskset`), for each layout: `fixed`
(one example a row) and `shared_rows` (several a row, in the row counts
`--shared_rows=auto` chooses from the file's measured lengths: the same
batches, laid out by first-fit decreasing on the host), and prints a
markdown table with each layout's rate against fixed shapes'. The data is
../shared/data/sentiment140_sample.csv when present, else a generated file
in the same layout.
"""

import argparse
import json
import os
import statistics
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


def pinned_rates(csv_path,
                 preprocessor_handle,
                 seq_length,
                 batch_size,
                 batches,
                 layout="fixed"):
  """{cores: tweets/second}, each measured by a fresh process of this
  script pinned (`taskset`) to 1 core, then to 2."""
  rates = {}
  for cores in ("0", "0,1"):
    cmd = [
        "taskset", "-c", cores, sys.executable,
        os.path.abspath(__file__), f"--csv={csv_path}",
        f"--preprocessor_handle={preprocessor_handle}",
        f"--seq_length={seq_length}", f"--batch_size={batch_size}",
        f"--batches={batches}", f"--cores={cores}", f"--layouts={layout}"
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


def measure(csv_path,
            preprocessor_handle,
            seq_length,
            batch_size,
            batches,
            layout="fixed"):
  """Tweets/second of the training stream's groups (`layout`: "fixed" or
  "shared_rows", the row counts auto chooses for the file), after a
  warm-up; `batches` batches timed."""
  sys.path.insert(0, ROOT)
  # Imported here so the parent process (which only spawns) stays light.
  from trainer.foundation import tasks  # pylint: disable=g-import-not-at-top
  from trainer.encoders import demo  # pylint: disable=g-import-not-at-top
  from trainer.data import input_pipeline  # pylint: disable=g-import-not-at-top
  from trainer.data import row_layout  # pylint: disable=g-import-not-at-top
  from trainer.encoders import handles  # pylint: disable=g-import-not-at-top
  from trainer.data import preprocessing  # pylint: disable=g-import-not-at-top
  from trainer.data import sources  # pylint: disable=g-import-not-at-top
  from trainer.data import splits  # pylint: disable=g-import-not-at-top
  from trainer.foundation import layout as layout_lib  # noqa: E501  pylint: disable=g-import-not-at-top
  from trainer.foundation import shared_rows  # noqa: E501  pylint: disable=g-import-not-at-top
  if preprocessor_handle == "demo":
    preprocessor_handle = demo.ensure_assets()["preprocessor"]
  preprocessor = handles.load_handle(preprocessor_handle, "preprocessor_handle")
  packer = input_pipeline.labelled(
      preprocessing.make_packer(preprocessor, seq_length))
  split = splits.Split(
      "train", sources.FileSource(csv_path, tasks.SENTIMENT140_LABEL_MAP))
  rows = None
  if layout == "shared_rows":
    histogram = input_pipeline.length_histogram(split, packer, seq_length)
    rows = shared_rows.choose(histogram, batch_size)
  shape = layout_lib.Layout(
      seq_length=seq_length,
      batch_size=batch_size,
      lengths=(seq_length,),
      ladder=rows,
      train_group=GROUP)
  ds = input_pipeline.train_groups(
      split, packer, shape, 10**6, read_stripes=16, shuffle_buffer=10_000)
  it = iter(ds)
  # Warm-up (tracing, the stripe scan, the first window, the first block of
  # shared rows): a block's worth of batches, as both layouts see it.
  warm = 0
  while warm < max(3 * GROUP, row_layout.ROW_BLOCK // batch_size):
    warm += int(next(it)["meta"][0, 1])
  done, start = 0, time.perf_counter()
  while done < batches:
    done += int(next(it)["meta"][0, 1])
  seconds = time.perf_counter() - start
  return done * batch_size / seconds


# Batches per group, as the trainer takes them (shared rows: at most 8).
GROUP = 8


def main():
  parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
  parser.add_argument("--csv", default="")
  parser.add_argument("--preprocessor_handle", default="demo")
  parser.add_argument("--seq_length", type=int, default=128)
  parser.add_argument("--batch_size", type=int, default=32)
  parser.add_argument(
      "--batches",
      type=int,
      default=1200,
      help="timed, after a warm-up of a layout block's rows "
      "(row_layout.ROW_BLOCK) or 3 groups, whichever is more (the default: "
      "two epochs of the 20,000 shared tweets, a few seconds a measurement)")
  parser.add_argument(
      "--repeats",
      type=int,
      default=3,
      help="measurements of each layout and core count, alternating "
      "layouts; the table shows their median")
  parser.add_argument("--cores", default="", help="internal: run pinned")
  parser.add_argument(
      "--layouts",
      default="fixed,shared_rows",
      help="comma list of fixed, shared_rows")
  parser.add_argument("--output", default="")
  args = parser.parse_args()
  csv_path = args.csv or (SHARED if os.path.exists(SHARED) else "")
  if not csv_path:
    csv_path = generated_csv(os.path.join(tempfile.mkdtemp(), "gen.csv"))
  if args.cores:
    rate = measure(csv_path, args.preprocessor_handle, args.seq_length,
                   args.batch_size, args.batches, args.layouts)
    print(json.dumps(dict(cores=args.cores, tweets_per_second=rate)))
    return
  layouts = args.layouts.split(",")
  runs = {layout: [] for layout in layouts}
  for _ in range(args.repeats):
    for layout in layouts:
      runs[layout].append(
          pinned_rates(csv_path, args.preprocessor_handle, args.seq_length,
                       args.batch_size, args.batches, layout))
  rates = {
      layout: {
          n: statistics.median(r[n] for r in measured) for n in measured[0]
      } for layout, measured in runs.items()
  }
  print(f"data: {csv_path}; seq_length {args.seq_length}, batch "
        f"{args.batch_size}, preprocessor {args.preprocessor_handle}; median "
        f"of {args.repeats} runs of {args.batches} batches\n")
  print("| layout | cores | tweets/second | vs 1 core | vs fixed |")
  print("| --- | --- | --- | --- | --- |")
  for layout, by_cores in rates.items():
    for n, rate in by_cores.items():
      fixed = rates.get("fixed", {}).get(n)
      vs = f"{rate / fixed:.2f}x" if fixed else "-"
      print(f"| {layout} | {n} | {rate:,.0f} | {rate / by_cores[1]:.2f}x | "
            f"{vs} |")
  if args.output:
    with open(args.output, "w") as f:
      json.dump(dict(median=rates, runs=runs), f, indent=2)


if __name__ == "__main__":
  main()
