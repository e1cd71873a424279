"""Model Garden's BERT encoder (TF Hub's "experts/bert" and
`bert_en_uncased_L-*` SavedModels) as this project's `bert.BertEncoder`.

TF Hub's BERT encoders were written by Model Garden's exporter: their
variables carry Model Garden names (`transformer/layer_N/self_attention/
query/kernel` [hidden, heads, head_size], ...), the table in BUILD_NOTES.md
("Variable names"). `model_garden_encoder` copies them into a
`bert.BertEncoder`; `rebuild` also finds the activation by comparing
outputs. Training rebuilds them so (shared rows need this project's
encoder), and the Hugging Face export writes the result under Hugging
Face's names.
"""

import re

import numpy as np
import tensorflow as tf

from trainer.encoders import bert
from trainer.foundation import errors

ConversionError = errors.ConversionError

# The parts of a layer in a Model Garden encoder (`transformer/layer_N/` +
# name); `self_attention_output` is the older TransformerEncoderBlock's name.
_GARDEN_PARTS = dict(
    query=("self_attention/query",),
    key=("self_attention/key",),
    value=("self_attention/value",),
    attention_output=("self_attention/attention_output",
                      "self_attention_output"),
    attention_layer_norm=("self_attention_layer_norm",),
    intermediate=("intermediate",),
    output_dense=("output",),
    output_layer_norm=("output_layer_norm",))
_GARDEN_NAME = re.compile(
    r"(?:^|/)(word_embeddings/embeddings|position_embedding/embeddings|"
    r"type_embeddings/embeddings|embeddings/layer_norm/(?:gamma|beta)|"
    r"transformer/layer_\d+/[^:]+|pooler_transform/(?:kernel|bias))(?::\d+)?$")


def _garden_variables(loaded):
  """{Model Garden name: variable} of a loaded encoder, or None unless
  every trainable variable has a Model Garden BERT name. (TF Hub's exports
  also keep a `do_lower_case` boolean, untrainable and unnamed; the
  masked-LM head of an `mlm` sub-object is not among the root's
  variables.)"""
  matches = [
      (_GARDEN_NAME.search(v.name), v) for v in loaded.trainable_variables
  ]
  if not all(m for m, _ in matches):
    return None
  return {m.group(1): v for m, v in matches}


def _garden_config(found, hidden_act):
  word = found["word_embeddings/embeddings"].shape
  query = found["transformer/layer_0/self_attention/query/kernel"].shape
  layers = {
      int(m.group(1))
      for m in map(re.compile(r"transformer/layer_(\d+)/").match, found)
      if m
  }
  return bert.BertConfig(
      vocab_size=int(word[0]),
      hidden_size=int(word[1]),
      num_layers=len(layers),
      num_heads=int(query[1]) if len(query) == 3 else 1,
      intermediate_size=int(
          found["transformer/layer_0/intermediate/kernel"].shape[-1]),
      max_position_embeddings=int(
          found["position_embedding/embeddings"].shape[0]),
      type_vocab_size=int(found["type_embeddings/embeddings"].shape[0]),
      hidden_act=hidden_act)


def _garden_prefix(left, i, names):
  """The Model Garden prefix of layer `i`'s part of `names` (one name,
  or the names it has had) that this encoder uses."""
  prefixes = [f"transformer/layer_{i}/{n}/" for n in names]
  return next((p for p in prefixes if any(k.startswith(p) for k in left)),
              prefixes[0])


