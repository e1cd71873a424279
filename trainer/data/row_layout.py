"""Shared rows in the graph: a batch of examples laid out in rows of
--seq_length tokens, several examples a row (`trainer.foundation.
shared_rows` says why, and holds the NumPy reference of the bin packing).

Host side, in tf.data (training, eval) and in the export's `shared_rows`
signature: `first_fit_decreasing` places each example, `to_rows` scatters
the examples' features into the rows, `stream` turns a tf.data stream of
examples into groups of batches in rows. What a row holds is the contract
of `trainer.foundation.features`: the `ROW_INPUTS`, and every other feature
per token ([rows, seq_length]) or per slot ([rows, slots]: `label`, and
`weight`, 1 for an example and 0 for an empty slot, so a step's loss and
metrics sum over the real examples only). Every tensor has rows as its
first axis: a strategy splits them over replicas, each replica getting
whole rows, hence whole examples.
"""

import tensorflow as tf

from trainer.foundation import features as features_lib
from trainer.foundation import shared_rows


def first_fit_decreasing(lengths, row_length, slots):
  """`shared_rows.first_fit_decreasing` in the graph, for [batches, batch]
  int32 `lengths` at once (one loop over the batch's examples, each step
  vectorized over the batches): (row, slot, offset) int32 [batches, batch];
  -1, 0, 0 for an example of length 0."""
  lengths = tf.cast(lengths, tf.int32)
  size = tf.shape(lengths)[1]
  order = tf.argsort(-lengths, axis=1, stable=True)
  zeros = tf.zeros_like(lengths)

  def body(i, room, used, row, slot, offset):
    k = order[:, i]
    n = tf.gather(lengths, k[:, None], batch_dims=1)[:, 0]
    fits = tf.logical_and(room >= n[:, None], used < slots)
    j = tf.argmax(tf.cast(fits, tf.int32), axis=1, output_type=tf.int32)
    real = n > 0
    at_k = tf.cast(tf.one_hot(k, size), tf.bool)
    at_j = tf.one_hot(j, size, dtype=tf.int32)
    here = lambda t: tf.gather(t, j[:, None], batch_dims=1)[:, 0]
    put = lambda old, new: tf.where(at_k, new[:, None], old)
    row = put(row, tf.where(real, j, -1))
    slot = put(slot, tf.where(real, here(used), 0))
    offset = put(offset, tf.where(real, row_length - here(room), 0))
    room -= at_j * tf.where(real, n, 0)[:, None]
    used += at_j * tf.cast(real, tf.int32)[:, None]
    return i + 1, room, used, row, slot, offset

  _, _, _, row, slot, offset = tf.while_loop(
      lambda i, *_: i < size, body,
      (tf.constant(0), zeros + row_length, zeros, zeros - 1, zeros, zeros))
  return row, slot, offset


def rows_needed(row):
  """int32 [batches]: rows a placement (`first_fit_decreasing`'s `row`)
  fills."""
  return tf.reduce_max(row, axis=1) + 1


def shapes(needed, ladder, batch_size):
  """int32 [batches]: the row count each batch runs at
  (`shared_rows.shape_of`): the smallest of `ladder` holding it, else
  `batch_size`."""
  edges = tf.concat([
      tf.constant(ladder, tf.int32, [len(ladder)]),
      tf.reshape(tf.cast(batch_size, tf.int32), [1])
  ], 0)
  return tf.gather(edges, tf.searchsorted(edges, needed, side="left"))


def one_a_row(lengths):
  """The placement of one example a row (the fallback shape, and fixed
  shapes): example k in row k, slot 0, offset 0 (-1 when empty)."""
  k = tf.broadcast_to(tf.range(tf.shape(lengths)[1]), tf.shape(lengths))
  zeros = tf.zeros_like(k)
  return tf.where(lengths > 0, k, -1), zeros, zeros


