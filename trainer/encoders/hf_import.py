r"""Converts a Hugging Face BERT checkpoint into TF Hub encoder/preprocessor.

`convert(hf_dir, output_dir)` (`python -m trainer.convert_hf --hf_dir=DIR
--output_dir=OUT`) reads DIR (a local folder or a gs:// path): its
`config.json` (model_type "bert"), `model.safetensors` (or
`pytorch_model.bin` when PyTorch is installed) and `vocab.txt` (else the
WordPiece vocabulary of `tokenizer.json`), with
`tokenizer_config.json` for lower-casing; other model types are refused
by name. OUT receives

    OUT/encoder        the TF Hub BERT encoder interface (encoders.native)
    OUT/preprocessor   the bert_en_uncased_preprocess interface
    OUT/conversion.json  what was read and how

to be trained with `--encoder_handle=OUT/encoder
--preprocessor_handle=OUT/preprocessor`. The weights go into the same
`bert.BertEncoder` the embedded demo uses; nothing needs PyTorch or
transformers at conversion time (the `safetensors` package reads the
weights; `hf_names` maps them).
"""

import json
import os

from absl import logging
import numpy as np
import tensorflow as tf

from trainer.data import preprocessing
from trainer.encoders import bert
from trainer.encoders import hf_names
from trainer.encoders import native
from trainer.foundation import errors

ConversionError = errors.ConversionError


def _read_pytorch_bin(path):
  try:
    import torch  # pylint: disable=g-import-not-at-top
  except ImportError:
    raise ConversionError(
        f"{path} is a PyTorch pickle and PyTorch is not installed. Install "
        "torch, or convert the checkpoint to model.safetensors.") from None
  with tf.io.gfile.GFile(path, "rb") as f:
    state = torch.load(f, map_location="cpu", weights_only=True)
  return {k: v.float().numpy() for k, v in state.items()}


# Why the model types people fine-tune most, other than BERT, are refused.
_BPE, _SPM = "a byte-level BPE tokenizer", "a SentencePiece tokenizer"
_UNSUPPORTED = dict(
    roberta=_BPE,
    camembert=_SPM,
    deberta=_BPE + ", disentangled attention",
    distilbert="no token types, other weight names",
    albert=_SPM,
    electra="other weight names",
    mpnet="relative attention",
    modernbert="rotary positions",
    **{
        "xlm-roberta": _SPM,
        "deberta-v2": _SPM + ", disentangled attention"
    })


def _read_json(path):
  with tf.io.gfile.GFile(path) as f:
    try:
      return json.load(f)
    except ValueError as e:
      raise ConversionError(f"{path} is not valid JSON: {e}") from None


def read_config(hf_dir):
  """config.json -> bert.BertConfig; unsupported models are errors."""
  path = os.path.join(hf_dir, "config.json")
  if not tf.io.gfile.exists(path):
    raise ConversionError(
        f"{path} not found: --hf_dir must be a Hugging Face checkpoint "
        "folder (config.json, model.safetensors, vocab.txt)")
  hf = _read_json(path)
  model_type = hf.get("model_type")
  if model_type != "bert":
    why = _UNSUPPORTED.get(model_type, "not a BERT architecture")
    raise ConversionError(
        f"{path}: model_type={model_type!r} is not supported ({why}); only "
        "BERT-architecture checkpoints with a WordPiece vocabulary "
        "(model_type 'bert': BERT, BGE, E5, MiniLM, ...) can be converted")
  position_type = hf.get("position_embedding_type", "absolute")
  if position_type != "absolute":
    raise ConversionError(
        f"{path}: position_embedding_type={position_type!r} is not "
        "supported; only 'absolute'")
  if hf.get("is_decoder") or hf.get("add_cross_attention"):
    raise ConversionError(f"{path}: decoder BERT models are not supported")
  activation = hf.get("hidden_act", "gelu")
  if activation not in bert.ACTIVATIONS:
    raise ConversionError(
        f"{path}: hidden_act={activation!r} is not supported; supported: "
        f"{sorted(bert.ACTIVATIONS)}")
  try:
    return bert.BertConfig(
        vocab_size=hf["vocab_size"],
        hidden_size=hf["hidden_size"],
        num_layers=hf["num_hidden_layers"],
        num_heads=hf["num_attention_heads"],
        intermediate_size=hf["intermediate_size"],
        max_position_embeddings=hf["max_position_embeddings"],
        type_vocab_size=hf.get("type_vocab_size", 2),
        dropout_rate=hf.get("hidden_dropout_prob", 0.1),
        layer_norm_eps=hf.get("layer_norm_eps", 1e-12),
        initializer_range=hf.get("initializer_range", 0.02),
        hidden_act=activation)
  except KeyError as e:
    raise ConversionError(f"{path} lacks the field {e}") from None


