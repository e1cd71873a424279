"""Encoder handles: loaded (a URL, a gs:// path, a local folder or the
embedded 'demo'), checked against each other and the flags, and prepared
for the run's precision.

The encoder is whatever `hub.load(handle)` returns. No Keras wrapper:
`hub.KerasLayer` breaks under Keras 3, and the train step only needs a
callable and its `trainable_variables`. The fit checks (vocabulary against
the embedding table, --seq_length against the position embeddings) are
shared by training, export and `trainer.doctor`.
"""

import dataclasses
import re
import warnings

import tensorflow as tf

with warnings.catch_warnings():
  # tensorflow_hub 0.16 imports pkg_resources to compare versions, which
  # setuptools >= 81 deprecates with a UserWarning at every start; nothing
  # of tensorflow_hub's behaviour depends on it.
  warnings.filterwarnings(
      "ignore", message="pkg_resources is deprecated", category=UserWarning)
  import tensorflow_hub as hub

from trainer.data import preprocessing
from trainer.encoders import demo
from trainer.encoders import garden
from trainer.encoders import native
from trainer.foundation import config as config_lib
from trainer.foundation import errors

HandleError = errors.HandleError


def load_handle(handle, flag, io_device=None):
  """`hub.load` with a clear error; `io_device` for TPUs (host I/O)."""
  options = None
  if io_device:
    options = tf.saved_model.LoadOptions(experimental_io_device=io_device)
  try:
    return hub.load(handle, options=options)
  except Exception as e:  # Network, format and permission errors alike.
    raise HandleError(
        f"cannot load --{flag}={handle}: {errors.first_line(e)}. Check the "
        "handle; offline, use a local SavedModel folder (see "
        "trainer.convert_hf) or the embedded 'demo'.") from None


def local_folder(handle, flag):
  """The folder a handle's SavedModel is read from: the handle itself, or
  for a URL the TF Hub cache's copy (downloaded if missing)."""
  try:
    return hub.resolve(handle)
  except Exception as e:  # Network, format and permission errors alike.
    raise HandleError(
        f"cannot resolve --{flag}={handle}: {errors.first_line(e)}") from None


def _check_api(encoder, preprocessor, encoder_handle, preprocessor_handle):
  """Each handle has the interface it is loaded for (swapped handles, or an
  unrelated SavedModel, would fail deep inside TensorFlow)."""
  if not (callable(encoder) and hasattr(encoder, "trainable_variables")):
    raise HandleError(
        f"--encoder_handle={encoder_handle} is not a TF Hub encoder (it "
        "has no trainable variables to call and fine-tune)" +
        ("; it looks like a preprocessor: are the two handles swapped?"
         if hasattr(encoder, "tokenize") else ""))
  for name in ("tokenize", "bert_pack_inputs"):
    if not hasattr(preprocessor, name):
      raise HandleError(
          f"--preprocessor_handle={preprocessor_handle} is not a BERT "
          f"preprocessor (it has no `{name}`)" +
          ("; it looks like an encoder: are the two handles swapped?"
           if hasattr(preprocessor, "trainable_variables") else ""))


def load(encoder_handle,
         preprocessor_handle,
         strategy,
         io_device=None,
         demo_cache_dir=""):
  """Loads the preprocessor (host) and the encoder (under `strategy`).

  'demo' handles are the embedded demo's, built on first use.

  Returns:
    (preprocessor, encoder).
  """
  paths = (encoder_handle, preprocessor_handle)
  if encoder_handle == config_lib.DEMO:
    assets = demo.ensure_assets(demo_cache_dir or None)
    paths = (assets["encoder"], assets["preprocessor"])
  with tf.device("/cpu:0"):
    preprocessor = load_handle(paths[1], "preprocessor_handle")
  with strategy.scope():
    encoder = load_handle(paths[0], "encoder_handle", io_device=io_device)
  _check_api(encoder, preprocessor, encoder_handle, preprocessor_handle)
  return preprocessor, encoder


def load_on_host(encoder_handle, io_device=None, demo_cache_dir=""):
  """The encoder of `encoder_handle` loaded on this host's CPU."""
  if encoder_handle == config_lib.DEMO:
    encoder_handle = demo.ensure_assets(demo_cache_dir or None)["encoder"]
  with tf.device("/cpu:0"):
    return load_handle(encoder_handle, "encoder_handle", io_device)


def load_checked(encoder_handle,
                 preprocessor_handle,
                 strategy,
                 *,
                 seq_length,
                 pairs=False,
                 io_device=None,
                 demo_cache_dir=""):
  """The handles, loaded (`load`) and checked against each other,
  `seq_length` and, for sentence `pairs`, pair packing (`check_fit`,
  `check_pairs`): (preprocessor, encoder)."""
  preprocessor, encoder = load(encoder_handle, preprocessor_handle, strategy,
                               io_device, demo_cache_dir)
  check_fit(encoder, preprocessor, seq_length, preprocessor_handle)
  if pairs:
    check_pairs(preprocessor, preprocessor_handle)
  return preprocessor, encoder


