"""The classifier: a head over the encoder's pooled output, or over each
token's (tagging).

`logits = dense(dropout(pooled))`, the pooled vector being the encoder's
`pooled_output` or the mean of its `sequence_output` over the real tokens;
with `pooling="tokens"` nothing is pooled: one logit vector per token of
`sequence_output` (tagging).
"""

import tensorflow as tf

from trainer.encoders import dropout as dropout_lib
from trainer.encoders import handles
from trainer.encoders import placement


def pooling_of(c):
  """The head's pooling for Config `c`: `--pooling`, or "tokens" for a
  tagging run (one logit vector per token)."""
  return "tokens" if getattr(c, "task", "") == "tagging" else c.pooling


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
  over the real tokens (`"mean"`, as sentence-transformers pool), or each
  token's `sequence_output` (`"tokens"`: tagging, logits per token).

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
        each [batch, seq_length]; or shared rows (`features.ROW_INPUTS`:
        several examples a row, which only this project's encoders take).
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
    where = placement.of(inputs)
    if self.pooling == "tokens":
      return self._per_token(outputs["sequence_output"], where, training,
                             dropout_seed)
    if self.pooling == "mean":
      pooled = where.mean(outputs["sequence_output"])
    else:
      pooled = outputs["pooled_output"]
    if training and self.dropout_rate > 0:
      seed = dropout_seed if dropout_seed is not None else tf.constant([0, 0])
      pooled = dropout_lib.example_dropout(
          pooled, self.dropout_rate, seed,
          where.example_index(tf.shape(pooled)[0]))
    return tf.matmul(tf.cast(pooled, tf.float32), self.kernel) + self.bias

  def _per_token(self, sequence, where, training, dropout_seed):
    """logits [rows, seq_length, num_classes] of each token, its dropout
    keyed by example and position (`placement.token_keys`)."""
    sequence = tf.cast(sequence, tf.float32)
    hidden = sequence.shape[-1]
    if training and self.dropout_rate > 0:
      seed = dropout_seed if dropout_seed is not None else tf.constant([0, 0])
      sequence = dropout_lib.keyed_dropout(sequence, self.dropout_rate, seed,
                                           where.token_keys(hidden))
    logits = tf.matmul(tf.reshape(sequence, [-1, hidden]),
                       self.kernel) + self.bias
    return tf.reshape(
        logits, tf.concat([tf.shape(sequence)[:2], [tf.shape(self.bias)[0]]],
                          0))


def _dummy_inputs():
  ones = tf.ones([1, 2], tf.int32)
  return dict(
      input_word_ids=ones,
      input_mask=ones,
      input_type_ids=tf.zeros([1, 2], tf.int32))