def to_rows(batches, lengths, placement, num_rows, slots):
  """Examples -> rows.

  Args:
    batches: dict of per-token features [batches, batch, seq_length]
      (packed at --seq_length, [CLS] first: `input_word_ids`, ...) and
      per-example ones [batches, batch] (`label`; `weight`, else 1), told
      apart by their rank; `features.IMPLIED_IN_ROWS` and `length` are not
      carried.
    lengths: int32 [batches, batch]: tokens of each example.
    placement: (row, slot, offset) int32 [batches, batch]
      (`first_fit_decreasing` or `one_a_row`), every row below `num_rows`.
    num_rows: rows per batch (a scalar, the same for all the batches).
    slots: examples a row may hold.

  Returns:
    dict of the `features.ROW_INPUTS` and every carried feature: per token
    [batches, num_rows, seq_length] (0 where no example lies), per example
    [batches, num_rows, slots] (`weight` 0 for an empty slot).
  """
  row, slot, offset = placement
  ids = batches["input_word_ids"]
  count, size, seq_length = tf.unstack(tf.shape(ids))
  width = ids.shape[-1]
  real = row >= 0
  # An example's global row is its batch's first row plus its own.
  global_row = tf.range(count)[:, tf.newaxis] * num_rows + row
  scatter = _scatter(real, count, num_rows)

  def per_slot(values):
    laid = scatter(global_row * slots + slot, values, count * num_rows * slots)
    laid.set_shape([None, None, slots])
    return laid

  example = per_slot(tf.broadcast_to(tf.range(1, size + 1), tf.shape(row))) - 1
  starts = per_slot(tf.where(real, offset, 0))
  used = tf.reduce_max(per_slot(tf.where(real, offset + lengths, 0)), axis=2)
  marks = scatter(global_row * seq_length + offset, tf.ones_like(row),
                  count * num_rows * seq_length)
  on, slot_of, within, source = _token_map(marks, starts, example, used, size)

  tokens = _gather(on, source, width)
  out = dict(
      input_example_ids=tf.ensure_shape(
          tf.where(on, slot_of + 1, 0), [None, None, width]),
      input_position_ids=tf.ensure_shape(
          tf.where(on, within, 0), [None, None, width]),
      input_example_starts=starts,
      input_example_index=tf.maximum(example, 0))
  # An unplaced example, an empty slot and padding all read 0: weight 0.
  carried = {"weight": tf.ones(tf.shape(lengths), tf.float32), **batches}
  for key, value in carried.items():
    if key not in features_lib.IMPLIED_IN_ROWS + ("length",):
      out[key] = tokens(value) if value.shape.rank == 3 else per_slot(value)
  return out


def _scatter(real, count, num_rows):
  """scatter(index, values, cells) -> [count, num_rows, cells per row]:
  one value per example (few) into its cell, `index` [batches, batch];
  the unplaced (not `real`) go to a last cell, dropped."""

  def scatter(index, values, cells):
    flat = tf.scatter_nd(
        tf.where(real, index, cells)[:, :, tf.newaxis], values,
        tf.reshape(cells + 1, [1]))[:-1]
    return tf.reshape(flat, [count, num_rows, -1])

  return scatter


def _gather(on, source, width):
  """tokens(values [batches, batch, seq_length]) -> each row token's value
  (`_token_map`'s `on` and `source`), 0 where no example lies."""

  def tokens(values):
    # A zero after the values is what padding reads (an empty batch too).
    flat = tf.concat([tf.reshape(values, [-1]), tf.zeros([1], values.dtype)], 0)
    laid = tf.gather(flat, tf.where(on, source, tf.size(values)))
    laid.set_shape([None, None, width])
    return laid

  return tokens


