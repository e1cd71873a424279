r"""Export a trained classifier in the Hugging Face format.

`export_run(model_dir, output_dir)` (`python -m trainer.export
--model_dir=RUN --format=huggingface --output_dir=DIR`,
`trainer.export_huggingface(...)`) rebuilds a run's classifier from its
folder, as the SavedModel export does, and writes DIR:

    config.json              BertForSequenceClassification: sizes,
                             id2label/label2id, problem_type
    model.safetensors        encoder, pooler and the fine-tuned head
    vocab.txt, tokenizer.json, tokenizer_config.json,
    special_tokens_map.json  the run's preprocessing, as `tokenizers` data

so that `AutoModelForSequenceClassification.from_pretrained(DIR)` and
`AutoTokenizer.from_pretrained(DIR)` load it offline with no code of this
project. tokenizer.json spells out this trainer's text path (HTML entities,
whitespace and control characters, lower-casing, accents, the word split of
tensorflow_text's BertTokenizer) as normalizers and pre-tokenizers, so
AutoTokenizer gives the ids the trainer gives; tokenizer_config.json names
`PreTrainedTokenizerFast`, which loads tokenizer.json as written
(`BertTokenizer` would rebuild its own normalizer from do_lower_case).

Encoders: this project's (the demo's, `trainer.convert_hf`'s) and TF Hub
BERT SavedModels in the Model Garden layout (`transformer/layer_N/...`),
whose activation is found by recomputing their outputs. Anything else is an
`ExportError` before anything is written. DIR is written to a temporary
sibling and renamed into place; an existing non-empty DIR is refused.
"""

import dataclasses
import json
import os
import re
import struct
import uuid

from absl import logging
import numpy as np
import tensorflow as tf

from trainer.base import errors
from trainer.base import tasks
from trainer.data import preprocessing
from trainer.model import bert
from trainer.model import hf_import
from trainer.serving import export

ExportError = errors.ExportError


def _hf_dense(out, prefix, dense):
  # PyTorch's Linear keeps [out, in]; ours is [in, out].
  out[prefix + ".weight"] = np.ascontiguousarray(dense.kernel.numpy().T)
  out[prefix + ".bias"] = dense.bias.numpy()


def _hf_norm(out, prefix, norm):
  out[prefix + ".weight"] = norm.gamma.numpy()
  out[prefix + ".bias"] = norm.beta.numpy()


def hf_tensors(encoder, kernel, bias):
  """The BertForSequenceClassification state dict of `bert.BertEncoder`
  `encoder` under the head (`kernel` [hidden, classes], `bias`
  [classes]): {name: float32 np.ndarray}."""
  out = {
      "bert.embeddings.word_embeddings.weight":
          encoder.word_embeddings.numpy(),
      "bert.embeddings.position_embeddings.weight":
          encoder.position_embeddings.numpy(),
      "bert.embeddings.token_type_embeddings.weight":
          encoder.type_embeddings.numpy(),
  }
  _hf_norm(out, "bert.embeddings.LayerNorm", encoder.embeddings_layer_norm)
  for i, layer in enumerate(encoder.layers):
    for ours, theirs in hf_import.LAYER_PARTS:
      part = getattr(layer, ours)
      name = f"bert.encoder.layer.{i}.{theirs}"
      if hasattr(part, "gamma"):
        _hf_norm(out, name, part)
      else:
        _hf_dense(out, name, part)
  _hf_dense(out, "bert.pooler.dense", encoder.pooler)
  out["classifier.weight"] = np.ascontiguousarray(np.asarray(kernel).T)
  out["classifier.bias"] = np.asarray(bias)
  return {k: v.astype(np.float32) for k, v in out.items()}