def _fill_from_garden(encoder, found):
  """Assigns Model Garden variables to `bert.BertEncoder` `encoder`
  (EinsumDense kernels [hidden, heads, head_size] and [heads, head_size,
  hidden] flattened): KeyError if one is missing or left over."""
  left = dict(found)

  def take(name, target):
    value = tf.convert_to_tensor(left.pop(name))
    if value.shape.num_elements() != target.shape.num_elements():
      raise ValueError(f"{name} has shape {value.shape.as_list()}")
    target.assign(tf.reshape(value, target.shape))

  for name, target in (("word_embeddings", encoder.word_embeddings),
                       ("position_embedding", encoder.position_embeddings),
                       ("type_embeddings", encoder.type_embeddings)):
    take(name + "/embeddings", target)
  take("embeddings/layer_norm/gamma", encoder.embeddings_layer_norm.gamma)
  take("embeddings/layer_norm/beta", encoder.embeddings_layer_norm.beta)
  for i, layer in enumerate(encoder.layers):
    for ours, names in _GARDEN_PARTS.items():
      prefix = _garden_prefix(left, i, names)
      part = getattr(layer, ours)
      pairs = ((("gamma", part.gamma),
                ("beta", part.beta)) if hasattr(part, "gamma") else
               (("kernel", part.kernel), ("bias", part.bias)))
      for suffix, target in pairs:
        take(prefix + suffix, target)
  take("pooler_transform/kernel", encoder.pooler.kernel)
  take("pooler_transform/bias", encoder.pooler.bias)
  if left:
    raise KeyError(f"{sorted(left)[0]} (not a BERT variable)")


def model_garden_encoder(loaded, handle, hidden_act):
  """A `bert.BertEncoder` (feed-forward `hidden_act`) holding the weights
  of a `hub.load`ed TF Hub BERT encoder of the Model Garden layout
  (`transformer/layer_N/self_attention/query/...`), or None for an encoder
  not named like one; a variable that does not fit is a ConversionError.
  The variables do not say the activation, nor pre- or post-LayerNorm:
  compare the outputs (`trainer.serving.huggingface` does)."""
  found = _garden_variables(loaded)
  if not found or "word_embeddings/embeddings" not in found:
    return None
  try:
    encoder = bert.BertEncoder(_garden_config(found, hidden_act))
    _fill_from_garden(encoder, found)
  except (KeyError, ValueError) as e:
    raise ConversionError(
        f"--encoder_handle={handle} is named like a Model Garden BERT, but "
        f"{str(e).strip(chr(39))} does not fit a BERT encoder; it is not "
        "supported") from None
  return encoder


def _probe_inputs(config, seed=0):
  """Three rows of 16 random ids, 16, 8 and 3 of them unmasked, types 0
  then 1 (if there are two)."""
  length = min(16, config.max_position_embeddings)
  ids = np.random.default_rng(seed).integers(0, config.vocab_size, (3, length))
  mask = np.arange(length) < np.array([[length], [length // 2], [3]])
  types = np.minimum(np.arange(length) >= 2, config.type_vocab_size - 1) * mask
  return {
      k: tf.constant(v, tf.int32)
      for k, v in (("input_word_ids", ids * mask), ("input_mask", mask),
                   ("input_type_ids", types))
  }


def difference(loaded, encoder, inputs):
  """Largest |difference| of the pooled and (unpadded) sequence outputs
  of two encoders."""
  theirs, ours = loaded(inputs, training=False), encoder(inputs)
  on = tf.cast(inputs["input_mask"], tf.bool)
  pooled = tf.abs(theirs["pooled_output"] - ours["pooled_output"])
  sequence = tf.abs(
      tf.boolean_mask(theirs["sequence_output"], on) -
      tf.boolean_mask(ours["sequence_output"], on))
  return float(tf.maximum(tf.reduce_max(pooled), tf.reduce_max(sequence)))


def rebuild(loaded, handle):
  """The `bert.BertEncoder` equal to a `hub.load`ed Model Garden BERT
  encoder, its weights copied in, or None for one not named like it: with
  the tanh GELU (Model Garden's default), else the exact one, whichever
  reproduces its outputs within 1e-4 (the variables do not say which).
  Neither (pre-LayerNorm, another activation) is a ConversionError."""
  best, inputs = float("inf"), None
  for activation in ("gelu_new", "gelu"):
    encoder = model_garden_encoder(loaded, handle, activation)
    if encoder is None:
      return None
    inputs = inputs or _probe_inputs(encoder.config)
    best = min(best, difference(loaded, encoder, inputs))
    if best <= 1e-4:
      return encoder
  raise ConversionError(
      f"--encoder_handle={handle}: no post-LayerNorm BERT with a GELU "
      f"feed-forward reproduces its outputs (max difference {best:.2g})")
