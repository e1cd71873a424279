"""Shared rows (--shared_rows): several examples in one row of --seq_length
tokens.

Fixed shapes give every example a row of --seq_length tokens, mostly
padding for short texts. Shared rows lay the same batch out densely: the
batch's examples go into R rows of --seq_length tokens by first-fit
decreasing (`first_fit_decreasing`), each example whole in one row, with
position ids restarting at 0, type ids of its own and attention only
within itself (the encoder's `input_example_ids`), so every example gets
the outputs it gets in a row of its own. A step still trains exactly the
--batch_size examples of fixed shapes, in the same order; only their
layout changes. (Not the preprocessor's packing of one text into
[CLS] ... [SEP]: that happens first, and each example stays one such
sequence.)

Every batch runs at a static shape: R is one of a few row counts, the
`ladder` (`auto`: chosen by `choose` from the training data's measured
lengths), the smallest that holds the batch; a batch that fits none runs
with one example a row (R = batch), which always fits. Each shape is traced
and compiled once. Row counts are multiples of the replica count times
--grad_accumulation_steps, so each replica (and micro-batch) gets whole
rows, hence whole examples.

No TensorFlow here: the layout in the graph is `trainer.data.row_layout`,
which follows `first_fit_decreasing` exactly (a test holds them together).
"""

import numpy as np

from trainer.foundation import errors
from trainer.foundation import ladders

AUTO, NONE = ladders.AUTO, ladders.NONE
# auto chooses at most this many row counts (each one compiled program; the
# batch-of-rows fallback is one more, compiled only if a batch needs it).
MAX_AUTO_SHAPES = 4
MAX_SHAPES = 7  # a list's: with the fallback, within the 8 counted shapes
# auto measures its choice on this many batches drawn from the length
# histogram, with this seed (the choice is a pure function of the data).
SIMULATED_BATCHES = 2000
SIMULATION_SEED = 0
# auto keeps one example a row when rows would save less than this share
# of the tokens: the fallback layout is fixed shapes with more bookkeeping.
MIN_SAVING = 0.05