def safetensors_bytes(tensors):
  """{name: np.ndarray float32} as a .safetensors file: an 8-byte
  little-endian header size, the JSON header (dtype, shape, byte offsets),
  then the raw little-endian data."""
  header, offset, blobs = {"__metadata__": {"format": "pt"}}, 0, []
  for name in sorted(tensors):
    data = np.ascontiguousarray(tensors[name], dtype="<f4").tobytes()
    header[name] = dict(
        dtype="F32",
        shape=list(tensors[name].shape),
        data_offsets=[offset, offset + len(data)])
    offset += len(data)
    blobs.append(data)
  raw = json.dumps(header, separators=(",", ":")).encode("utf-8")
  raw += b" " * (-len(raw) % 8)  # the data starts 8-byte aligned
  return struct.pack("<Q", len(raw)) + raw + b"".join(blobs)


def hf_config(config, task, pad_id, classifier_dropout):
  """config.json of a BertForSequenceClassification of `bert.BertConfig`
  `config` for Task `task`."""
  names = list(task.class_names)
  return dict(
      architectures=["BertForSequenceClassification"],
      model_type="bert",
      vocab_size=config.vocab_size,
      hidden_size=config.hidden_size,
      num_hidden_layers=config.num_layers,
      num_attention_heads=config.num_heads,
      intermediate_size=config.intermediate_size,
      hidden_act=config.hidden_act,
      hidden_dropout_prob=config.dropout_rate,
      attention_probs_dropout_prob=config.dropout_rate,
      max_position_embeddings=config.max_position_embeddings,
      type_vocab_size=config.type_vocab_size,
      initializer_range=config.initializer_range,
      layer_norm_eps=config.layer_norm_eps,
      position_embedding_type="absolute",
      pad_token_id=pad_id,
      classifier_dropout=classifier_dropout,
      id2label={
          str(i): n for i, n in enumerate(names)
      },
      label2id={
          n: i for i, n in enumerate(names)
      },
      problem_type="regression"
      if task.regression else "single_label_classification",
      dtype="float32")


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


def garden_encoder(loaded, handle):
  """The `bert.BertEncoder` equal to a Model Garden BERT encoder, or None
  for one not named like it: with the tanh GELU (Model Garden's default),
  else the exact one, whichever reproduces its outputs within 1e-4;
  neither (pre-LayerNorm, another activation) is an ExportError."""
  best, inputs = float("inf"), None
  for activation in ("gelu_new", "gelu"):
    encoder = hf_import.model_garden_encoder(loaded, handle, activation)
    if encoder is None:
      return None
    inputs = inputs or _probe_inputs(encoder.config)
    best = min(best, difference(loaded, encoder, inputs))
    if best <= 1e-4:
      return encoder
  raise ExportError(
      f"--encoder_handle={handle}: no post-LayerNorm BERT with a GELU "
      f"feed-forward reproduces its outputs (max difference {best:.2g}); its "
      "activation or layout is not supported by the Hugging Face export")


def bert_encoder(loaded, handle):
  """The `bert.BertEncoder` equal to the run's loaded encoder: this
  project's (rebuilt from its saved config) or a Model Garden BERT's; an
  ExportError for any other."""
  if bert.saved_config(loaded) is not None:
    return bert.NativeEncoder(loaded).encoder
  encoder = garden_encoder(loaded, handle)
  if encoder is None:
    sample = next((v.name for v in loaded.variables), "none")
    raise ExportError(
        f"--encoder_handle={handle} is neither this project's encoder nor a "
        f"Model Garden BERT (its variables, e.g. {sample!r}, have no "
        "Hugging Face names); it is not supported by the Hugging Face export")
  return encoder


def _ids(preprocessor, texts):
  tokens = preprocessor.tokenize(preprocessing.clean_text(tf.constant(texts)))
  return tokens.merge_dims(-2, -1).to_list()


def text_settings(preprocessor, vocab):
  """(lower_case, strip_accents) of a loaded preprocessor, found by
  tokenizing a word of its vocabulary upper-cased and accented: a
  lower-casing one gives the word's own id for "WORD", an accent-stripping
  one for "wórd"."""
  words = [t for t in vocab if re.fullmatch(r"[a-z]*[aeiou][a-z]*", t)]
  words = [w for w in words if len(w) >= 3] or words
  if not words:
    raise ExportError("the preprocessor's vocabulary has no plain lower-case "
                      "word to tell its lower-casing by")
  word = words[0]
  accented = re.sub("[aeiou]", lambda m: m.group(0) + "\u0301", word, 1)
  plain, upper, accent = _ids(preprocessor, [word, word.upper(), accented])
  return upper == plain, accent == plain


