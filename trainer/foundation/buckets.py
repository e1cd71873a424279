"""Length buckets: a few fixed sequence lengths, each example in the smallest
that holds it (--seq_buckets).

Every batch the replicas receive is still static-shaped, [batch, bucket]
int32: a TPU (or XLA) compiles one program per bucket and pays only for the
tokens a bucket holds, not for --seq_length on every example. --seq_length
stays the truncation length and the last bucket.

`parse` reads the flag; `choose` picks the buckets of `auto` from the
training data's measured lengths (`input_pipeline.length_histogram`), with
the padded tokens (the compute, nearly linear in the length at BERT's
sizes) as small as a few buckets allow; `describe` is the log line. How an
epoch counts its steps: each bucket's examples make floor(n_bucket / batch)
full batches (the remainder waits for the next epoch, as the remainder of an
unbucketed epoch does), so `steps_per_epoch` is their sum, known exactly
from the counts before training starts.
"""

import numpy as np

from trainer.foundation import errors
from trainer.foundation import ladders

AUTO, NONE = ladders.AUTO, ladders.NONE
MULTIPLE = 8  # bucket lengths of auto: multiples of 8 (TPU tiles, XLA pads)
MAX_AUTO_BUCKETS = 4
MAX_BUCKETS = 8  # a list's
# auto gives a bucket at least this many batches of examples: a bucket with
# fewer than one batch would never train its examples.
MIN_BATCHES = 4
# With several buckets a training group (the batches of one bucket that one
# train-loop call runs) holds --bucket_group_batches batches, this by
# default. A group fills when its bucket has seen that many batches of rows,
# so the group size fixes which batches an epoch makes and in which order: a
# run keeps it (recorded in config.json, `train_group_batches`), and it is
# not --steps_per_loop, which a resume may change (groups of
# --steps_per_loop made a resume with another value train some rows twice
# and others never). Small groups spread every bucket over the epoch;
# groups of 50 put a bucket with fewer rows than one group's only at the
# epoch's end, an epoch ordered by length that cost STS-B 2.2 points of
# correlation (BUILD_NOTES.md, "Length buckets"). 5 is the group the race
# measured the bucketed rates with; a loop crosses groups as it needs
# (`Trainer.train` dispatches a loop's calls before it reads any result
# back, so none waits for the device).
GROUP_BATCHES = 5


def parse(spec, seq_length):
  """--seq_buckets -> a tuple of lengths ending at `seq_length`, or AUTO.

  Raises:
    ConfigError: not `auto`, `none` or up to MAX_BUCKETS ascending lengths
      in [3, seq_length].
  """
  lengths = ladders.parse(
      "--seq_buckets", spec, MAX_BUCKETS,
      (3, "each at least 3 (room for [CLS], a token and [SEP])"),
      ("lengths", "16,32,64"))
  if lengths == AUTO:
    return AUTO
  if lengths == NONE:
    return (seq_length,)
  if lengths[-1] > seq_length:
    raise errors.ConfigError(
        f"--seq_buckets={spec.strip().lower()!r} is invalid: {lengths[-1]} "
        f"is over --seq_length={seq_length}, the truncation length and the "
        "last bucket; raise --seq_length or drop it")
  return lengths + (() if lengths[-1] == seq_length else (seq_length,))


def group_size(steps_per_loop, buckets, chosen=GROUP_BATCHES):
  """Batches per training group. One bucket: `steps_per_loop` (a loop is
  one call, and the batches' order does not depend on the group). Several:
  `chosen` (--bucket_group_batches; a resume keeps the run's, see
  `layout.recorded_config`)."""
  if len(buckets) == 1:
    return steps_per_loop
  return chosen


def padded_tokens(histogram, buckets):
  """Padded tokens of `histogram` (examples per packed length) in
  `buckets`."""
  total, low = 0, 0
  for b in buckets:
    total += int(histogram[low + 1:b + 1].sum()) * b
    low = b
  return total


def choose(histogram, batch_size, max_buckets=MAX_AUTO_BUCKETS):
  """The buckets of `auto`: up to `max_buckets` lengths, multiples of 8 but
  the last (`seq_length`, len(histogram) - 1), that make the padded tokens
  of the measured lengths fewest (`ladders.cheapest`), each bucket holding
  at least MIN_BATCHES batches of examples but the last, which may hold
  none (when every text is short, a small bucket takes them all).

  Args:
    histogram: int [seq_length + 1]: usable training examples per packed
      length (index = tokens including [CLS] and [SEP]).
    batch_size: the global batch size.
    max_buckets: at most this many buckets.
  """
  histogram = np.asarray(histogram, np.int64)
  seq_length = len(histogram) - 1
  edges = [b for b in range(MULTIPLE, seq_length, MULTIPLE)] + [seq_length]
  if len(edges) == 1:
    return (seq_length,)
  minimum = MIN_BATCHES * batch_size
  low = [0] + edges[:-1]
  counts = [int(histogram[a + 1:b + 1].sum()) for a, b in zip(low, edges)]
  found = ladders.cheapest(
      edges, counts, max_buckets, lambda n, first, last: n >= minimum or
      (last and not first and n == 0))
  return found[1] if found else (seq_length,)


def counts(histogram, buckets):
  """Examples per bucket of `histogram` (examples per packed length)."""
  histogram = np.asarray(histogram, np.int64)
  out, low = [], 0
  for b in buckets:
    out.append(int(histogram[low + 1:b + 1].sum()))
    low = b
  return out


def steps_per_epoch(bucket_counts, batch_size):
  """Full batches an epoch makes: floor(examples / batch) per bucket."""
  return sum(n // batch_size for n in bucket_counts)


def describe(histogram, buckets, batch_size):
  """The log line: each bucket's share of the examples and of its padding,
  and the padded tokens against one --seq_length for all."""
  histogram = np.asarray(histogram, np.int64)
  seq_length = len(histogram) - 1
  real = int((histogram * np.arange(len(histogram))).sum())
  rows = int(histogram.sum()) or 1
  parts, low = [], 0
  for b, n in zip(buckets, counts(histogram, buckets)):
    lengths = np.arange(low + 1, b + 1)
    tokens = int((histogram[low + 1:b + 1] * lengths).sum())
    padding = 1 - tokens / (n * b) if n else 0.0
    dropped = (" (empty)" if not n else
               " (fewer than a batch: never trained)" if n < batch_size else "")
    parts.append(f"{b}: {n / rows:.1%} of examples, {padding:.0%} padding"
                 f"{dropped}")
    low = b
  padded = padded_tokens(histogram, buckets)
  return (f"{'; '.join(parts)}; {padded / (rows * seq_length):.0%} of the "
          f"tokens of --seq_length={seq_length} for all, "
          f"{1 - real / max(padded, 1):.0%} padding")