def read_weights(hf_dir):
  """The checkpoint's tensors, names without a `bert.` prefix."""
  safetensors = os.path.join(hf_dir, "model.safetensors")
  pickle = os.path.join(hf_dir, "pytorch_model.bin")
  if tf.io.gfile.exists(safetensors):
    tensors = hf_names.read_safetensors(safetensors)
  elif tf.io.gfile.exists(pickle):
    tensors = _read_pytorch_bin(pickle)
  else:
    raise ConversionError(
        f"no weights in {hf_dir}: expected model.safetensors (or "
        "pytorch_model.bin). Sharded checkpoints are not supported.")
  # Task models (BertForSequenceClassification, ...) nest the encoder.
  return {k.removeprefix("bert."): v for k, v in tensors.items()}


def _take(tensors, name):
  """Pops tensor `name` (or its gamma/beta spelling) from `tensors`."""
  for key in (name, hf_names.legacy_name(name)):
    if key in tensors:
      return tensors.pop(key)
  raise ConversionError(f"the checkpoint lacks the tensor {name}")


def _assign(variable, value, name, transpose=False):
  want = variable.shape.as_list()
  if transpose:
    want = want[::-1]
  if list(value.shape) != want:
    raise ConversionError(
        f"tensor {name} has shape {list(value.shape)}, config.json implies "
        f"{want}")
  variable.assign((value.T if transpose else value).astype(np.float32))


def load_weights(encoder, tensors):
  """Assigns HF BERT tensors to a `bert.BertEncoder` through the name table
  (`hf_names.bert_tensor_names`); returns notes.

  Every encoder variable must be covered, except the pooler, which
  sentence-embedding checkpoints may lack (it keeps its random init and is
  trained by fine-tuning). Tensors left over (MLM or NSP heads, buffers)
  are listed in the notes.
  """
  tensors = dict(tensors)
  notes = []
  has_pooler = hf_names.POOLER + ".weight" in tensors
  if not has_pooler:
    notes.append("no pooler in the checkpoint: pooler initialized randomly")
  for name, variable, transposed in hf_names.bert_tensor_names(encoder):
    if has_pooler or not name.startswith(hf_names.POOLER):
      _assign(variable, _take(tensors, name), name, transposed)
  extra_layer = f"encoder.layer.{len(encoder.layers)}."
  if any(k.startswith(extra_layer) for k in tensors):
    raise ConversionError(
        f"the checkpoint has more layers than num_hidden_layers="
        f"{len(encoder.layers)}")
  unused = sorted(k for k in tensors if not k.endswith("position_ids"))
  if unused:
    notes.append(f"unused tensors: {', '.join(unused)}")
  return notes


def _tokenizer_json(hf_dir):
  path = os.path.join(hf_dir, "tokenizer.json")
  return _read_json(path) if tf.io.gfile.exists(path) else {}


def read_vocab(hf_dir):
  """The WordPiece vocabulary (tokens by id): vocab.txt, else the
  WordPiece model of tokenizer.json (transformers 5 saves only that)."""
  vocab_file = os.path.join(hf_dir, "vocab.txt")
  if tf.io.gfile.exists(vocab_file):
    with tf.io.gfile.GFile(vocab_file) as f:
      return [line.rstrip("\n") for line in f]
  model = _tokenizer_json(hf_dir).get("model") or {}
  if model.get("type") != "WordPiece":
    raise ConversionError(
        f"{vocab_file} not found and {hf_dir} has no WordPiece "
        "tokenizer.json: the WordPiece vocabulary is needed for the "
        "preprocessor")
  by_id = {i: t for t, i in model["vocab"].items()}
  if sorted(by_id) != list(range(len(by_id))):
    raise ConversionError(f"{hf_dir}/tokenizer.json: the vocabulary's ids "
                          "are not 0..n-1")
  return [by_id[i] for i in range(len(by_id))]