# What tensorflow_text's BertTokenizer splits off as a word of its own:
# ASCII punctuation, Unicode punctuation and CJK ideographs.
_ISOLATED = (r"[\x{21}-\x{2F}\x{3A}-\x{40}\x{5B}-\x{60}\x{7B}-\x{7E}\p{P}"
             r"\x{4E00}-\x{9FFF}\x{3400}-\x{4DBF}\x{20000}-\x{2A6DF}"
             r"\x{2A700}-\x{2B73F}\x{2B740}-\x{2B81F}\x{2B820}-\x{2CEAF}"
             r"\x{F900}-\x{FAFF}\x{2F800}-\x{2FA1F}]")


def _replace(pattern, content, regex=True):
  return dict(
      type="Replace",
      pattern={"Regex" if regex else "String": pattern},
      content=content)


def normalizers(lower_case, strip_accents):
  """The trainer's text path before WordPiece (`preprocessing.clean_text`,
  then `preprocessing.normalize`) as `tokenizers` normalizers."""
  # pylint: disable-next=protected-access
  entities = preprocessing._ENTITIES  # the one table clean_text uses
  steps = [_replace(entity, char, regex=False) for entity, char in entities]
  steps += [
      _replace(r"[\t\n\r\p{Zs}]", " "),
      _replace(r"[\p{Cc}\p{Cf}\x{FFFD}]", "")
  ]
  if lower_case:
    steps += [_replace("\u03a3", "\u03c3", regex=False), dict(type="Lowercase")]
  if strip_accents:
    steps += [dict(type="NFD"), _replace(r"\p{Mn}", "")]
  return dict(type="Sequence", normalizers=steps)


def _split(pattern, behavior):
  return dict(
      type="Split",
      pattern=dict(Regex=pattern),
      behavior=behavior,
      invert=False)


def tokenizer_json(vocab, special, lower_case, strip_accents):
  """tokenizer.json (a dict) of the trainer's preprocessor over `vocab`
  (tokens by id) with the special token ids `special`."""
  ids = {}
  for i, token in enumerate(vocab):
    ids.setdefault(token, i)
  cls, sep = vocab[special["start_of_sequence_id"]], vocab[
      special["end_of_segment_id"]]
  template = lambda *parts: [{
      "SpecialToken": dict(id=p[0], type_id=p[1])
  } if p[0] in (cls, sep) else {
      "Sequence": dict(id=p[0], type_id=p[1])
  } for p in parts]
  return {
      "version":
          "1.0",
      "truncation":
          None,
      "padding":
          None,
      "added_tokens": [
          dict(
              id=ids[t],
              content=t,
              single_word=False,
              lstrip=False,
              rstrip=False,
              normalized=False,
              special=True) for t in _special_names(vocab, special).values()
      ],
      "normalizer":
          normalizers(lower_case, strip_accents),
      "pre_tokenizer":
          dict(
              type="Sequence",
              pretokenizers=[
                  _split(r"[\t\n\f\r ]+", "Removed"),
                  _split(_ISOLATED, "Isolated")
              ]),
      "post_processor":
          dict(
              type="TemplateProcessing",
              single=template((cls, 0), ("A", 0), (sep, 0)),
              pair=template((cls, 0), ("A", 0), (sep, 0), ("B", 1), (sep, 1)),
              special_tokens={
                  t: dict(id=t, ids=[ids[t]], tokens=[t]) for t in (cls, sep)
              }),
      "decoder":
          dict(type="WordPiece", prefix="##", cleanup=True),
      "model":
          dict(
              type="WordPiece",
              unk_token="[UNK]",
              continuing_subword_prefix="##",
              max_input_chars_per_word=100,
              vocab=ids),
  }


