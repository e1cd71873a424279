"""Where a batch's examples lie in its rows, read once from its inputs.

One example a row (fixed shapes, length buckets: `input_mask`) or several
(shared rows: `input_example_ids`, the `features` contract). The fixed
shapes' mask is the one-example case of example ids (1 for an example's
token, 0 for padding), as Graphcore's packed BERT treats it: each question
the encoder, the head and dropout ask of a layout (position embeddings,
the attention bias, each example's first token, a mean over its tokens,
its dropout keys) has one answer per layout here, chosen once by `of`. One
example a row keeps its own ops (a broadcast mask, sliced positions, a
per-row mean), so fixed shapes compute exactly what they always have.
"""

import tensorflow as tf

from trainer.encoders import dropout as dropout_lib
from trainer.foundation import features

# Added to an attention score where the key is padding or another
# example's: exp of it underflows to 0 in float32.
MASKED = -10000.0


class OneARow:
  """Each row one example: `input_mask` [batch, seq_length]."""

  def __init__(self, inputs):
    self.mask = inputs["input_mask"]

  def positions(self, table):
    """Position embeddings [1, seq_length, hidden]: 0, 1, ... along each
    row."""
    return table[tf.newaxis, :tf.shape(self.mask)[1], :]

  def attention_bias(self):
    """[batch, 1, 1, seq_length]: MASKED where a key is padding."""
    mask = tf.cast(self.mask, tf.float32)
    return (1.0 - mask[:, tf.newaxis, tf.newaxis, :]) * MASKED

  def first_tokens(self, x):
    """[batch, hidden]: each row's first token ([CLS])."""
    return x[:, 0, :]

  def mean(self, sequence):
    """float32 [batch, hidden]: each example's mean over its tokens."""
    weights = tf.cast(self.mask, tf.float32)[:, :, tf.newaxis]
    total = tf.reduce_sum(tf.cast(sequence, tf.float32) * weights, axis=1)
    return total / tf.maximum(tf.reduce_sum(weights, axis=1), 1.0)

  def example_index(self, n):
    """int32 [n]: each output's example's place in the batch."""
    return tf.range(n)

  def dropout_keys(self):
    """None: an element's dropout key is its index in the tensor."""
    return None

  def token_keys(self, hidden):
    """uint32 [batch, seq_length, hidden]: each element's dropout key, its
    index in the tensor (`dropout.DropoutKeys.tokens`' one-a-row case)."""
    shape = tf.concat([tf.shape(self.mask), [hidden]], 0)
    index = tf.range(tf.reduce_prod(shape), dtype=tf.int32)
    return tf.reshape(tf.bitcast(index, tf.uint32), shape)


class SharedRows:
  """Several examples a row (`row_layout.to_rows`): `input_example_ids`,
  `input_position_ids` [rows, seq_length], `input_example_starts` and
  `input_example_index` [rows, slots]. Outputs per example come one per
  slot, [rows * slots, ...], row-major; an empty slot's are meaningless
  (its weight is 0)."""

  def __init__(self, inputs):
    self.inputs = inputs
    self.ids = inputs["input_example_ids"]
    # A scalar tensor where serving lays texts out in as many slots as
    # they need.
    self.slots = tf.shape(inputs["input_example_starts"])[1]

  def positions(self, table):
    """Position embeddings [rows, seq_length, hidden], from 0 at each
    example's [CLS]."""
    return tf.gather(table, self.inputs["input_position_ids"])

  def attention_bias(self):
    """[rows, 1, seq_length, seq_length], block-diagonal: MASKED where a
    key is padding or another example's, so each example attends to
    exactly the keys it has in a row of its own."""
    ids = self.ids
    same = tf.logical_and(
        tf.equal(ids[:, :, tf.newaxis], ids[:, tf.newaxis, :]),
        ids[:, tf.newaxis, :] > 0)
    return (1.0 - tf.cast(same, tf.float32))[:, tf.newaxis] * MASKED

  def first_tokens(self, x):
    """[rows * slots, hidden]: each slot's [CLS]."""
    first = tf.gather(x, self.inputs["input_example_starts"], batch_dims=1)
    return tf.reshape(first, [-1, x.shape[-1]])

  def mean(self, sequence):
    """float32 [rows * slots, hidden]: each slot's mean over its example's
    tokens; 0 for an empty slot."""
    rows = tf.shape(self.ids)[0]
    segment = tf.range(rows)[:, tf.newaxis] * self.slots + self.ids - 1
    segment = tf.where(self.ids > 0, segment, rows * self.slots)  # padding
    segment = tf.reshape(segment, [-1])
    hidden = sequence.shape[-1]
    total = tf.math.unsorted_segment_sum(
        tf.reshape(tf.cast(sequence, tf.float32), [-1, hidden]), segment,
        rows * self.slots + 1)[:-1]
    count = tf.math.unsorted_segment_sum(
        tf.ones_like(segment, tf.float32), segment, rows * self.slots + 1)[:-1]
    return total / tf.maximum(count, 1.0)[:, tf.newaxis]

  def example_index(self, n):
    """int32 [rows * slots]: each slot's example's place in the batch."""
    del n
    return tf.reshape(self.inputs["input_example_index"], [-1])

  def dropout_keys(self):
    """`dropout.DropoutKeys`: each element keyed as one example a row.
    Raises ValueError for rows without `input_example_index` (their masks
    could not be their examples')."""
    if "input_example_index" not in self.inputs:
      raise ValueError("shared rows without input_example_index: lay them out "
                       "with trainer.data.row_layout.to_rows")
    return dropout_lib.DropoutKeys(self.inputs)

  def token_keys(self, hidden):
    """uint32 [rows, seq_length, hidden]: each element's dropout key as one
    example a row (`dropout.DropoutKeys.tokens`)."""
    return self.dropout_keys().tokens(hidden)


def of(inputs):
  """The placement of an encoder input dict: `SharedRows` or `OneARow`."""
  return SharedRows(inputs) if features.is_rows(inputs) else OneARow(inputs)