def check_pairs(preprocessor, handle):
  """HandleError unless the preprocessor packs two segments (a SavedModel
  saved with a one-segment `bert_pack_inputs` signature only cannot)."""
  tokens = preprocessor.tokenize(tf.constant(["a"]))
  try:
    preprocessor.bert_pack_inputs([tokens, tokens], seq_length=8)
  except (ValueError, TypeError, tf.errors.OpError) as e:
    raise HandleError(
        f"--preprocessor_handle={handle} cannot pack sentence pairs "
        f"({errors.first_line(e)[:120]}); use TF Hub's bert_*_preprocess or "
        "convert the model again (trainer.convert_hf saves pair packing)"
    ) from None


def variable(encoder, pattern):
  """The first 2-D variable of `encoder` whose name matches `pattern`."""
  for v in encoder.variables:
    if re.search(pattern, v.name) and len(v.shape) == 2:
      return v
  return None


def max_positions(encoder):
  """Number of position embeddings of a loaded BERT encoder, or None."""
  v = variable(encoder, r"position_embedding")
  return None if v is None else int(v.shape[0])


def word_embedding_rows(encoder):
  """Vocabulary size of a loaded BERT encoder's word embeddings, or None."""
  v = variable(encoder, r"word_embeddings")
  return None if v is None else int(v.shape[0])


@dataclasses.dataclass(frozen=True)
class FitCheck:
  """One way the handles must fit each other and the flags."""

  name: str
  ok: bool
  detail: str
  error: str  # the one-line error when not ok: the flag and the fix


def fit_checks(encoder, preprocessor, seq_length, preprocessor_handle):
  """The vocabulary fits the embedding table; --seq_length the positions."""
  vocab = preprocessing.vocab_size(preprocessor)
  rows = word_embedding_rows(encoder)
  positions = max_positions(encoder)
  return [
      FitCheck(
          "vocabulary", None in (rows, vocab) or vocab <= rows,
          f"preprocessor vocabulary {vocab}, encoder embedding table {rows}",
          f"--preprocessor_handle={preprocessor_handle} is invalid: its "
          f"vocabulary has {vocab} tokens but the encoder's embedding table "
          f"has {rows} rows; use the preprocessor that matches the encoder"),
      FitCheck(
          "seq_length", positions is None or seq_length <= positions,
          f"--seq_length={seq_length}, encoder positions {positions}",
          f"--seq_length={seq_length} is invalid: the encoder has "
          f"{positions} position embeddings; use at most {positions}"),
  ]


def check_fit(encoder, preprocessor, seq_length, preprocessor_handle):
  """Raises ConfigError naming the first way the handles do not fit."""
  for check in fit_checks(encoder, preprocessor, seq_length,
                          preprocessor_handle):
    if not check.ok:
      raise errors.ConfigError(check.error)


def is_own_encoder(encoder):
  """Saved by this project (it carries its config and can be rebuilt), or
  rebuilt already (`native.NativeEncoder`)."""
  return (isinstance(encoder, native.NativeEncoder) or
          native.saved_config(encoder) is not None)


def rebuilt(loaded, handle):
  """A `hub.load`ed encoder rebuilt as Python code (`native.NativeEncoder`,
  float32; create it where its variables belong: under the strategy's
  scope), or None for an opaque SavedModel: this project's from its saved
  config, a Model Garden BERT's (TF Hub's experts/bert, bert_en_uncased_L-*)
  with its weights copied in (`garden.rebuild`). Shared rows need this:
  the saved graphs take one example a row.

  Raises:
    ConversionError: named like a Model Garden BERT, but no BERT of ours
      reproduces its outputs.
  """
  if isinstance(loaded, native.NativeEncoder):
    return loaded
  if native.saved_config(loaded) is not None:
    return native.NativeEncoder.load(loaded)
  encoder = garden.rebuild(loaded, handle)
  return None if encoder is None else native.NativeEncoder(encoder)


def prepare_encoder(encoder, route, strategy):
  """The encoder the run trains, per its `precision.Route`.

  This project's encoders rebuilt in Python (`native.NativeEncoder`: any
  precision, XLA, example-keyed dropout; an encoder rebuilt for shared
  rows already is one, set to compute so); oneDNN's bfloat16
  rewrite switched on for a foreign encoder on a CPU that runs it,
  grappler's CUDA float16 rewrite for one on a GPU.
  """
  if isinstance(encoder, native.NativeEncoder):
    encoder.compute_dtype = route.compute_dtype
    encoder.hashed_dropout = route.hashed_dropout
  elif route.rebuild:
    with strategy.scope():
      encoder = native.NativeEncoder.load(
          encoder, route.compute_dtype, hashed_dropout=route.hashed_dropout)
  if route.onednn_rewrite:
    tf.config.optimizer.set_experimental_options(
        {"auto_mixed_precision_onednn_bfloat16": True})
  if route.cuda_float16_rewrite:
    tf.config.optimizer.set_experimental_options({"auto_mixed_precision": True})
  return encoder