def _special_names(vocab, special):
  return dict(
      unk_token="[UNK]",
      sep_token=vocab[special["end_of_segment_id"]],
      pad_token=vocab[special["padding_id"]],
      cls_token=vocab[special["start_of_sequence_id"]],
      mask_token=vocab[special["mask_id"]])


def tokenizer_config(vocab, special, lower_case, strip_accents, max_length):
  """tokenizer_config.json: `PreTrainedTokenizerFast` (tokenizer.json as
  written), the special tokens matched as text (a tweet's "[SEP]" is
  split, as the trainer splits it), the token types returned."""
  return dict(
      _special_names(vocab, special),
      tokenizer_class="PreTrainedTokenizerFast",
      do_lower_case=lower_case,
      strip_accents=strip_accents,
      model_max_length=max_length,
      split_special_tokens=True,
      model_input_names=["input_ids", "token_type_ids", "attention_mask"],
      padding_side="right",
      truncation_side="right",
      clean_up_tokenization_spaces=False)


def read_vocab(preprocessor, handle):
  """The loaded preprocessor's vocabulary (tokens by id): its vocab_file
  asset (this project's), else the SavedModel's assets/vocab.txt."""
  asset = getattr(getattr(preprocessor, "vocab_file", None), "asset_path", None)
  path = (
      asset.numpy().decode("utf-8") if asset is not None else os.path.join(
          handle, "assets", "vocab.txt"))
  if not tf.io.gfile.exists(path):
    raise ExportError(f"--preprocessor_handle={handle} has no WordPiece "
                      "vocabulary (assets/vocab.txt); it is not supported by "
                      "the Hugging Face export")
  with tf.io.gfile.GFile(path) as f:
    return [line.rstrip("\n") for line in f]


# Texts the exported tokenizer is checked on before anything is written.
_PROBES = (
    "Caf\u00e9 &amp; cr\u00e8me &lt;3 &quot;ok&quot;",
    "\uff48\uff49 Stra\u00dfe \u0130stanbul \u03a3\u039f\u03a3",
    "tab\tnbsp\u00a0zero\u200bwidth\ufeff bom \x07bell",
    "\u65e5\u672c\u8a9e\u4e2d\u6587 \u041f\u0440\u0438\u0432\u0435\u0442",
    "I \u2764\ufe0f NY \U0001f600 #x [CLS] [SEP] [MASK] a|b ~`^",
    "line\u2028sep \u0915\u093f \u00c5ngstr\u00f6m", "", "Hello, World!")


def check_tokenizer(preprocessor, tokenizer):
  """ExportError unless `tokenizer` (tokenizer.json, a dict) gives the
  loaded preprocessor's ids on `_PROBES`; skipped, and said, when the
  `tokenizers` package is not installed."""
  try:
    import tokenizers  # pylint: disable=g-import-not-at-top
  except ImportError:
    logging.warning("tokenizers is not installed: the exported tokenizer "
                    "was not checked against the preprocessor")
    return
  backend = tokenizers.Tokenizer.from_str(json.dumps(tokenizer))
  backend.encode_special_tokens = True
  want = _ids(preprocessor, list(_PROBES))
  for text, ids in zip(_PROBES, want):
    got = backend.encode(text, add_special_tokens=False).ids
    if got != ids:
      raise ExportError(
          f"the preprocessor tokenizes {text!r} as {ids}, a tokenizer.json "
          f"of this trainer's text path as {got}: its text normalization "
          "(TF Hub's bert_*_preprocess?) is not supported by the Hugging "
          "Face export")


