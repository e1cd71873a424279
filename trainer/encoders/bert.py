"""A BERT encoder as a plain `tf.Module` (saved in the TF Hub encoder format
by `native.save_encoder`).

One builder serves the embedded demo (random weights, small sizes) and the
Hugging Face converter (pretrained weights loaded into the same variables), so
both produce SavedModels with the interface of the TF Hub BERT encoders:

    outputs = hub.load(path)(dict(input_word_ids=..., input_mask=...,
                                  input_type_ids=...), training=False)
    outputs["pooled_output"]     # [batch, hidden] float32
    outputs["sequence_output"]   # [batch, seq_length, hidden] float32
    outputs["encoder_outputs"]   # num_layers x [batch, seq_length, hidden]

No Keras: the module does not depend on which Keras is installed.
"""

import dataclasses
import json
import math

import tensorflow as tf

from trainer.encoders import dropout as dropout_lib
from trainer.encoders import placement


@dataclasses.dataclass(frozen=True)
class BertConfig:
  """Sizes of a BERT encoder (names follow the original BERT config)."""

  vocab_size: int
  hidden_size: int = 128
  num_layers: int = 2
  num_heads: int = 2
  intermediate_size: int = 512
  max_position_embeddings: int = 512
  type_vocab_size: int = 2
  dropout_rate: float = 0.1
  layer_norm_eps: float = 1e-12
  initializer_range: float = 0.02
  hidden_act: str = "gelu"

  def __post_init__(self):
    if self.hidden_size % self.num_heads:
      raise ValueError(f"hidden_size={self.hidden_size} is not divisible by "
                       f"num_heads={self.num_heads}")
    if self.hidden_act not in ACTIVATIONS:
      raise ValueError(f"hidden_act={self.hidden_act!r} is not supported; "
                       f"supported: {sorted(ACTIVATIONS)}")

  def to_json(self):
    return json.dumps(dataclasses.asdict(self), indent=2, sort_keys=True)


def _gelu_tanh(x):
  return tf.nn.gelu(x, approximate=True)


# Feed-forward activations by their Hugging Face / BERT config names: "gelu"
# is the exact erf form, "gelu_new" and "gelu_pytorch_tanh" the tanh form.
ACTIVATIONS = {
    "gelu": lambda x: tf.nn.gelu(x, approximate=False),
    "gelu_new": _gelu_tanh,
    "gelu_pytorch_tanh": _gelu_tanh,
    "relu": tf.nn.relu,
    "silu": tf.nn.silu,
    "swish": tf.nn.silu,
}


def _matmul(a, b, compute_dtype, keep=False, **kwargs):
  """tf.matmul in `compute_dtype` (float32 out unless `keep`).

  bfloat16 (or float16) is mixed precision: the operands are rounded to
  it, the product is in it, and everything around the matmuls (softmax, layer
  norms, residual sums, the loss) stays float32, as do the variables.
  With `keep`, the product stays in `compute_dtype` for a consumer that is
  itself a matmul (attention's q, k, v and context), so no cast there and
  back: an operand already in `compute_dtype` is not cast again.
  """
  if compute_dtype == "float32":
    return tf.matmul(a, b, **kwargs)
  y = tf.matmul(_as(a, compute_dtype), _as(b, compute_dtype), **kwargs)
  return y if keep else tf.cast(y, tf.float32)


def _as(x, dtype):
  return x if x.dtype == tf.as_dtype(dtype) else tf.cast(x, dtype)


def _normal(shape, stddev, rng):
  return rng.truncated_normal(shape, stddev=stddev, dtype=tf.float32)


