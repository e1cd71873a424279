"""Dropout masks keyed by example: a shared-rows batch draws the masks of
its fixed-shape twin.

A mask element is kept when a hash of (one uint32 seed per dropout call,
the element's key) clears the rate (`keep_mask`). One example a row, the
key is the element's index in the tensor; in shared rows it is the index
that element would have one example a row (`DropoutKeys`: from the
example's place in the batch and its token positions). So an example
draws the same masks wherever it lies, and a run in shared rows trains
the model that the same run at fixed shapes trains, to float rounding
(BUILD_NOTES.md, "Example-keyed dropout").
"""

import tensorflow as tf


def _hash32(x):
  """A 32-bit integer mixer (uint32 -> uint32, a bijection): xor-shifts and
  odd multiplies whose constants give each input bit an even chance to flip
  each output bit (C. Wellons' "lowbias32", see BUILD_NOTES.md)."""
  x = tf.bitwise.bitwise_xor(x, tf.bitwise.right_shift(x, 16))
  x = x * tf.constant(0x7FEB352D, tf.uint32)
  x = tf.bitwise.bitwise_xor(x, tf.bitwise.right_shift(x, 15))
  x = x * tf.constant(0x846CA68B, tf.uint32)
  return tf.bitwise.bitwise_xor(x, tf.bitwise.right_shift(x, 16))


def keep_mask(index, rate, seed):
  """Dropout's keep mask as a hash of (seed, each element's uint32 key).

  `seed` is one uint32 drawn from the dropout generator per call. Under XLA
  the whole mask fuses into the op that consumes it (five integer ops and a
  compare per element), where a Philox draw per element costs more than
  the encoder's matmuls on CPU (BUILD_NOTES.md, "XLA on CPU/GPU").
  """
  bits = _hash32(
      tf.bitwise.bitwise_xor(index * tf.constant(0x9E3779B9, tf.uint32),
                             _hash32(seed)))
  return bits >= tf.constant(min(round(rate * 2**32), 2**32 - 1), tf.uint32)


def hashed_keep_mask(shape, rate, seed):
  """`keep_mask` keyed by the element's index in a tensor of `shape`."""
  size = tf.reduce_prod(shape)
  index = tf.bitcast(tf.range(size, dtype=tf.int32), tf.uint32)
  return tf.reshape(keep_mask(index, rate, seed), shape)


def _u32(x):
  return tf.bitcast(tf.cast(x, tf.int32), tf.uint32)


def pair_seed(seed):
  """One uint32 seed from an int32 [2] stateless seed (step and replica)."""
  return _hash32(tf.bitwise.bitwise_xor(_u32(seed[0]), _hash32(_u32(seed[1]))))


def example_dropout(pooled, rate, seed, example):
  """Dropout of one vector per example, [n, hidden], keyed like the
  encoder's (`keep_mask`): feature f of the example at place e in its
  batch by e * hidden + f, so a slot of shared rows (`example`: the places,
  [n]) draws what its example draws one a row. `seed`: int32 [2]."""
  hidden = tf.shape(pooled)[-1]
  index = _u32(example)[:, tf.newaxis] * _u32(hidden) + _u32(tf.range(hidden))
  keep = keep_mask(index, rate, pair_seed(seed))
  return tf.where(keep, pooled / (1.0 - rate), tf.zeros_like(pooled))


def keyed_dropout(x, rate, seed, keys):
  """Dropout of `x` keyed like the encoder's (`keep_mask`): element i by
  `keys[i]` (uint32, x's shape: `placement.token_keys`), so an example's
  tokens draw the same masks in shared rows as one a row. `seed`: int32
  [2]."""
  keep = keep_mask(keys, rate, pair_seed(seed))
  return tf.where(keep, x / (1.0 - rate), tf.zeros_like(x))


class DropoutKeys:
  """Each element's dropout key in shared rows: its index in the tensor of
  one example a row (`hashed_keep_mask`'s key), so an example draws the
  same masks whichever row it shares (example-keyed dropout).

  An element of example e (its place in the batch, `input_example_index`)
  at position p, feature f of a [batch, seq_length, hidden] tensor is
  (e * seq_length + p) * hidden + f; of the attention probabilities
  [batch, heads, seq_length, seq_length], query at position q and key at
  k of head n, ((e * heads + n) * seq_length + q) * seq_length + k.
  """

  def __init__(self, inputs):
    slot = tf.maximum(inputs["input_example_ids"] - 1, 0)
    self.example = _u32(
        tf.gather(inputs["input_example_index"], slot, batch_dims=1))
    self.position = _u32(inputs["input_position_ids"])
    self.length = _u32(tf.shape(slot)[1])

  def tokens(self, hidden):
    """uint32 [rows, seq_length, hidden]."""
    base = (self.example * self.length + self.position) * _u32(hidden)
    return base[:, :, tf.newaxis] + _u32(tf.range(hidden))

  def attention(self, heads):
    """uint32 [rows, heads, seq_length, seq_length]."""
    head = _u32(tf.range(heads))[:, tf.newaxis, tf.newaxis]
    example = self.example[:, tf.newaxis, :, tf.newaxis]
    query = ((example * _u32(heads) + head) * self.length +
             self.position[:, tf.newaxis, :, tf.newaxis])
    return query * self.length + self.position[:, tf.newaxis, tf.newaxis, :]


def apply(x, rate, training, rng, hashed=False, index=None):
  """Dropout drawing from `rng`, a tf.random.Generator whose state is a
  variable of the encoder: checkpointed with the weights, so a resumed run
  draws exactly the masks an uninterrupted one would. `hashed` draws one
  seed per call and hashes it with each element's key (`keep_mask`):
  `index()` (`DropoutKeys`) in shared rows, else the element's index,
  instead of one Philox number per element."""
  if not training or rate == 0.0:
    return x
  if hashed:
    seed = rng.uniform_full_int([], dtype=tf.uint32)
    keep = (
        hashed_keep_mask(tf.shape(x), rate, seed)
        if index is None else keep_mask(index(), rate, seed))
  else:
    keep = rng.uniform(tf.shape(x)) >= rate
  return tf.where(keep, x / (1.0 - rate), tf.zeros_like(x))
