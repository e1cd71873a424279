"""The classifier: a TF Hub BERT encoder plus a dropout + dense head.

The encoder is whatever `hub.load(handle)` returns (URL, gs:// or local
folder). No Keras wrapper: `hub.KerasLayer` breaks under Keras 3, and the
train step only needs a callable and its `trainable_variables`.
"""

import re

import tensorflow as tf
import tensorflow_hub as hub


class HandleError(ValueError):
  """A model handle cannot be loaded or does not have the expected API."""


def load_handle(handle, flag, io_device=None):
  """`hub.load` with a clear error; `io_device` for TPUs without local disk."""
  options = None
  if io_device:
    options = tf.saved_model.LoadOptions(experimental_io_device=io_device)
  try:
    return hub.load(handle, options=options)
  except Exception as e:  # Network, format and permission errors alike.
    lines = str(e).strip().splitlines()
    reason = lines[0] if lines else type(e).__name__
    raise HandleError(
        f"cannot load --{flag}={handle}: {reason[:300]}. Check the handle; "
        "offline, use a local SavedModel folder (see trainer.convert_hf) or "
        "the embedded 'demo'.") from None


def max_positions(encoder):
  """Number of position embeddings of a loaded BERT encoder, or None."""
  for v in encoder.variables:
    if re.search(r"position_embedding", v.name) and len(v.shape) == 2:
      return int(v.shape[0])
  return None


def _word_embeddings(encoder):
  for v in encoder.variables:
    if re.search(r"word_embeddings", v.name) and len(v.shape) == 2:
      return v
  return None


def word_embedding_rows(encoder):
  """Vocabulary size of a loaded BERT encoder's word embeddings, or None."""
  v = _word_embeddings(encoder)
  return None if v is None else int(v.shape[0])


def _hidden_size(encoder):
  for v in encoder.variables:
    if re.search(r"pooler", v.name) and len(v.shape) == 2:
      return int(v.shape[1])
  # Not a BERT variable layout we know: ask the encoder itself.
  return int(
      encoder(_dummy_inputs(), training=False)["pooled_output"].shape[-1])


class Classifier(tf.Module):
  """logits = dense(dropout(encoder(inputs)["pooled_output"])).

  Create under `strategy.scope()` so the head variables are replicated like
  the encoder's.
  """

  def __init__(self,
               encoder,
               num_classes,
               dropout_rate=0.1,
               seed=0,
               name="classifier"):
    super().__init__(name=name)
    self.encoder = encoder
    self.dropout_rate = dropout_rate
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

  def __call__(self, inputs, training=False, dropout_seed=None):
    """Computes logits.

    Args:
      inputs: dict of int32 `input_word_ids`, `input_mask`, `input_type_ids`,
        each [batch, seq_length].
      training: enables dropout in the encoder and the head.
      dropout_seed: int32 [2] seed of the head dropout (stateless, so a
        resumed run draws the same masks).

    Returns:
      logits: [batch, num_classes] float32.
    """
    pooled = self.encoder(inputs, training=training)["pooled_output"]
    if training and self.dropout_rate > 0:
      seed = dropout_seed if dropout_seed is not None else tf.constant([0, 0])
      pooled = tf.nn.experimental.stateless_dropout(
          pooled, rate=self.dropout_rate, seed=seed)
    return tf.matmul(tf.cast(pooled, tf.float32), self.kernel) + self.bias


def _dummy_inputs():
  ones = tf.ones([1, 2], tf.int32)
  return dict(
      input_word_ids=ones,
      input_mask=ones,
      input_type_ids=tf.zeros([1, 2], tf.int32))