def slots_per_row(seq_length):
  """The most examples a row can hold: each has at least [CLS] and [SEP].
  The per-example tensors of a step are [rows, slots]; at this size the
  cap never decides where an example goes."""
  return max(1, seq_length // 2)


def parse(spec):
  """--shared_rows -> AUTO, NONE, or a tuple of ascending row counts.

  Raises:
    ConfigError: not `auto`, `none` or up to MAX_SHAPES ascending positive
      counts.
  """
  return ladders.parse("--shared_rows", spec, MAX_SHAPES,
                       (1, "each at least 1"), ("row counts", "14,16"))


def split_over(multiple, accumulation=1):
  """What a batch is split over, `multiple` parts in all: "R replica(s) x
  K accumulation step(s)"."""
  replicas = multiple // accumulation
  return (f"{replicas} replica{'s' if replicas != 1 else ''} x "
          f"{accumulation} accumulation step{'s' if accumulation != 1 else ''}")


def nothing_to_share(batch_size, multiple, accumulation=1):
  """Why no row count fits a batch of `batch_size` split over `multiple`
  parts (replicas x `accumulation` steps), or '' when one does (a multiple
  of `multiple` below `batch_size`): each part then holds one example,
  and one example fills its row alone."""
  if batch_size > multiple:
    return ""
  if batch_size == 1:
    return ("a batch of one example (--batch_size=1) has no other to share "
            "a row with")
  return (f"--batch_size={batch_size} over {split_over(multiple, accumulation)}"
          " is one example each, with no other to share a row with")


def check_ladder(ladder,
                 batch_size,
                 multiple,
                 flag="--shared_rows",
                 accumulation=1):
  """ConfigError unless every row count is below `batch_size` (a batch of
  rows is the fallback already) and a multiple of `multiple` (replicas x
  `accumulation`, --grad_accumulation_steps: each replica and micro-batch
  gets whole rows). Where no count can be both, the message says so
  instead of a fix that does not exist."""
  given = f"{flag}={','.join(map(str, ladder))} is invalid"
  why = nothing_to_share(batch_size, multiple, accumulation)
  if why:
    raise errors.ConfigError(f"{given}: {why}; use {flag}=none (auto turns "
                             "rows off by itself)")
  for rows in ladder:
    if rows >= batch_size:
      raise errors.ConfigError(
          f"{given}: {rows} rows is not fewer than --batch_size={batch_size} "
          "(a batch that needs that many runs one example a row anyway); "
          f"give counts below {batch_size}")
    if rows % multiple:
      raise errors.ConfigError(
          f"{given}: {rows} rows do not split over "
          f"{split_over(multiple, accumulation)}; use multiples of {multiple}")


def first_fit_decreasing(lengths, row_length, slots):
  """Where first-fit decreasing puts each example, for many batches at once.

  Examples are taken longest first (ties: the earlier first); each goes to
  the first row with room for its tokens and a free slot, a new row when
  none has. An example of length 0 (a padding row of an eval batch) goes
  nowhere.

  Args:
    lengths: int [batches, batch]: tokens of each example, at most
      `row_length`.
    row_length: tokens per row (--seq_length).
    slots: examples a row may hold (`slots_per_row`).

  Returns:
    (row, slot, offset), int64 [batches, batch] each: the example's row,
    its place among the row's examples, its first token's position in the
    row; -1, 0, 0 for an example of length 0.
  """
  lengths = np.asarray(lengths, np.int64)
  batches, size = lengths.shape
  order = np.argsort(-lengths, axis=1, kind="stable")
  room = np.full((batches, size), row_length, np.int64)
  used = np.zeros((batches, size), np.int64)
  row = np.full((batches, size), -1, np.int64)
  slot = np.zeros((batches, size), np.int64)
  offset = np.zeros((batches, size), np.int64)
  every = np.arange(batches)
  for i in range(size):
    k = order[:, i]
    n = lengths[every, k]
    fits = (room >= n[:, None]) & (used < slots)
    j = np.argmax(fits, axis=1)
    real = n > 0
    row[every, k] = np.where(real, j, -1)
    slot[every, k] = np.where(real, used[every, j], 0)
    offset[every, k] = np.where(real, row_length - room[every, j], 0)
    room[every, j] -= np.where(real, n, 0)
    used[every, j] += real
  return row, slot, offset


def rows_needed(lengths, row_length, slots):
  """int [batches]: the rows first-fit decreasing fills for each batch of
  `lengths` [batches, batch]."""
  row, _, _ = first_fit_decreasing(lengths, row_length, slots)
  return row.max(axis=1) + 1


def shape_of(needed, ladder, batch_size):
  """The row count a batch needing `needed` rows runs at: the smallest of
  `ladder` that holds it, else `batch_size` (one example a row)."""
  for rows in ladder:
    if needed <= rows:
      return rows
  return batch_size


def draw(histogram, batch_size, batches=SIMULATED_BATCHES):
  """int [batches, batch_size]: example lengths drawn from `histogram`
  (examples per packed length), seeded: the batches `simulate` packs."""
  histogram = np.asarray(histogram, np.float64)
  rng = np.random.default_rng(SIMULATION_SEED)
  return rng.choice(
      len(histogram), size=(batches, batch_size), p=histogram / histogram.sum())


def simulate(histogram, batch_size, seq_length):
  """int [SIMULATED_BATCHES]: rows needed by batches of `batch_size`
  lengths drawn from `histogram` (examples per packed length), seeded."""
  return rows_needed(
      draw(histogram, batch_size), seq_length, slots_per_row(seq_length))


def expected_rows(needed, ladder, batch_size):
  """Mean rows a batch runs at over the simulated `needed`."""
  return float(np.mean([shape_of(n, ladder, batch_size) for n in needed]))


def choose(histogram, batch_size, multiple=1, max_shapes=MAX_AUTO_SHAPES):
  """The row counts of `auto`, or () when rows would save little.

  Up to `max_shapes` multiples of `multiple` below `batch_size` that make
  the expected rows of a batch fewest (a batch runs at the smallest count
  that holds it, one example a row when none does), measured on batches
  drawn from `histogram` (`simulate`). A step's cost is nearly linear in
  its rows at these lengths, so fewer rows is less compute: the ladder of
  `ladders.cheapest` whose last rung is the batch size.

  Args:
    histogram: int [seq_length + 1]: usable training examples per packed
      length (index = tokens including [CLS] and [SEP]).
    batch_size: examples per step (the global batch).
    multiple: replicas x --grad_accumulation_steps.
    max_shapes: at most this many row counts.
  """
  seq_length = len(histogram) - 1
  needed = simulate(histogram, batch_size, seq_length)
  needed = -(-needed // multiple) * multiple  # up to whole rows per replica
  values, counts = np.unique(needed[needed < batch_size], return_counts=True)
  if not len(values):
    return ()
  above = len(needed) - counts.sum()
  cost, ladder = ladders.cheapest([int(v) for v in values] + [batch_size],
                                  [int(n) for n in counts] + [int(above)],
                                  max_shapes + 1)
  if cost / len(needed) > (1 - MIN_SAVING) * batch_size:
    return ()
  return ladder[:-1]


def used_share(histogram, ladder, batch_size):
  """The share of batches drawn from `histogram` (`simulate`) that run at
  a row count of `ladder`; the others run one example a row."""
  needed = simulate(histogram, batch_size, len(histogram) - 1)
  return float(np.mean(needed <= max(ladder)))


def describe(histogram, ladder, batch_size):
  """The log line of a choice: the row counts, how often a batch needs the
  fallback, and the expected rows, examples a row and padding against one
  example a row (on batches drawn from `histogram`)."""
  histogram = np.asarray(histogram, np.int64)
  seq_length = len(histogram) - 1
  needed = simulate(histogram, batch_size, seq_length)
  rows = expected_rows(needed, ladder, batch_size)
  over = float(np.mean(needed > max(ladder)))
  mean = float(
      (histogram * np.arange(len(histogram))).sum() / max(histogram.sum(), 1))
  real = mean * batch_size
  counts = ", ".join(map(str, ladder[:-1])) + (
      f" or {ladder[-1]}" if len(ladder) > 1 else str(ladder[-1]))
  return (f"a batch of {batch_size} in {counts} rows of {seq_length} tokens "
          f"(else {batch_size} rows, one example each: {over:.1%} of "
          f"batches); expected {rows:.1f} rows a batch, "
          f"{batch_size / rows:.1f} examples a row, "
          f"{1 - real / (rows * seq_length):.0%} padding (one example a "
          f"row: {1 - mean / seq_length:.0%})")


def fit_to(ladder, multiple, batch_size):
  """A recorded ladder for a resume on another replica count: each count
  rounded up to a multiple of `multiple` (the layout only: the batches and
  their math do not change), those not below `batch_size` dropped."""
  fitted = sorted({-(-r // multiple) * multiple for r in ladder})
  return tuple(r for r in fitted if r < batch_size)


# A training group (what one train-loop call runs) holds at most this many
# batches with shared rows: a group is a run of consecutive batches at one
# row count, rarely longer with several counts, and its group axis is
# filled to this size. The order of the batches does not depend on it.
GROUP_BATCHES = 8


def group_size(steps_per_loop):
  """Batches per training group with shared rows."""
  return min(steps_per_loop, GROUP_BATCHES)


def for_batch(ladder, batch_size, other_batch, multiple):
  """The row counts for batches of `other_batch` examples (eval's) from a
  run's `ladder` for `batch_size`: scaled, up to multiples of `multiple`
  (the replicas), below `other_batch`. The layout only: the metrics are
  the same in any."""
  scaled = {-(-r * other_batch // batch_size) for r in ladder}
  return fit_to(scaled, multiple, other_batch)
