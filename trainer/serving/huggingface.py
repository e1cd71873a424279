r"""Export a trained classifier or tagger in the Hugging Face format.

`export_run(model_dir, output_dir)` (`python -m trainer.export
--model_dir=RUN --format=huggingface --output_dir=DIR`,
`trainer.export_huggingface(...)`) rebuilds a run's model from its
folder, as the SavedModel export does, and writes DIR:

    config.json              BertForSequenceClassification (a tagging
                             run: BertForTokenClassification): sizes,
                             id2label/label2id (the tags, in the run's
                             order), problem_type for a classifier
    model.safetensors        encoder, pooler (a classifier's: a tagger
                             has none) and the fine-tuned head
    vocab.txt, tokenizer.json, tokenizer_config.json,
    special_tokens_map.json  the run's preprocessing, as `tokenizers` data

so that `AutoModelForSequenceClassification.from_pretrained(DIR)`
(`AutoModelForTokenClassification` for a tagger) and
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

from absl import logging
import numpy as np
import tensorflow as tf

from trainer.data import preprocessing
from trainer.encoders import garden
from trainer.encoders import hf_names
from trainer.encoders import native
from trainer.foundation import checks
from trainer.foundation import errors
from trainer.foundation import tasks
from trainer.runtime import run_dir
from trainer.serving import run_folder
from trainer.serving import hf_tokenizer

ExportError = errors.ExportError


def architecture(task):
  """The transformers class of Task `task`'s model: a head over the
  pooler's output, or over every token's (tagging)."""
  return ("BertForTokenClassification"
          if task.tagging else "BertForSequenceClassification")


def hf_tensors(encoder, kernel, bias, pooler=True):
  """The state dict of `bert.BertEncoder` `encoder` (named by
  `hf_names.bert_tensor_names`) under the head (`kernel` [hidden,
  classes], `bias` [classes]): {name: float32 np.ndarray}. Without
  `pooler` (BertForTokenClassification has none) the pooler's tensors are
  left out."""
  out = {}
  for name, variable, transposed in hf_names.bert_tensor_names(encoder):
    if not pooler and name.startswith(hf_names.POOLER):
      continue
    value = variable.numpy()
    out["bert." + name] = value.T if transposed else value
  out["classifier.weight"] = np.asarray(kernel).T
  out["classifier.bias"] = np.asarray(bias)
  return {k: np.ascontiguousarray(v, dtype=np.float32) for k, v in out.items()}


def hf_config(config, task, pad_id, classifier_dropout):
  """config.json of the model of Task `task` (`architecture`) over
  `bert.BertConfig` `config`: its labels the task's classes (a tagger's
  tags), in their order."""
  names = list(task.class_names)
  out = dict(
      architectures=[architecture(task)],
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
      dtype="float32")
  if not task.tagging:  # a token classifier's loss is always per token
    out["problem_type"] = ("regression" if task.regression else
                           "single_label_classification")
  return out


def garden_encoder(loaded, handle):
  """The `bert.BertEncoder` equal to a Model Garden BERT encoder
  (`garden.rebuild`), or None for one not named like it; one whose outputs
  no post-LayerNorm GELU BERT reproduces is an ExportError."""
  try:
    return garden.rebuild(loaded, handle)
  except errors.ConversionError as e:
    raise ExportError(
        f"{e}; it is not supported by the Hugging Face export") from None


def bert_encoder(loaded, handle):
  """The `bert.BertEncoder` equal to the run's loaded encoder: this
  project's (rebuilt from its saved config) or a Model Garden BERT's; an
  ExportError for any other."""
  if isinstance(loaded, native.NativeEncoder):  # a shared-rows run's, rebuilt
    return loaded.encoder
  if native.saved_config(loaded) is not None:
    return native.NativeEncoder.load(loaded).encoder
  encoder = garden_encoder(loaded, handle)
  if encoder is None:
    sample = next((v.name for v in loaded.trainable_variables), "none")
    raise ExportError(
        f"--encoder_handle={handle} is neither this project's encoder nor a "
        f"Model Garden BERT (its variables, e.g. {sample!r}, have no "
        "Hugging Face names); it is not supported by the Hugging Face export")
  return encoder


def _files(c, task, encoder, model, preprocessor):
  """{file name: bytes} of the Hugging Face folder."""
  as_json = lambda d: json.dumps(d, indent=2).encode("utf-8") + b"\n"
  out = hf_tokenizer.files(preprocessor, c.preprocessor_handle, c.seq_length)
  out["README.md"] = model_card(task, c.seq_length).encode("utf-8")
  out["model.safetensors"] = hf_names.safetensors_bytes(
      hf_tensors(
          encoder,
          model.kernel.numpy(),
          model.bias.numpy(),
          pooler=not task.tagging))
  pad = preprocessing.special_tokens(preprocessor)["padding_id"]
  # Last: a folder is a model once config.json is there.
  out["config.json"] = as_json(
      hf_config(encoder.config, task, pad, c.dropout_rate))
  return out


# Where transformers and the trainer tokenize differently (docs/
# huggingface.md), said when it applies.
PAIR_CAVEAT = (
    "pairs: when both texts must be cut and the budget is odd, transformers' "
    "longest_first gives the extra token to the longer text, the trainer's "
    "round robin to the first, so such pairs tokenize one token apart")


def model_card(task, seq_length):
  """README.md of the folder: how to score as in training (transformers
  truncates only when asked) and the known differences that apply."""
  if task.tagging:
    return _tagging_card(seq_length)
  call = ('classify(("first text", "second text"))'
          if task.pairs else 'classify("what a day")')
  lines = [
      "# Fine-tuned with bert-tpu-trainer", "",
      f"Trained on texts cut to {seq_length} tokens. transformers cuts only "
      "when asked, so pass `truncation=True` to score as in training (a "
      "longer text otherwise scores differently, or fails past the model's "
      "position limit):", "", "```python", "from transformers import pipeline",
      'classify = pipeline("text-classification", model="THIS_FOLDER", '
      "truncation=True)", call, "```", ""
  ]
  if task.pairs:
    lines += [f"Known difference on {PAIR_CAVEAT}.", ""]
  return "\n".join(lines)


def _tagging_card(seq_length):
  """README.md of a tagger's folder: words in, each word's tag read on its
  first piece, as the trainer trained and scored it."""
  return "\n".join([
      "# Fine-tuned with bert-tpu-trainer", "",
      "Tags each word of a sentence (IOB2, `id2label`) on the word's first "
      "word piece, as the trainer trained and scored it. Give the words "
      "(`is_split_into_words=True`) and read each word's first piece:", "",
      "```python", "import torch",
      "from transformers import AutoModelForTokenClassification, "
      "AutoTokenizer", 'tok = AutoTokenizer.from_pretrained("THIS_FOLDER")',
      "model = AutoModelForTokenClassification.from_pretrained("
      '"THIS_FOLDER").eval()', 'words = ["EU", "rejects", "German", "call"]',
      'enc = tok(words, is_split_into_words=True, return_tensors="pt")',
      "with torch.no_grad():",
      "  best = model(**enc).logits[0].argmax(-1).tolist()", "tags = {}",
      "for piece, word in enumerate(enc.word_ids()):",
      "  if word is not None and word not in tags:",
      "    tags[word] = model.config.id2label[best[piece]]", "```", "",
      f"Trained on sentences of up to {seq_length} pieces (whole words); "
      "the trainer scores a longer sentence in windows of whole words, "
      "transformers in one pass up to the model's position limit "
      "(`truncation=True` cuts it at that many pieces instead). A word "
      "that is only control characters has no piece in transformers (no "
      "tag); the trainer tags it on `[UNK]`.", ""
  ])


def _check_target(output_dir):
  if not output_dir:
    raise errors.ConfigError("--output_dir is required with "
                             "--format=huggingface")
  kind = checks.path_kind("output_dir", output_dir)
  if kind == "file":
    raise ExportError(f"--output_dir={output_dir} is a file; give a new or "
                      "empty folder")
  if kind == "dir" and tf.io.gfile.listdir(output_dir):
    raise ExportError(f"--output_dir={output_dir} exists and is not empty; "
                      "give a new or empty folder")


def write_folder(files, output_dir):
  """Writes `files` ({name: bytes}, config.json last) to output_dir through
  a temporary sibling (`run_dir.publish_folder`), so an interrupted export
  never leaves a folder that loads. Returns output_dir."""
  _check_target(output_dir)

  def write(tmp):
    tf.io.gfile.makedirs(tmp)
    for name, data in files.items():
      with tf.io.gfile.GFile(os.path.join(tmp, name), "wb") as f:
        f.write(data)

  return run_dir.publish_folder(write, output_dir, "config.json")


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
  c = run_folder.read_run_config(model_dir, checkpoint_dir)
  c = dataclasses.replace(
      c,
      checkpoint_dir=checkpoint_dir,
      demo_cache_dir=c.demo_cache_dir
      if demo_cache_dir is None else demo_cache_dir)
  task = tasks.resolve(c)
  if not task.tagging and c.pooling != "cls":
    raise ExportError(
        f"the run was trained with --pooling={c.pooling}; "
        "BertForSequenceClassification classifies the pooler's output "
        "(--pooling=cls) only, so it is not supported by the Hugging Face "
        "export")
  preprocessor, model, path, step = run_folder.load_classifier(c, checkpoint)
  encoder = bert_encoder(model.encoder, c.encoder_handle)
  files = _files(c, task, encoder, model, preprocessor)
  write_folder(files, output_dir)
  logging.info("Exported %s (step %d) to %s in the Hugging Face format", path,
               step, output_dir)
  if task.tagging:
    logging.info(
        "Tag as in training: words in (is_split_into_words=True), each "
        "word's tag on its first piece (README.md in %s)", output_dir)
  else:
    logging.info(
        "Score as in training with truncation=True (texts cut to %d "
        "tokens): pipeline('text-classification', model=%r, "
        "truncation=True)", c.seq_length, output_dir)
  if task.pairs:
    logging.warning("Hugging Face export: %s (README.md in %s)", PAIR_CAVEAT,
                    output_dir)
  return output_dir
