r"""Host input throughput: examples/second through read, clean, tokenize, pack.

    python benchmarks/input_throughput.py [--csv=PATH] [--seq_length=128] \
        [--layouts=fixed,shared_rows] [--tasks=classification,tagging] \
        [--preprocessor_handle=PATH]

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

`--tasks` names the streams measured: `classification` (tweets, above)
and `tagging` (the sentences of --conll, ../shared/data/conll2003/train.txt
by default, through the tagging stream as a tagging run builds it: words
to pieces, each word's tag on its first piece, `word_pieces.tagged`, then
the same rows). Both in one run alternate, and the table gives each
tagging rate against the classification stream's of the same layout and
cores (`vs classification`): sentences/s over tweets/s, with one
preprocessor for both (give the MiniLM's to compare what a MiniLM run
reads).
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
CONLL = os.path.join(
    os.path.dirname(ROOT), "shared", "data", "conll2003", "train.txt")
TASKS = ("classification", "tagging")


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


def pinned_rates(data_path,
                 preprocessor_handle,
                 seq_length,
                 batch_size,
                 batches,
                 layout="fixed",
                 task="classification"):
  """{cores: examples/second}, each measured by a fresh process of this
  script pinned (`taskset`) to 1 core, then to 2. `data_path`: the tweets
  CSV (classification) or the CoNLL file (tagging)."""
  data = f"--conll={data_path}" if task == "tagging" else f"--csv={data_path}"
  rates = {}
  for cores in ("0", "0,1"):
    cmd = [
        "taskset", "-c", cores, sys.executable,
        os.path.abspath(__file__), data,
        f"--preprocessor_handle={preprocessor_handle}",
        f"--seq_length={seq_length}", f"--batch_size={batch_size}",
        f"--batches={batches}", f"--cores={cores}", f"--layouts={layout}",
        f"--tasks={task}"
    ]
    out = subprocess.run(
        cmd,
        capture_output=True,
        text=True,
        check=True,
        env=dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2"))
    rates[len(cores.split(","))] = json.loads(
        out.stdout.strip().splitlines()[-1])["examples_per_second"]
  return rates


def _stream(task, data_path, preprocessor, seq_length):
  """(the training split, its examples' encoding) of `task`: the tweets of
  a CSV, packed as classification packs them, or the tagged sentences of a
  CoNLL file (its tag set read from it, as a tagging run reads it), each
  word's pieces and tags as tagging packs them."""
  # pylint: disable=g-import-not-at-top
  from trainer.data import input_pipeline
  from trainer.data import preprocessing
  from trainer.data import sources
  from trainer.data import splits
  from trainer.data import tagged_sources
  from trainer.data import word_pieces
  from trainer.foundation import tasks
  # pylint: enable=g-import-not-at-top
  if task == "tagging":
    tag_set = tagged_sources.read_tag_set(tagged_sources.FileSource(data_path))
    split = splits.Split("train", tagged_sources.FileSource(data_path, tag_set))
    return split, word_pieces.tagged(preprocessor, seq_length)
  split = splits.Split(
      "train", sources.FileSource(data_path, tasks.SENTIMENT140_LABEL_MAP))
  return split, input_pipeline.labelled(
      preprocessing.make_packer(preprocessor, seq_length))


def measure(data_path,
            preprocessor_handle,
            seq_length,
            batch_size,
            batches,
            layout="fixed",
            task="classification"):
  """Examples/second of the training stream's groups (`layout`: "fixed"
  or "shared_rows", the row counts auto chooses for the file; `task`:
  "classification" over the tweets CSV `data_path`, or "tagging" over the
  CoNLL file `data_path`), after a warm-up; `batches` batches timed."""
  sys.path.insert(0, ROOT)
  # Imported here so the parent process (which only spawns) stays light.
  from trainer.encoders import demo  # pylint: disable=g-import-not-at-top
  from trainer.data import input_pipeline  # pylint: disable=g-import-not-at-top
  from trainer.data import row_layout  # pylint: disable=g-import-not-at-top
  from trainer.encoders import handles  # pylint: disable=g-import-not-at-top
  from trainer.foundation import layout as layout_lib  # noqa: E501  pylint: disable=g-import-not-at-top
  from trainer.foundation import shared_rows  # noqa: E501  pylint: disable=g-import-not-at-top
  if preprocessor_handle == "demo":
    preprocessor_handle = demo.ensure_assets()["preprocessor"]
  preprocessor = handles.load_handle(preprocessor_handle, "preprocessor_handle")
  split, encode = _stream(task, data_path, preprocessor, seq_length)
  rows = None
  if layout == "shared_rows":
    histogram = input_pipeline.length_histogram(split, encode, seq_length)
    rows = shared_rows.choose(histogram, batch_size)
  shape = layout_lib.Layout(
      seq_length=seq_length,
      batch_size=batch_size,
      lengths=(seq_length,),
      ladder=rows,
      train_group=GROUP)
  ds = input_pipeline.train_groups(
      split, encode, shape, 10**6, read_stripes=16, shuffle_buffer=10_000)
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
  parser.add_argument(
      "--conll", default=CONLL, help="the tagging stream's CoNLL file")
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
      help="measurements of each stream, layout and core count, "
      "alternating; the table shows their median")
  parser.add_argument("--cores", default="", help="internal: run pinned")
  parser.add_argument(
      "--layouts",
      default="fixed,shared_rows",
      help="comma list of fixed, shared_rows")
  parser.add_argument(
      "--tasks",
      default="classification",
      help="comma list of the streams measured: classification (tweets), "
      "tagging (CoNLL sentences)")
  parser.add_argument("--output", default="")
  args = parser.parse_args()
  names = args.tasks.split(",")
  unknown = [name for name in names if name not in TASKS]
  if unknown:
    parser.error(f"--tasks={args.tasks}: {', '.join(unknown)} is not one of "
                 f"{', '.join(TASKS)}")
  csv_path = args.csv or (SHARED if os.path.exists(SHARED) else "")
  if not csv_path and "classification" in names:
    csv_path = generated_csv(os.path.join(tempfile.mkdtemp(), "gen.csv"))
  data = dict(classification=csv_path, tagging=args.conll)
  if args.cores:
    rate = measure(data[names[0]], args.preprocessor_handle, args.seq_length,
                   args.batch_size, args.batches, args.layouts, names[0])
    print(json.dumps(dict(cores=args.cores, examples_per_second=rate)))
    return
  layouts = args.layouts.split(",")
  runs = {task: {layout: [] for layout in layouts} for task in names}
  for _ in range(args.repeats):
    for task in names:
      for layout in layouts:
        runs[task][layout].append(
            pinned_rates(data[task], args.preprocessor_handle, args.seq_length,
                         args.batch_size, args.batches, layout, task))
  rates = {
      task: {
          layout: {
              n: statistics.median(r[n] for r in measured) for n in measured[0]
          } for layout, measured in by_layout.items()
      } for task, by_layout in runs.items()
  }
  print(f"data: {', '.join(f'{task} {data[task]}' for task in names)}; "
        f"seq_length {args.seq_length}, batch {args.batch_size}, "
        f"preprocessor {args.preprocessor_handle}; median of {args.repeats} "
        f"runs of {args.batches} batches\n")
  print(table(rates))
  if args.output:
    with open(args.output, "w") as f:
      json.dump(dict(median=rates, runs=runs), f, indent=2)


def table(rates):
  """The markdown table of `rates` ({task: {layout: {cores: examples/s}}}):
  each rate against 1 core, fixed shapes, and the classification stream
  of the same layout and cores (a tagging row, when both ran)."""
  lines = [
      "| stream | layout | cores | examples/second | vs 1 core | vs fixed | "
      "vs classification |", "| --- | --- | --- | --- | --- | --- | --- |"
  ]
  unit = dict(classification="tweets", tagging="sentences")
  for task, by_layout in rates.items():
    for layout, by_cores in by_layout.items():
      for n, rate in by_cores.items():
        fixed = by_layout.get("fixed", {}).get(n)
        plain = rates.get("classification", {}).get(layout, {}).get(n)
        vs_fixed = f"{rate / fixed:.2f}x" if fixed else "-"
        vs_plain = f"{rate / plain:.2f}x" if plain and task != (
            "classification") else "-"
        lines.append(f"| {task} ({unit[task]}) | {layout} | {n} | "
                     f"{rate:,.0f} | {rate / by_cores[1]:.2f}x | {vs_fixed} | "
                     f"{vs_plain} |")
  return "\n".join(lines)


if __name__ == "__main__":
  main()