class _Dense(tf.Module):
  """y = x @ kernel + bias over the last axis."""

  def __init__(self, in_dim, out_dim, stddev, rng, name):
    super().__init__(name=name)
    with self.name_scope:
      self.kernel = tf.Variable(
          _normal([in_dim, out_dim], stddev, rng), name="kernel")
      self.bias = tf.Variable(tf.zeros([out_dim]), name="bias")

  def __call__(self, x, compute_dtype="float32", keep=False):
    """`keep`: the output in `compute_dtype` (bias added in it), for a
    matmul to consume; else float32."""
    # A 2-D matmul: einsum("...i,io->...o") has a gradient ~50x slower on CPU.
    flat = tf.reshape(x, [-1, self.kernel.shape[0]])
    y = _matmul(flat, self.kernel, compute_dtype, keep)
    y += _as(self.bias, y.dtype)
    out_dim = self.kernel.shape[1]
    y = tf.reshape(y, tf.concat([tf.shape(x)[:-1], [out_dim]], axis=0))
    # Static last dimension: Keras layers stacked on the saved encoder
    # (hub.KerasLayer + Dense) need to know the hidden size.
    y.set_shape(x.shape[:-1].concatenate([out_dim]))
    return y


class _LayerNorm(tf.Module):
  """LayerNorm over the last axis; `gamma`/`beta` names mark it for AdamW."""

  def __init__(self, dim, eps, name):
    super().__init__(name=name)
    self.eps = eps
    with self.name_scope:
      self.gamma = tf.Variable(tf.ones([dim]), name="gamma")
      self.beta = tf.Variable(tf.zeros([dim]), name="beta")

  def __call__(self, x):
    mean, variance = tf.nn.moments(x, axes=[-1], keepdims=True)
    return (x - mean) * tf.math.rsqrt(variance +
                                      self.eps) * self.gamma + self.beta


class _TransformerLayer(tf.Module):
  """Post-LayerNorm transformer block: attention and GELU feed-forward."""

  def __init__(self, config, rng, name):
    super().__init__(name=name)
    h, s = config.hidden_size, config.initializer_range
    self.num_heads = config.num_heads
    self.head_size = h // config.num_heads
    self.dropout_rate = config.dropout_rate
    self.activation = ACTIVATIONS[config.hidden_act]
    with self.name_scope:
      self.query = _Dense(h, h, s, rng, "self_attention_query")
      self.key = _Dense(h, h, s, rng, "self_attention_key")
      self.value = _Dense(h, h, s, rng, "self_attention_value")
      self.attention_output = _Dense(h, h, s, rng, "self_attention_output")
      self.attention_layer_norm = _LayerNorm(h, config.layer_norm_eps,
                                             "self_attention_layer_norm")
      self.intermediate = _Dense(h, config.intermediate_size, s, rng,
                                 "intermediate")
      self.output_dense = _Dense(config.intermediate_size, h, s, rng, "output")
      self.output_layer_norm = _LayerNorm(h, config.layer_norm_eps,
                                          "output_layer_norm")

  def _heads(self, x):
    batch, length = tf.shape(x)[0], tf.shape(x)[1]
    x = tf.reshape(x, [batch, length, self.num_heads, self.head_size])
    return tf.transpose(x, [0, 2, 1, 3])  # [batch, heads, length, head_size]

  def __call__(self,
               x,
               attention_bias,
               training,
               rng,
               compute_dtype,
               hashed_dropout,
               keys=None):
    cd = compute_dtype

    def drop(t, index):
      return dropout_lib.apply(t, self.dropout_rate, training, rng,
                               hashed_dropout,
                               index if keys is not None else None)

    width = x.shape[-1]
    hidden_keys = lambda: keys.tokens(width)
    # q, k, v and the context stay in the compute dtype from the matmul
    # that makes them to the one that takes them (one cast of x, not three;
    # none there and back); scores, softmax and dropout are float32.
    xc = _as(x, cd)
    q = self._heads(self.query(xc, cd, keep=True))
    k = self._heads(self.key(xc, cd, keep=True))
    v = self._heads(self.value(xc, cd, keep=True))
    scores = _matmul(q, k, cd, transpose_b=True) / math.sqrt(self.head_size)
    probs = tf.nn.softmax(scores + attention_bias, axis=-1)
    probs = drop(probs, lambda: keys.attention(self.num_heads))
    context = tf.transpose(_matmul(probs, v, cd, keep=True), [0, 2, 1, 3])
    context = tf.reshape(context, tf.shape(x))
    context.set_shape(x.shape)
    attended = drop(self.attention_output(context, cd), hidden_keys)
    x = self.attention_layer_norm(x + attended)
    hidden = self.activation(self.intermediate(x, cd))
    out = drop(self.output_dense(hidden, cd), hidden_keys)
    return self.output_layer_norm(x + out)