def _token_map(marks, starts, example, used, size):
  """Per token of the rows ([batches, rows, seq_length], by gathers):
  whether an example holds it, its slot, its position within its example,
  and where it comes from in the flat [batches, `size`, seq_length]
  examples. A row's examples lie end to end from position 0 in slot order
  (first-fit puts each at its row's end), so the slot of position p is the
  count of examples starting at or before it (`marks`), minus 1."""
  count, seq_length = tf.shape(marks)[0], tf.shape(marks)[2]
  slot_of = tf.maximum(tf.cumsum(marks, axis=2) - 1, 0)
  position = tf.range(seq_length)[tf.newaxis, tf.newaxis, :]
  on = position < used[:, :, tf.newaxis]
  within = position - tf.gather(starts, slot_of, batch_dims=2)
  from_example = tf.gather(example, slot_of, batch_dims=2)
  source = (tf.range(count)[:, tf.newaxis, tf.newaxis] * size +
            tf.maximum(from_example, 0)) * seq_length + within
  return on, slot_of, within, source


def block_layout(batches, ladder, seq_length):
  """A block of batches laid out in rows, each at its own row count.

  Args:
    batches: as `to_rows` takes them, [batches, batch, ...], with `length`
      [batches, batch].
    ladder: the run's row counts (ascending, below the batch size).
    seq_length: tokens per row.

  Returns:
    (`to_rows`' features [batches, the block's most rows, ...], of which
    batch i uses its first `sizes[i]` rows; `sizes` int32 [batches], each
    batch's row count, `shapes`': the smallest of `ladder` that holds its
    first-fit decreasing placement, else the batch size, one example a
    row).
  """
  lengths = batches["length"]
  slots = shared_rows.slots_per_row(seq_length)
  placement = first_fit_decreasing(lengths, seq_length, slots)
  size = tf.shape(lengths)[1]
  sizes = shapes(rows_needed(placement[0]), ladder, size)
  fallback = (sizes >= size)[:, tf.newaxis]
  placement = tuple(
      tf.where(fallback, one, packed)
      for one, packed in zip(one_a_row(lengths), placement))
  most = tf.reduce_max(tf.concat([sizes, [1]], 0))
  return to_rows(batches, lengths, placement, most, slots), sizes


def lengths_of(features):
  """int32 [..., batch]: tokens of each packed example (its input_mask)."""
  return tf.reduce_sum(features["input_mask"], axis=-1)


def serving_rows(inputs, seq_length, carry=()):
  """Serving: examples packed one a row -> (their shared rows, the
  `ROW_INPUTS` and each feature named in `carry` of as many rows as
  first-fit decreasing fills: a dynamic shape, serving compiles nothing;
  int32 [n]: where each example's slot is among the rows' slots,
  row-major, to read its output back in input order).

  Args:
    inputs: dict of int32 [n, seq_length] `input_word_ids`, `input_mask`,
      `input_type_ids` (a packer's, [CLS] first), and the per-token
      features named in `carry` (laid beside their tokens, 0 where no
      token lies).
    seq_length: tokens per row.
    carry: names of per-token features of `inputs` to lay out too.
  """
  lengths = lengths_of(inputs)[tf.newaxis]
  slots = shared_rows.slots_per_row(seq_length)
  placement = first_fit_decreasing(lengths, seq_length, slots)
  num_rows = tf.maximum(rows_needed(placement[0])[0], 1)
  keys = ("input_word_ids", "input_type_ids") + tuple(carry)
  rows = to_rows({k: inputs[k][tf.newaxis] for k in keys}, lengths, placement,
                 num_rows, slots)
  row, slot, _ = placement
  keys = features_lib.ROW_INPUTS + tuple(carry)
  return {k: rows[k][0] for k in keys}, row[0] * slots + slot[0]


# Shared rows: rows tokenized and laid out per map call, about (whole
# groups): first-fit decreasing is one loop over a batch's examples for
# all the call's batches at once, so its cost is per call. 1,024 rather
# than 2,048: more calls for tf.data's parallel map to spread over the
# cores (BUILD_NOTES.md, "On the host").
ROW_BLOCK = 1024