def read_tokenizer_settings(hf_dir):
  """Lower-casing and accent stripping as the checkpoint's tokenizer does:
  tokenizer_config.json's fields, else tokenizer.json's BertNormalizer,
  else BertTokenizer's defaults. A tokenizer other than BERT's WordPiece
  (its class, or tokenizer.json's model) is an error."""
  path = os.path.join(hf_dir, "tokenizer_config.json")
  settings = _read_json(path) if tf.io.gfile.exists(path) else {}
  tokenizer = _tokenizer_json(hf_dir)
  kind = (tokenizer.get("model") or {}).get("type", "WordPiece")
  name = settings.get("tokenizer_class") or "BertTokenizer"
  if kind != "WordPiece" or name not in _WORDPIECE_CLASSES:
    raise ConversionError(
        f"{hf_dir}: its tokenizer ({name}, a {kind} model) is not BERT's "
        "WordPiece; it is not supported")
  if settings.get("tokenize_chinese_chars") is False:
    raise ConversionError(
        f"{path}: tokenize_chinese_chars=false is not supported")
  norm = tokenizer.get("normalizer") or {}
  if norm.get("type") != "BertNormalizer":
    norm = {}
  lower_case = settings.get("do_lower_case", norm.get("lowercase"))
  lower_case = True if lower_case is None else bool(lower_case)
  strip_accents = settings.get("strip_accents", norm.get("strip_accents"))
  return dict(
      lower_case=lower_case,
      strip_accents=lower_case
      if strip_accents is None else bool(strip_accents),
      source=path if settings else
      ("tokenizer.json" if norm else "BertTokenizer defaults"))


# Tokenizer classes whose tokenizer.json (or vocab.txt) is BERT's WordPiece;
# PreTrainedTokenizerFast is what trainer.export --format=huggingface writes.
_WORDPIECE_CLASSES = ("BertTokenizer", "BertTokenizerFast",
                      "PreTrainedTokenizerFast", "TokenizersBackend")


def convert(hf_dir, output_dir):
  """Writes OUT/encoder, OUT/preprocessor and OUT/conversion.json.

  Returns:
    The conversion record (also written as conversion.json).
  """
  config = read_config(hf_dir)
  vocab = read_vocab(hf_dir)
  if len(vocab) != config.vocab_size:
    raise ConversionError(
        f"{hf_dir}: the vocabulary has {len(vocab)} tokens but config.json "
        f"says vocab_size={config.vocab_size}")
  settings = read_tokenizer_settings(hf_dir)
  encoder = bert.BertEncoder(config)
  notes = load_weights(encoder, read_weights(hf_dir))
  for note in notes:
    logging.warning("%s", note)
  tf.io.gfile.makedirs(output_dir)
  # The preprocessor copies it as its asset.
  vocab_file = os.path.join(output_dir, "vocab.txt")
  with tf.io.gfile.GFile(vocab_file, "w") as f:
    f.write("\n".join(vocab) + "\n")
  native.save_encoder(encoder, os.path.join(output_dir, "encoder"))
  # The vocab is copied next to the preprocessor's SavedModel as its asset.
  preprocessor = preprocessing.BertPreprocessor(
      vocab_file,
      lower_case=settings["lower_case"],
      strip_accents=settings["strip_accents"],
      default_seq_length=min(128, config.max_position_embeddings))
  preprocessing.save_preprocessor(preprocessor,
                                  os.path.join(output_dir, "preprocessor"))
  record = dict(
      hf_dir=hf_dir,
      config=json.loads(config.to_json()),
      lower_case=settings["lower_case"],
      strip_accents=settings["strip_accents"],
      tokenizer_settings_from=settings["source"],
      notes=notes)
  with tf.io.gfile.GFile(os.path.join(output_dir, "conversion.json"), "w") as f:
    f.write(json.dumps(record, indent=2) + "\n")
  return record
