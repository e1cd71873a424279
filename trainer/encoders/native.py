"""This project's encoders as SavedModels, and loaded back as Python code.

`save_encoder` writes a `bert.BertEncoder` in the TF Hub encoder format
(callable with `(inputs, training=...)`, the Reusable SavedModel
attributes, `get_config_json`); `saved_config` reads the config back, and
`NativeEncoder` rebuilds the Python encoder around a loaded one's values, so
training runs the Python code (bfloat16 matmuls, XLA, dropout keyed by
example, shared rows) while checkpoints and exports keep the loaded
object's layout.
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
  """A loaded encoder of this project's format, rebuilt as Python code.

  A SavedModel's concrete functions are fixed float32 graphs, and XLA cannot
  compile the gradient of a loaded function without recompiling at every
  step (BUILD_NOTES.md, "XLA on CPU/GPU"), and their dropout masks are
  drawn per element of whatever layout they get. So the trainer always
  rebuilds the Python `BertEncoder` (bfloat16 matmuls, XLA, masks keyed by
  example, shared rows) from the saved config and copies the loaded values
  in (create it under the strategy scope, like the loaded one). Its
  attributes mirror the loaded object's (`encoder`, `variables`,
  `trainable_variables` in the same order), so checkpoints written either
  way restore into the other, and an export rebuilt from the SavedModel
  reads them.

  Args:
    loaded: the `hub.load`ed encoder (it must have `get_config_json`).
    compute_dtype: "float32" (the saved graph's math, bit for bit) or
      "bfloat16" / "float16" (matmuls in that dtype; see `bert._matmul`).
    hashed_dropout: draw dropout masks keyed by example (`dropout`).
  """

  def __init__(self, loaded, compute_dtype="float32", hashed_dropout=False):
    config = saved_config(loaded)
    if config is None:
      raise ValueError(
          "not an encoder saved by trainer.encoders.native.save_encoder")
    self.compute_dtype = compute_dtype
    self.hashed_dropout = hashed_dropout
    self.encoder = bert.BertEncoder(config)
    own = {v.name: v for v in self.encoder.variables}
    if sorted(own) != sorted(v.name for v in loaded.variables):
      raise ValueError("the saved encoder's variables do not match its "
                       "config")
    for v in loaded.variables:
      own[v.name].assign(v)
    # Dropout's random state, so the first masks equal a saved-graph run's.
    saved_rng = getattr(getattr(loaded, "encoder", None), "dropout_rng", None)
    state = getattr(saved_rng, "_state_var", None)
    if state is not None:
      self.encoder.dropout_rng.state.assign(state)
    self.variables = [own[v.name] for v in loaded.variables]
    self.trainable_variables = [own[v.name] for v in loaded.trainable_variables]
    self.regularization_losses = []

  @classmethod
  def around(cls, encoder, compute_dtype="float32", hashed_dropout=False):
    """A `BertEncoder` built elsewhere (a Model Garden encoder rebuilt,
    `garden.rebuild`) as a NativeEncoder: its variables in its own order
    (a run that trains it checkpoints them so; `trainer.export` rebuilds
    it the same way, from config.json's `shared_rows`)."""
    return cls._view(encoder, encoder.variables, encoder.trainable_variables,
                     compute_dtype, hashed_dropout)

  @classmethod
  def _view(cls,
            encoder,
            variables,
            trainable_variables,
            compute_dtype="float32",
            hashed_dropout=False):
    """A NativeEncoder around `encoder` with these variable lists, built
    without a loaded object."""
    native = cls.__new__(cls)
    native.compute_dtype, native.hashed_dropout = compute_dtype, hashed_dropout
    native.encoder = encoder
    native.variables = list(variables)
    native.trainable_variables = list(trainable_variables)
    native.regularization_losses = []
    return native

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
    view = self._view(self.encoder, self.variables, self.trainable_variables)
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
    return self._view(fresh, [own[v.name] for v in self.variables],
                      [own[v.name] for v in self.trainable_variables])