class BertEncoder(tf.Module):
  """BERT: embeddings, `num_layers` transformer blocks and a tanh pooler."""

  def __init__(self, config, seed=0, name="bert_encoder"):
    super().__init__(name=name)
    self.config = config
    rng = tf.random.Generator.from_seed(seed)
    h, s = config.hidden_size, config.initializer_range
    with self.name_scope:
      self.word_embeddings = tf.Variable(
          _normal([config.vocab_size, h], s, rng),
          name="word_embeddings/embeddings")
      self.position_embeddings = tf.Variable(
          _normal([config.max_position_embeddings, h], s, rng),
          name="position_embedding/embeddings")
      self.type_embeddings = tf.Variable(
          _normal([config.type_vocab_size, h], s, rng),
          name="type_embeddings/embeddings")
      self.embeddings_layer_norm = _LayerNorm(h, config.layer_norm_eps,
                                              "embeddings_layer_norm")
      self.layers = [
          _TransformerLayer(config, rng, f"transformer_layer_{i}")
          for i in range(config.num_layers)
      ]
      self.pooler = _Dense(h, h, s, rng, "pooler_transform")
      # Dropout's random state: a (non-trainable) variable like the weights.
      self.dropout_rng = tf.random.Generator.from_seed(seed + 1_000_003)

  def __call__(self,
               inputs,
               training=False,
               compute_dtype="float32",
               hashed_dropout=False):
    """Runs the encoder.

    Args:
      inputs: dict of int32 `input_word_ids`, `input_mask`, `input_type_ids`,
        each [batch, seq_length]; or shared rows (`features.ROW_INPUTS`:
        several examples a row, each attending only to itself), read once
        by `placement.of`.
      training: whether dropout is active.
      compute_dtype: "float32", or "bfloat16" for mixed precision (bfloat16
        matmuls, everything else float32; see `_matmul`). Saved encoders
        are traced in float32; see `native.NativeEncoder` for bfloat16.
      hashed_dropout: draw dropout masks keyed by example
        (`dropout.keep_mask`: the same masks in shared rows as one example
        a row) instead of Philox (saved encoders use Philox).

    Returns:
      dict with `pooled_output` [batch, hidden] (shared rows: [rows *
      slots, hidden], one per slot, row-major), `sequence_output`
      [batch, seq_length, hidden], `encoder_outputs` (one
      [batch, seq_length, hidden] per layer) and `default` (= pooled_output),
      all float32.
    """
    where = placement.of(inputs)  # the layout, read once
    x = (
        tf.gather(self.word_embeddings, inputs["input_word_ids"]) +
        tf.gather(self.type_embeddings, inputs["input_type_ids"]) +
        where.positions(self.position_embeddings))
    keys = where.dropout_keys() if training and hashed_dropout else None
    x = dropout_lib.apply(
        self.embeddings_layer_norm(x), self.config.dropout_rate, training,
        self.dropout_rng, hashed_dropout,
        None if keys is None else lambda: keys.tokens(self.config.hidden_size))
    attention_bias = where.attention_bias()
    encoder_outputs = []
    for layer in self.layers:
      x = layer(x, attention_bias, training, self.dropout_rng, compute_dtype,
                hashed_dropout, keys)
      encoder_outputs.append(x)
    pooled = tf.tanh(self.pooler(where.first_tokens(x), compute_dtype))
    return dict(
        pooled_output=pooled,
        sequence_output=x,
        encoder_outputs=encoder_outputs,
        default=pooled)
