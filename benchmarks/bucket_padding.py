r"""Where the speed of length buckets comes from: the tokens each example
pays for under three ways of batching, from a run's measured lengths.

    python benchmarks/bucket_padding.py \
        --length_stats=<model_dir>/length_stats.json --batch_size=32

`length_stats.json` is written by every run with --seq_buckets other than
none (the training rows per packed length). For the buckets (`auto`'s
choice unless --buckets names them) it prints the tokens per example that a
step computes:
  fixed shapes: --seq_length for every example;
  one-length batches (what --seq_buckets does): each example at the
    smallest bucket that holds it;
  mixed batches cut to their longest: the batches of fixed shapes (a random
    draw of --batch_size rows), each run at the smallest bucket that holds
    its longest row. Its expectation is exact (rows drawn with replacement):
    P(longest <= b) = F(b) ** batch, F the share of rows of length <= b.
The last is the variant that keeps what each step sees exactly as under
fixed shapes (a text's outputs do not depend on its padding), so it costs
no accuracy; the ratio to fixed shapes says what speed it keeps. A step's
cost is nearly linear in its length at BERT's sizes (docs/buckets.md).
"""

import argparse
import json

import numpy as np

from trainer.foundation import buckets as buckets_lib


def tokens_per_example(histogram, buckets, batch_size):
  """{batching: mean tokens per example} for `histogram` (rows per packed
  length, index = length) in `buckets` (ascending, the last the longest
  length)."""
  histogram = np.asarray(histogram, np.float64)
  lengths = np.arange(len(histogram))
  edges = np.asarray(buckets)
  at = edges[np.searchsorted(edges, lengths)]
  share = histogram / histogram.sum()
  below = np.array([share[:b + 1].sum() for b in edges])
  p_longest = np.diff(np.concatenate([[0.0], below**batch_size]))
  return dict(
      fixed=float(edges[-1]),
      one_length=float((share * at).sum()),
      mixed=float((p_longest * edges).sum()),
      mixed_in_last=float(1.0 -
                          below[-2]**batch_size) if len(edges) > 1 else 1.0)


def main():
  parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
  parser.add_argument("--length_stats", required=True)
  parser.add_argument("--batch_size", type=int, default=32)
  parser.add_argument(
      "--buckets", default="", help="e.g. 16,32,48 (default: auto's choice)")
  args = parser.parse_args()
  with open(args.length_stats) as f:
    histogram = json.load(f)["histogram"]
  seq_length = len(histogram) - 1
  buckets = (
      buckets_lib.parse(args.buckets, seq_length)
      if args.buckets else buckets_lib.choose(histogram, args.batch_size))
  t = tokens_per_example(histogram, buckets, args.batch_size)
  print(f"{sum(histogram)} rows, --seq_length={seq_length}, buckets "
        f"{', '.join(map(str, buckets))}, batch {args.batch_size}\n")
  print("| batching | tokens per example | vs fixed shapes |")
  print("| --- | --- | --- |")
  for name, key in (("fixed shapes", "fixed"), ("one-length batches "
                                                "(--seq_buckets)",
                                                "one_length"),
                    ("mixed batches cut to their longest", "mixed")):
    print(f"| {name} | {t[key]:.1f} | {t['fixed'] / t[key]:.2f}x |")
  print(f"\nMixed batches that need the last bucket: "
        f"{t['mixed_in_last']:.1%}")


if __name__ == "__main__":
  main()
