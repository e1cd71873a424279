"""The classifier: a head over the encoder's pooled output.

`logits = dense(dropout(pooled))`, the pooled vector being the encoder's
`pooled_output` or the mean of its `sequence_output` over the real tokens.
"""

import tensorflow as tf

from trainer.encoders import dropout as dropout_lib
from trainer.encoders import handles


def _hidden_size(encoder):
  v = handles.variable(encoder, r"pooler")
  if v is not None:
    return int(v.shape[1])
  # Not a BERT variable layout we know: ask the encoder itself.
  return int(
      encoder(_dummy_inputs(), training=False)["pooled_output"].shape[-1])


class Classifier(tf.Module):
  """logits = dense(dropout(pooled)); pooled is the encoder's
  `pooled_output` (`pooling="cls"`) or the mean of its `sequence_output`
  over the real tokens (`"mean"`, as sentence-transformers pool).

  Create under `strategy.scope()` so the head variables are replicated like
  the encoder's.
  """

  def __init__(self,
               encoder,
               num_classes,
               dropout_rate=0.1,
               seed=0,
               pooling="cls",
               name="classifier"):
    super().__init__(name=name)
    self.encoder = encoder
    self.dropout_rate = dropout_rate
    self.pooling = pooling
    hidden = _hidden_size(encoder)
    init = tf.random.stateless_truncated_normal([hidden, num_classes],
                                                seed=[seed, 0],
                                                stddev=0.02)
    with self.name_scope:
      self.kernel = tf.Variable(init, name="kernel")
      self.bias = tf.Variable(tf.zeros([num_classes]), name="bias")

  @property
  def trainable_variables(self):
    return tuple(self.encoder.trainable_variables) + (self.kernel, self.bias)

  def with_encoder(self, encoder):
    """This classifier's head (the same variables) over `encoder`."""
    twin = Classifier.__new__(Classifier)
    tf.Module.__init__(twin, name=self.name)
    twin.encoder, twin.dropout_rate, twin.pooling = (encoder, self.dropout_rate,
                                                     self.pooling)
    twin.kernel, twin.bias = self.kernel, self.bias
    return twin

  def __call__(self, inputs, training=False, dropout_seed=None):
    """Computes logits.

    Args:
      inputs: dict of int32 `input_word_ids`, `input_mask`, `input_type_ids`,
        each [batch, seq_length]; or shared rows (`trainer.data.row_layout.
        ROW_INPUTS`: several examples a row, which only this project's
        encoders take).
      training: enables dropout in the encoder and the head.
      dropout_seed: int32 [2] seed of the head dropout (stateless, so a
        resumed run draws the same masks; keyed by each example's place in
        the batch, `dropout_lib.example_dropout`, so shared rows draw what one
        example a row draws).

    Returns:
      logits: [batch, num_classes] float32; for shared rows [rows * slots,
        num_classes], one per slot, row-major (an empty slot's are
        meaningless: its weight is 0).
    """
    outputs = self.encoder(inputs, training=training)
    if self.pooling == "mean" and "input_example_ids" in inputs:
      pooled = mean_pool_slots(outputs["sequence_output"],
                               inputs["input_example_ids"],
                               tf.shape(inputs["input_example_starts"])[1])
    elif self.pooling == "mean":
      pooled = mean_pool(outputs["sequence_output"], inputs["input_mask"])
    else:
      pooled = outputs["pooled_output"]
    if training and self.dropout_rate > 0:
      seed = dropout_seed if dropout_seed is not None else tf.constant([0, 0])
      example = (
          tf.reshape(inputs["input_example_index"], [-1])
          if "input_example_index" in inputs else tf.range(tf.shape(pooled)[0]))
      pooled = dropout_lib.example_dropout(pooled, self.dropout_rate, seed,
                                           example)
    return tf.matmul(tf.cast(pooled, tf.float32), self.kernel) + self.bias


def mean_pool(sequence, mask):
  """float32 [batch, hidden]: the mean of `sequence` over positions where
  `mask` (int [batch, seq]) is 1."""
  weights = tf.cast(mask, tf.float32)[:, :, tf.newaxis]
  total = tf.reduce_sum(tf.cast(sequence, tf.float32) * weights, axis=1)
  return total / tf.maximum(tf.reduce_sum(weights, axis=1), 1.0)


def mean_pool_slots(sequence, example_ids, slots):
  """float32 [rows * slots, hidden]: for each slot of shared rows the mean
  of `sequence` [rows, seq, hidden] over its example's tokens
  (`example_ids` [rows, seq]: 1 + slot, 0 for padding), row-major; 0 for
  an empty slot. `slots` may be a scalar tensor (serving lays out texts
  in as many slots as they need)."""
  rows = tf.shape(example_ids)[0]
  segment = tf.range(rows)[:, tf.newaxis] * slots + example_ids - 1
  segment = tf.where(example_ids > 0, segment, rows * slots)  # padding: out
  hidden = sequence.shape[-1]
  total = tf.math.unsorted_segment_sum(
      tf.reshape(tf.cast(sequence, tf.float32), [-1, hidden]),
      tf.reshape(segment, [-1]), rows * slots + 1)[:-1]
  count = tf.math.unsorted_segment_sum(
      tf.ones_like(tf.reshape(segment, [-1]), tf.float32),
      tf.reshape(segment, [-1]), rows * slots + 1)[:-1]
  return total / tf.maximum(count, 1.0)[:, tf.newaxis]


def _dummy_inputs():
  ones = tf.ones([1, 2], tf.int32)
  return dict(
      input_word_ids=ones,
      input_mask=ones,
      input_type_ids=tf.zeros([1, 2], tf.int32))