def _files(c, task, encoder, model, preprocessor):
  """{file name: bytes} of the Hugging Face folder."""
  vocab = read_vocab(preprocessor, c.preprocessor_handle)
  special = preprocessing.special_tokens(preprocessor)
  lower_case, strip_accents = text_settings(preprocessor, vocab)
  tokenizer = tokenizer_json(vocab, special, lower_case, strip_accents)
  check_tokenizer(preprocessor, tokenizer)
  as_json = lambda d: json.dumps(d, indent=2).encode("utf-8") + b"\n"
  return {
      "vocab.txt": ("\n".join(vocab) + "\n").encode("utf-8"),
      "tokenizer.json":
          as_json(tokenizer),
      "tokenizer_config.json":
          as_json(
              tokenizer_config(vocab, special, lower_case, strip_accents,
                               c.seq_length)),
      "special_tokens_map.json":
          as_json(_special_names(vocab, special)),
      "model.safetensors":
          safetensors_bytes(
              hf_tensors(encoder, model.kernel.numpy(), model.bias.numpy())),
      # Last: a folder is a model once config.json is there.
      "config.json":
          as_json(
              hf_config(encoder.config, task, special["padding_id"],
                        c.dropout_rate)),
  }


def _check_target(output_dir):
  if not output_dir:
    raise errors.ConfigError("--output_dir is required with "
                             "--format=huggingface")
  if tf.io.gfile.exists(output_dir) and tf.io.gfile.listdir(output_dir):
    raise ExportError(f"--output_dir={output_dir} exists and is not empty; "
                      "give a new or empty folder")


def write_folder(files, output_dir):
  """Writes `files` into a temporary sibling of output_dir, then renames
  it into place (config.json written last), so an interrupted export never
  leaves a folder that loads. Returns output_dir."""
  _check_target(output_dir)
  parent = os.path.dirname(output_dir.rstrip("/")) or "."
  tf.io.gfile.makedirs(parent)
  tmp = os.path.join(
      parent, f".tmp-{os.path.basename(output_dir.rstrip('/'))}-"
      f"{uuid.uuid4().hex[:8]}")
  tf.io.gfile.makedirs(tmp)
  try:
    for name, data in files.items():
      with tf.io.gfile.GFile(os.path.join(tmp, name), "wb") as f:
        f.write(data)
    if tf.io.gfile.exists(output_dir):
      tf.io.gfile.rmtree(output_dir)  # empty, checked above
    tf.io.gfile.rename(tmp, output_dir)
    if not tf.io.gfile.exists(os.path.join(output_dir, "config.json")):
      # A filesystem that renames only the folder entry (ram://, object
      # stores): copy, config.json last (it is last in `files`).
      for name in files:
        tf.io.gfile.copy(
            os.path.join(tmp, name),
            os.path.join(output_dir, name),
            overwrite=True)
  finally:
    if tf.io.gfile.exists(tmp):
      tf.io.gfile.rmtree(tmp)
  return output_dir


def export_run(model_dir,
               output_dir,
               checkpoint="",
               checkpoint_dir="",
               demo_cache_dir=None):
  """Exports a checkpoint of the training run in `model_dir` (`checkpoint`,
  else the best, else the newest; read from `checkpoint_dir`, default
  model_dir/checkpoints) to `output_dir` in the Hugging Face format;
  returns output_dir. What cannot be exported is an ExportError before
  anything is written."""
  _check_target(output_dir)
  c = export.read_run_config(model_dir)
  c = dataclasses.replace(
      c,
      checkpoint_dir=checkpoint_dir,
      demo_cache_dir=c.demo_cache_dir
      if demo_cache_dir is None else demo_cache_dir)
  if c.pooling != "cls":
    raise ExportError(
        f"the run was trained with --pooling={c.pooling}; "
        "BertForSequenceClassification classifies the pooler's output "
        "(--pooling=cls) only, so it is not supported by the Hugging Face "
        "export")
  preprocessor, model, path, step = export.load_classifier(c, checkpoint)
  encoder = bert_encoder(model.encoder, c.encoder_handle)
  files = _files(c, tasks.resolve(c), encoder, model, preprocessor)
  write_folder(files, output_dir)
  logging.info("Exported %s (step %d) to %s in the Hugging Face format", path,
               step, output_dir)
  return output_dir
