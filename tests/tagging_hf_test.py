"""The Hugging Face export of a tagging run (`trainer.export
--format=huggingface`: a BertForTokenClassification folder) against the
run's own model, on real CoNLL-2003 dev sentences.

A MiniLM tagging run of 2 steps on the first 200 training sentences is
exported once; transformers loads the folder alone. The exported tokenizer
(`is_split_into_words=True`) must give the trainer's piece ids
(`word_pieces.make_word_packer`) and first pieces exactly, and the logits
agree within 1e-4 on every real token (`benchmarks/tagging_hf_parity.py`,
which prints the same figures over all of dev). Skipped, with the reason,
without transformers, the MiniLM weights or ../shared.
"""

import json
import os
import sys

import numpy as np
import pytest
import tensorflow as tf

from conftest import ROOT, tiny_config
from testing import export_hf
from trainer.encoders import hf_import
from trainer.serving import huggingface
from trainer.training import train_lib

sys.path.insert(0, os.path.join(ROOT, "benchmarks"))
import tagging_hf_parity  # noqa: E402  pylint: disable=g-import-not-at-top

torch = pytest.importorskip(
    "torch", reason="PyTorch is not installed: pip install -e '.[convert]'")
transformers = pytest.importorskip(
    "transformers",
    reason="transformers is not installed: pip install -e '.[convert]'")

CONLL = os.path.join(os.path.dirname(ROOT), "shared", "data", "conll2003")
pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(not os.path.isdir(CONLL), reason=f"{CONLL} is absent"),
]
# CoNLL-2003's tags as the trainer orders them: O, then B-/I- of each
# entity type, types sorted.
TAGS = ("O", "B-LOC", "I-LOC", "B-MISC", "I-MISC", "B-ORG", "I-ORG", "B-PER",
        "I-PER")


def _first_sentences(path, n, folder):
  """The first `n` sentences (blank-line blocks) of CoNLL file `path`, as a
  file in `folder`."""
  with open(path, encoding="utf-8") as f:
    blocks = f.read().split("\n\n")[:n]
  target = os.path.join(folder, os.path.basename(path))
  with open(target, "w", encoding="utf-8") as f:
    f.write("\n\n".join(blocks) + "\n\n")
  return target


def _tagging_run(folder, encoder, preprocessor, **overrides):
  """A tagging run of 2 steps of 8 sentences (the first 200 of CoNLL's
  train file; 40 of dev validate) on these handles, and its Hugging Face
  export: (model_dir, hf_dir)."""
  values = dict(
      task="tagging",
      eval_metrics="",
      encoder_handle=encoder,
      preprocessor_handle=preprocessor,
      train_file=_first_sentences(
          os.path.join(CONLL, "train.txt"), 200, folder),
      eval_file=_first_sentences(os.path.join(CONLL, "dev.txt"), 40, folder),
      seq_buckets="none",
      train_steps=2,
      steps_per_loop=2,
      eval_every=0,
      checkpoint_every=2,
      batch_size=8,
      eval_batch_size=64)
  train_lib.run(tiny_config(folder / "run", "", **dict(values, **overrides)))
  return str(folder / "run"), export_hf(folder / "run", folder / "hf")


@pytest.fixture(scope="module")
def tagging_hf(minilm, tmp_path_factory):
  """(model_dir, hf_dir) of a MiniLM tagging run at seq 64, one shape, and
  its Hugging Face export (skipped without the MiniLM weights)."""
  return _tagging_run(
      tmp_path_factory.mktemp("tagging_hf"),
      os.path.join(minilm, "encoder"),
      os.path.join(minilm, "preprocessor"),
      seq_length=64,
      shared_rows="none")


@pytest.fixture(scope="module")
def restored(tagging_hf):
  """The run's model restored (`tagging_hf_parity.load_run`), once."""
  return tagging_hf_parity.load_run(tagging_hf[0])


@pytest.fixture(scope="module")
def dev_sentences():
  """The first 48 usable sentences of the real dev file (words joined by
  one space)."""
  return tagging_hf_parity.read_sentences(os.path.join(CONLL, "dev.txt"), 48)


def test_the_export_is_a_token_classifier_with_the_runs_tags(tagging_hf):
  """config.json: BertForTokenClassification, the run's tags in its order;
  no pooler and no problem_type (a token classifier has neither);
  transformers loads every tensor, none missing or left over."""
  run, hf_dir = tagging_hf
  config = json.load(open(os.path.join(hf_dir, "config.json")))
  recorded = json.load(open(os.path.join(run, "config.json")))["task"]
  assert tuple(recorded["class_names"]) == TAGS
  assert config["architectures"] == ["BertForTokenClassification"]
  assert config["id2label"] == {str(i): t for i, t in enumerate(TAGS)}
  assert config["label2id"] == {t: i for i, t in enumerate(TAGS)}
  assert "problem_type" not in config
  model, info = transformers.AutoModelForTokenClassification.from_pretrained(
      hf_dir, output_loading_info=True)
  assert {
      k: list(v) for k, v in info.items()
  } == dict(
      missing_keys=[], unexpected_keys=[], mismatched_keys=[], error_msgs=[])
  assert model.config.num_labels == len(TAGS)
  assert model.classifier.weight.shape == (len(TAGS), 384)


