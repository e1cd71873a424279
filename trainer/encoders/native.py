"""This project's encoders as SavedModels, and loaded back as Python code.

`save_encoder` writes a `bert.BertEncoder` in the TF Hub encoder format
(callable with `(inputs, training=...)`, the Reusable SavedModel
attributes, `get_config_json`); `saved_config` reads the config back, and
`NativeEncoder.load` rebuilds the Python encoder around a loaded one's
values, so training runs the Python code (bfloat16 matmuls, XLA, dropout
keyed by example, shared rows) while checkpoints and exports keep the
loaded object's layout.
"""

import json

import tensorflow as tf

from trainer.data import preprocessing
from trainer.encoders import bert


def _encoder_spec():
  return {
      k: tf.TensorSpec([None, None], tf.int32, name=k)
      for k in preprocessing.ENCODER_INPUTS
  }


def _traced(call, spec):
  """`call` as a tf.function traced for `spec` with training off and on:
  the `__call__` of a TF Hub encoder."""
  call = tf.function(call, autograph=False)
  for training in (False, True):
    call.get_concrete_function(spec, training=training)
  return call


def _config_getter(config):
  """`get_config_json` (`saved_config` reads it): a constant, not a
  variable (string variables would be mirrored onto the accelerators when
  the encoder is loaded under a distribution strategy)."""
  config_json = config.to_json()
  return tf.function(lambda: tf.constant(config_json), input_signature=[])


def reusable_root(encoder):
  """(A trackable root for `encoder` with the Reusable SavedModel API:
  callable with `(inputs, training=...)`, with `variables`,
  `trainable_variables` and `regularization_losses`; the inputs' spec)."""
  spec = _encoder_spec()
  # A plain trackable root: a tf.train.Checkpoint root would be restored as
  # a Checkpoint, whose children a surrounding checkpoint does not save.
  root = tf.__internal__.tracking.AutoTrackable()
  root.encoder = encoder
  root.__call__ = _traced(encoder.__call__, spec)
  root.variables = list(encoder.variables)
  root.trainable_variables = list(encoder.trainable_variables)
  root.regularization_losses = []
  return root, spec


def save_encoder(encoder, export_dir):
  """Writes `encoder` as a TF Hub style SavedModel (reusable, fine-tunable).

  The saved object is callable with `(inputs, training=...)` and carries the
  `variables`, `trainable_variables` and `regularization_losses` attributes of
  the Reusable SavedModel API, so `hub.load` users can fine-tune it.
  """
  root, spec = reusable_root(encoder)
  call = root.__call__
  root.get_config_json = _config_getter(encoder.config)

  @tf.function(
      autograph=False,
      input_signature=[
          spec["input_word_ids"], spec["input_mask"], spec["input_type_ids"]
      ])
  def serve(input_word_ids, input_mask, input_type_ids):
    out = call(
        dict(
            input_word_ids=input_word_ids,
            input_mask=input_mask,
            input_type_ids=input_type_ids),
        training=False)
    return dict(
        pooled_output=out["pooled_output"],
        sequence_output=out["sequence_output"])

  tf.saved_model.save(root, export_dir, signatures={"serving_default": serve})


def saved_config(loaded):
  """The `BertConfig` of an encoder saved by `save_encoder`, else None.

  TF Hub encoders from elsewhere have no `get_config_json`: for them the
  graph is opaque and only a graph-level precision rewrite can apply.
  """
  get = getattr(loaded, "get_config_json", None)
  if get is None:
    return None
  return bert.BertConfig(**json.loads(get().numpy().decode("utf-8")))


