r"""Step-time cost of example-keyed dropout masks against Philox masks.

    python benchmarks/dropout_cost.py [--encoder_dir=models/all-MiniLM-L6-v2]
        [--seq_length=128] [--rows=8] [--precision=bfloat16] [--repeats=3]

One batch of 32 real tweets (../shared/data/sentiment140_sample.csv), one
example a row and in `--rows` shared rows: the encoder's and the head's
forward and backward pass (`tf.function`, no XLA) with dropout 0.1, masks
drawn by Philox (one number per element) or keyed by example
(`trainer.encoders.dropout`: a hash of the step's seed and each element's
place one example a row, keys computed from the rows in shared rows).
In float32 the fixed layout also runs the loaded SavedModel graph
(Philox), which float32 runs trained before this project's encoders were
always rebuilt. Prints ms a step (the best of `--repeats` runs of 4 steps)
and the ratio to each layout's first way, in one run on one machine.
"""

import argparse
import csv
import os
import platform
import sys
import time

import tensorflow as tf
import tensorflow_hub as hub

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

from trainer.data import preprocessing  # noqa: E402
from trainer.data import row_layout  # noqa: E402
from trainer.encoders import native  # noqa: E402
from trainer.model import classifier  # noqa: E402
from trainer.foundation import features  # noqa: E402

TWEETS = os.path.join(ROOT, "..", "shared", "data", "sentiment140_sample.csv")


def _batches(preprocessor, seq_length, rows):
  """(32 tweets one a row, the same in `rows` shared rows)."""
  with open(TWEETS, encoding="latin-1") as f:
    texts = [r[-1] for r in list(csv.reader(f))[1:33]]
  batch = preprocessing.make_packer(preprocessor, seq_length)(
      tf.constant(texts))
  batch["label"] = tf.range(32) % 2
  block = {k: v[tf.newaxis] for k, v in batch.items()}
  block["length"] = row_layout.lengths_of(block)
  laid, sizes = row_layout.block_layout(block, (rows,), seq_length)
  if int(sizes[0]) != rows:
    raise SystemExit(f"--rows={rows} do not hold the batch ({int(sizes[0])})")
  return batch, {k: v[0] for k, v in laid.items()}


def _ms_per_step(loaded, precision, keyed, batch, repeats):
  """ms a step of the rebuilt encoder (Philox or keyed masks), or with
  `keyed` None of the loaded SavedModel graph (float32, Philox)."""
  encoder = loaded if keyed is None else native.NativeEncoder.load(
      loaded, precision, hashed_dropout=keyed)
  model = classifier.Classifier(encoder, 2)
  inputs = features.encoder_inputs(batch)

  @tf.function
  def step(x):
    with tf.GradientTape() as tape:
      loss = tf.reduce_sum(
          model(x, training=True, dropout_seed=tf.constant([1, 2])))
    grads = tape.gradient(loss, model.trainable_variables)
    return tf.add_n([tf.reduce_sum(tf.convert_to_tensor(g)) for g in grads])

  step(inputs)
  best = float("inf")
  for _ in range(repeats):
    start = time.perf_counter()
    for _ in range(4):
      step(inputs).numpy()
    best = min(best, (time.perf_counter() - start) / 4)
  return 1000 * best


def _cpu():
  try:
    with open("/proc/cpuinfo") as f:
      return next(
          line.split(":", 1)[1].strip()
          for line in f
          if line.startswith("model name"))
  except (OSError, StopIteration):
    return platform.processor() or platform.machine()


def main():
  parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
  parser.add_argument(
      "--encoder_dir", default=os.path.join(ROOT, "models", "all-MiniLM-L6-v2"))
  parser.add_argument("--seq_length", type=int, default=128)
  parser.add_argument("--rows", type=int, default=8)
  parser.add_argument(
      "--precision", default="bfloat16", choices=["float32", "bfloat16"])
  parser.add_argument("--repeats", type=int, default=3)
  args = parser.parse_args()
  if not os.path.exists(TWEETS):
    raise SystemExit(f"{TWEETS} is missing: the race needs the real tweets")
  loaded = hub.load(os.path.join(args.encoder_dir, "encoder"))
  preprocessor = hub.load(os.path.join(args.encoder_dir, "preprocessor"))
  fixed, rows = _batches(preprocessor, args.seq_length, args.rows)
  print(f"machine: {_cpu()}, {os.cpu_count()} CPUs, TF {tf.__version__}; "
        f"{args.precision}, seq {args.seq_length}")
  print("| layout | encoder, masks | ms/step | vs the first |")
  print("| --- | --- | --- | --- |")
  ways = [("rebuilt, Philox", False), ("rebuilt, keyed", True)]
  if args.precision == "float32":  # what float32 ran before: the graph
    ways.insert(0, ("loaded graph, Philox", None))
  for name, batch in (("fixed (32 rows)", fixed), (f"shared ({args.rows} rows)",
                                                   rows)):
    first = None
    for way, keyed in ways:
      if keyed is None and batch is rows:
        continue  # the saved graph takes one example a row
      ms = _ms_per_step(loaded, args.precision, keyed, batch, args.repeats)
      first = first or ms
      print(f"| {name} | {way} | {ms:.0f} | {ms / first:.2f}x |")


if __name__ == "__main__":
  main()