def test_ids_and_logits_match_the_run_on_dev_sentences(tagging_hf, restored,
                                                       dev_sentences):
  """48 real dev sentences: the exported tokenizer's ids and first pieces
  are the trainer's, every sentence; the logits within 1e-4 on each word's
  first piece and on every real token, so every word gets the same tag."""
  out = tagging_hf_parity.compare(restored, tagging_hf[1], dev_sentences)
  print(f"tagging: max |logit diff| {out['token_diff']:.3g} over "
        f"{out['tokens']} tokens of {out['sentences']} sentences")
  assert out["tag_names"] == list(TAGS)
  assert out["sentences"] == out["ids_equal"] == 48
  words = sum(len(s.split(" ")) for s in dev_sentences)
  assert out["words"] == out["tags_agree"] == words  # all fit in 64 pieces
  assert out["first_piece_diff"] <= 1e-4 and out["token_diff"] <= 1e-4


def test_the_folders_readme_tags_as_the_run(tagging_hf, restored,
                                            dev_sentences):
  """The README's snippet, run as written on a dev sentence (the folder's
  path in place of THIS_FOLDER), tags each word as the run's model does on
  that word's first piece."""
  hf_dir = tagging_hf[1]
  card = open(os.path.join(hf_dir, "README.md")).read()
  snippet = card.split("```python\n")[1].split("```")[0]
  words = max(dev_sentences[:10], key=len).split(" ")
  scope = {}
  exec(  # pylint: disable=exec-used
      snippet.replace("THIS_FOLDER",
                      hf_dir).replace('["EU", "rejects", "German", "call"]',
                                      repr(words)), scope)
  packed = tagging_hf_parity.pack(restored, [" ".join(words)])
  logits = tagging_hf_parity.logits_of(restored, packed)[0]
  first = np.flatnonzero(packed["weight"].numpy()[0])
  assert scope["tags"] == {
      w: TAGS[int(logits[p].argmax())] for w, p in enumerate(first)
  }


def test_the_export_converts_back_to_the_fine_tuned_encoder(
    tagging_hf, restored, tmp_path):
  """HF token classifier -> convert_hf: the fine-tuned encoder's weights
  exactly; the pooler (a token classifier has none) is said to be new."""
  record = hf_import.convert(tagging_hf[1], str(tmp_path / "again"))
  assert record["notes"] == [
      "no pooler in the checkpoint: pooler initialized randomly",
      "unused tensors: classifier.bias, classifier.weight"
  ]
  trained = huggingface.bert_encoder(restored[1].encoder, "run")
  reread = huggingface.bert_encoder(
      tf.saved_model.load(str(tmp_path / "again" / "encoder")), "again")
  for a, b in zip(trained.variables, reread.variables, strict=True):
    assert a.name == b.name
    if "pooler" not in a.name:
      np.testing.assert_array_equal(a.numpy(), b.numpy(), err_msg=a.name)


def test_a_model_garden_tagger_exports_with_tf_hubs_text_path(
    tmp_path, dev_sentences, capsys):
  """A tagger on Model Garden's TF Hub BERT and TF Hub's preprocessor,
  trained in shared rows (the encoder rebuilt): its export gives the
  preprocessor's ids (tensorflow_text's BasicTokenizer, spelled out in
  tokenizer.json) and the run's logits on real dev sentences. The
  benchmark program, exporting the run itself, prints the same table."""
  garden = os.path.join(ROOT, "tests", "data", "model_garden_bert")
  run, hf_dir = _tagging_run(
      tmp_path,
      os.path.join(garden, "encoder"),
      os.path.join(garden, "preprocessor"),
      shared_rows="4,6")
  record = json.load(open(os.path.join(run, "config.json")))
  assert record["shared_rows"] == [4, 6]
  config = json.load(open(os.path.join(hf_dir, "config.json")))
  assert config["architectures"] == ["BertForTokenClassification"]
  assert config["hidden_act"] == "gelu_new"  # found by recomputing outputs
  out = tagging_hf_parity.compare(
      tagging_hf_parity.load_run(run), hf_dir, dev_sentences)
  assert out["sentences"] == out["ids_equal"] == 48
  assert out["words"] == out["tags_agree"] > 0
  assert out["first_piece_diff"] <= 1e-4 and out["token_diff"] <= 1e-4
  tagging_hf_parity.main([
      f"--model_dir={run}", f"--eval_file={os.path.join(CONLL, 'dev.txt')}",
      "--sentences=48"
  ])
  row = capsys.readouterr().out.strip().splitlines()[-1]
  assert row.startswith(f"| 48 | 48 | {out['words']} | {out['words']} | ")