def _block(encode, batch, pad_rows, ladder, seq_length):
  """(texts, labels) of up to ROW_BLOCK consecutive rows -> their whole
  batches in rows (`block_layout`), rows first (a strategy
  splits them), batches second: features [batch (the most rows a batch can
  need), count, width], of which batch i uses the first `sizes[i]` rows.
  With `pad_rows` (eval) the last batch is filled with empty examples
  (length and weight 0); else the rows past the last whole batch are
  dropped, as fixed shapes drop them. Runs in tf.data's parallel map, so
  the placement and the layout add no sequential stage."""

  @tf.autograph.experimental.do_not_convert  # no Python control flow on
  def fn(texts, labels):  # tensors here: AutoGraph would only cost time
    features = encode(texts, labels)
    features["length"] = lengths_of(features)
    for key in features_lib.IMPLIED_IN_ROWS:
      del features[key]
    # The encoded rows: more than the texts where eval cuts long tagged
    # sentences into windows.
    n = tf.shape(features["input_word_ids"])[0]
    count = (n + batch - 1) // batch if pad_rows else n // batch
    used = count * batch
    if pad_rows and "weight" not in features:  # tagging's is per token
      features["weight"] = tf.ones([n], tf.float32)
    out = {}
    for key, value in features.items():
      value = tf.pad(value, [[0, used - n]] + [[0, 0]] *
                     (len(value.shape) - 1)) if pad_rows else value[:used]
      out[key] = tf.reshape(
          value, tf.concat([[count, batch], tf.shape(value)[1:]], 0))
    laid, sizes = block_layout(out, ladder, seq_length)
    laid = {k: tf.transpose(v, [1, 0, 2]) for k, v in laid.items()}
    laid["sizes"] = sizes
    return laid

  return fn


def _groups(blocks, group_size, first):
  """Blocks (`_block`) -> groups: each run of consecutive batches at
  one row count, cut every `group_size` batches from the block's start, is
  one group, in order, its features [rows, group_size, width] (rows first:
  a strategy splits them), batch g of the group at [:, g], the group axis
  filled with zeros past its `count`; `meta` [rows, 2] = (its first
  batch's stream position, its count). `first(i)` is the stream position
  of block i's first batch."""

  @tf.autograph.experimental.do_not_convert  # as `_block`'s
  def runs(index, block):
    sizes = block["sizes"]
    count = tf.shape(sizes)[0]
    change = tf.logical_or(
        tf.concat([[True], sizes[1:] != sizes[:-1]], 0),
        tf.range(count) % group_size == 0)
    starts = tf.cast(tf.where(change)[:, 0], tf.int32)
    ends = tf.concat([starts[1:], [count]], 0)
    start_position = tf.cast(first(index), tf.int32)

    def one(start, end):
      rows, group = sizes[start], {}
      for key, laid in block.items():
        if key == "sizes":
          continue
        value = tf.pad(laid[:rows, start:end],
                       [[0, 0], [0, group_size - (end - start)], [0, 0]])
        group[key] = tf.ensure_shape(value, [None, group_size, laid.shape[-1]])
      group["meta"] = tf.tile(
          tf.stack([start_position + start, end - start])[tf.newaxis],
          [rows, 1])
      return group

    return tf.data.Dataset.from_tensor_slices((starts, ends)).map(one)

  return blocks.enumerate().flat_map(runs)


def block_batches(batch, group_size):
  """Batches laid out per map call (`_block`): whole groups, about
  ROW_BLOCK rows."""
  return group_size * max(1, ROW_BLOCK // (batch * group_size))


def stream(examples,
           encode,
           ladder,
           seq_length,
           batch,
           group_size,
           pad_rows,
           first=0):
  """(text, label) elements in their order -> groups in shared rows:
  `block_batches` batches laid out per parallel map call (`_block`; with
  `pad_rows` the last batch filled, else the rows past the last whole batch
  dropped), then each run of up to `group_size` batches at one row count
  one group (`_groups`), the stream position of the first batch `first`."""
  block = block_batches(batch, group_size)
  blocks = examples.batch(batch * block).map(
      _block(encode, batch, pad_rows, ladder, seq_length),
      num_parallel_calls=tf.data.AUTOTUNE,
      deterministic=True).filter(lambda b: tf.size(b["sizes"]) > 0)
  return _groups(blocks, group_size,
                 lambda i: first + tf.cast(i, tf.int64) * block)
