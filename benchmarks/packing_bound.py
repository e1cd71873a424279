r"""How close first-fit decreasing packs to the fewest rows possible.

    python -m trainer.main --flagfile=flags/sentiment140_minilm_cpu.flags \
        --model_dir=DIR --train_steps=1 ...   # writes DIR/length_stats.json
    python benchmarks/packing_bound.py --length_stats=DIR/length_stats.json \
        [--batch_size=32] [--batches=400]

Draws the batches `auto` simulates (`shared_rows.draw`: the training split's
length histogram, seeded) and packs each three ways into rows of
--seq_length tokens (the histogram's last length):
  token bound: ceil(the batch's tokens / seq_length), no packing does better;
  first-fit decreasing: what `--shared_rows` runs (`shared_rows.
    first_fit_decreasing`), before the ladder rounds it up;
  fewest rows: an exact search (`fewest_rows`), trying each row count from
    the token bound up to first-fit's; a batch whose search passes
    --node_limit keeps first-fit's count and is counted as unproven.
Prints the mean rows a batch of each and the batches by how many rows
first-fit uses beyond the fewest. A slot cap (`shared_rows.slots_per_row`)
never binds at these lengths (every example holds [CLS] and [SEP]), so the
search ignores it.
"""

import argparse
import collections
import json
import sys

import numpy as np

from trainer.foundation import shared_rows


class SearchLimit(Exception):
  """The search visited more than its node limit."""


def fits(lengths, rows, row_length, node_limit):
  """Whether `lengths` pack into `rows` rows of `row_length` tokens, each
  example whole in one row: a depth-first search placing the longest first,
  trying each distinct room once (rows with equal room are alike).

  Raises:
    SearchLimit: after `node_limit` placements tried.
  """
  items = sorted((int(n) for n in lengths if n > 0), reverse=True)
  rest = np.cumsum(items[::-1])[::-1].tolist() + [0]  # tokens from i on
  used = [0] * rows
  nodes = 0

  def place(i):
    nonlocal nodes
    nodes += 1
    if nodes > node_limit:
      raise SearchLimit()
    if i == len(items):
      return True
    if rows * row_length - sum(used) < rest[i]:
      return False
    tried = set()
    for r in range(rows):
      if used[r] + items[i] <= row_length and used[r] not in tried:
        tried.add(used[r])
        used[r] += items[i]
        if place(i + 1):
          return True
        used[r] -= items[i]
    return False

  return place(0)


def fewest_rows(lengths, row_length, upper, node_limit):
  """(the fewest rows `lengths` pack into, proven): tries each count from
  the token bound below `upper` (a count known to fit); (upper, False)
  when a search passed its limit first."""
  tokens = int(np.sum(lengths))
  for rows in range(max(1, -(-tokens // row_length)), upper):
    try:
      if fits(lengths, rows, row_length, node_limit):
        return rows, True
    except SearchLimit:
      return upper, False
  return upper, True


def measure(histogram, batch_size, batches, node_limit):
  """dict of the three packings' mean rows over `batches` drawn batches,
  the unproven count and {first-fit rows beyond the fewest: batches}."""
  row_length = len(histogram) - 1
  lengths = shared_rows.draw(histogram, batch_size, batches)
  ffd = shared_rows.rows_needed(lengths, row_length,
                                shared_rows.slots_per_row(row_length))
  bound = -(-lengths.sum(axis=1) // row_length)
  fewest, unproven = [], 0
  for batch, upper in zip(lengths, ffd):
    rows, proven = fewest_rows(batch, row_length, int(upper), node_limit)
    fewest.append(rows)
    unproven += not proven
  fewest = np.array(fewest)
  return dict(
      seq_length=row_length,
      batch_size=batch_size,
      batches=batches,
      token_bound=float(bound.mean()),
      first_fit=float(ffd.mean()),
      fewest=float(fewest.mean()),
      unproven=unproven,
      beyond=dict(
          sorted(collections.Counter(int(x) for x in ffd - fewest).items())))


def main(argv=None):
  parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
  parser.add_argument(
      "--length_stats",
      required=True,
      help="a run's length_stats.json (its training split's histogram)")
  parser.add_argument("--batch_size", type=int, default=32)
  parser.add_argument("--batches", type=int, default=400)
  parser.add_argument("--node_limit", type=int, default=200_000)
  args = parser.parse_args(argv)
  try:
    with open(args.length_stats) as f:
      histogram = json.load(f)["histogram"]
  except (OSError, ValueError, KeyError) as e:
    sys.exit(f"--length_stats={args.length_stats}: not a run's "
             f"length_stats.json ({e})")
  out = measure(histogram, args.batch_size, args.batches, args.node_limit)
  print(f"{out['batches']} batches of {out['batch_size']} at seq "
        f"{out['seq_length']} (unproven searches: {out['unproven']})\n")
  print("| packing | rows a batch (mean) |\n| --- | --- |")
  print(f"| token bound | {out['token_bound']:.2f} |")
  print(f"| first-fit decreasing | {out['first_fit']:.2f} |")
  print(f"| fewest rows | {out['fewest']:.2f} |\n")
  print("| first-fit rows beyond the fewest | batches |\n| --- | --- |")
  for extra, count in out["beyond"].items():
    print(f"| {extra} | {count} |")


if __name__ == "__main__":
  main()