class NativeEncoder(tf.__internal__.tracking.AutoTrackable):
  """A `bert.BertEncoder` with the attributes of a loaded TF Hub encoder.

  A SavedModel's concrete functions are fixed float32 graphs, and XLA cannot
  compile the gradient of a loaded function without recompiling at every
  step (BUILD_NOTES.md, "XLA on CPU/GPU"), and their dropout masks are
  drawn per element of whatever layout they get. So the trainer always
  rebuilds the Python `BertEncoder` (bfloat16 matmuls, XLA, masks keyed by
  example, shared rows): `load` rebuilds one of this project's saved
  encoders from its saved config with the loaded values copied in, and a
  Model Garden BERT rebuilt elsewhere (`garden.rebuild`) is wrapped as it
  is. Its attributes mirror a loaded object's (`encoder`, `variables`,
  `trainable_variables`), so checkpoints written either way restore into
  the other, and an export rebuilt from the SavedModel reads them.

  Args:
    encoder: the `bert.BertEncoder` that computes.
    variables: its variables in the order a checkpoint lists them (the
      loaded object's for `load`; default the encoder's own).
    trainable_variables: likewise.
    compute_dtype: "float32" (the saved graph's math, bit for bit) or
      "bfloat16" / "float16" (matmuls in that dtype; see `bert._matmul`).
    hashed_dropout: draw dropout masks keyed by example (`dropout`).
  """

  def __init__(self,
               encoder,
               variables=None,
               trainable_variables=None,
               compute_dtype="float32",
               hashed_dropout=False):
    self.encoder = encoder
    self.variables = list(encoder.variables if variables is None else variables)
    self.trainable_variables = list(
        encoder.trainable_variables if trainable_variables is
        None else trainable_variables)
    self.compute_dtype = compute_dtype
    self.hashed_dropout = hashed_dropout
    self.regularization_losses = []

  @classmethod
  def load(cls, loaded, compute_dtype="float32", hashed_dropout=False):
    """This project's `hub.load`ed encoder (it has `get_config_json`)
    rebuilt as Python code, the loaded values copied in (create it where
    the loaded one's variables belong: under the strategy's scope), its
    variables listed in the loaded object's order.

    Raises:
      ValueError: not an encoder `save_encoder` wrote, or its variables do
        not match its config.
    """
    config = saved_config(loaded)
    if config is None:
      raise ValueError(
          "not an encoder saved by trainer.encoders.native.save_encoder")
    encoder = bert.BertEncoder(config)
    own = {v.name: v for v in encoder.variables}
    if sorted(own) != sorted(v.name for v in loaded.variables):
      raise ValueError("the saved encoder's variables do not match its "
                       "config")
    for v in loaded.variables:
      own[v.name].assign(v)
    # Dropout's random state, so the first masks equal a saved-graph run's.
    state = _saved_dropout_state(loaded)
    if state is not None:
      encoder.dropout_rng.state.assign(state)
    return cls(encoder, [own[v.name] for v in loaded.variables],
               [own[v.name] for v in loaded.trainable_variables], compute_dtype,
               hashed_dropout)

  def __call__(self, inputs, training=False):
    return self.encoder(
        inputs,
        training=training,
        compute_dtype=self.compute_dtype,
        hashed_dropout=self.hashed_dropout)

  def in_float32(self):
    """The same encoder (the same variables) computing in float32, its
    dropout Philox: what an export serves. Saved, it is a TF Hub encoder
    again, as `save_encoder` writes one: callable (traced here) and with
    `get_config_json`, so the export's encoder can be rebuilt."""
    view = NativeEncoder(self.encoder, self.variables, self.trainable_variables)
    # In this process `view(...)` still runs the class's `__call__`.
    view.__call__ = _traced(view.__call__, _encoder_spec())
    view.get_config_json = _config_getter(self.encoder.config)
    return view

  def host_twin(self):
    """A float32 encoder of the same config on this host's CPU, its
    variables in the order of this one's (for a host copy of weights that
    live on a TPU: `serving.export.host_copy`)."""
    with tf.device("/cpu:0"):
      fresh = bert.BertEncoder(self.encoder.config)
    own = {v.name: v for v in fresh.variables}
    return NativeEncoder(fresh, [own[v.name] for v in self.variables],
                         [own[v.name] for v in self.trainable_variables])


def _saved_dropout_state(loaded):
  """The dropout generator's state variable of a loaded encoder, or None:
  the restored generator is a plain trackable, its state a checkpoint
  dependency (`tf.train.TrackableView`) under the name a
  `tf.random.Generator` saves it by."""
  saved_rng = getattr(getattr(loaded, "encoder", None), "dropout_rng", None)
  if saved_rng is None:
    return None
  return tf.train.TrackableView(saved_rng).children(saved_rng).get("_state_var")
