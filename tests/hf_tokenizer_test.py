"""The exported tokenizer.json against tensorflow_text's own BertTokenizer,
the tokenizer inside TF Hub's `bert_*_preprocess` models, on text whose
every word is in the vocabulary (so no difference hides behind [UNK]):
case folding beyond ASCII (ß, ς, Cherokee, iota subscripts, full-width
letters, ligatures), default-ignorables, controls. Skipped without the
`tokenizers` package."""

import json

import pytest
import tensorflow as tf
import tensorflow_text as text
# The BertTokenizer's first half, not exported at the package's top.
from tensorflow_text.python.ops import bert_tokenizer

from trainer.data import preprocessing
from trainer.serving import hf_tokenizer

tokenizers = pytest.importorskip(
    "tokenizers",
    reason="tokenizers is not installed: pip install -e "
    "'.[convert]'")

TEXTS = [
    "Stra\u00dfe STRASSE \u1e9e \u03a3\u039f\u03a3 \u03c3\u03bf\u03c2 "
    "\u0130stanbul",
    "\uff28\uff49 \ufb01ne \u2460 \u13a0\uab70 \u1f80\u0345 \u0390",
    "soft\u00adhyphen zero\u200bwidth bell\x07ring tab\tnbsp\u00a0x "
    "\u3000wide",
    "Caf\u00e9 cafe\u0301 \u00c5ngstr\u00f6m \u212b na\u00efve "
    "\u041f\u0420\u0418\u0412\u0415\u0422",
    "\u65e5\u672c\u8a9e, (hello)! I \u2764\ufe0f NY \U0001f600 a|b ~`^",
]


class _TfHubStyle(tf.Module):
  """`tokenize` as TF Hub's bert_*_preprocess has it: tensorflow_text's
  BertTokenizer over a vocabulary file."""

  def __init__(self, vocab, lower_case):
    super().__init__()
    table = tf.lookup.StaticVocabularyTable(
        tf.lookup.KeyValueTensorInitializer(
            vocab, tf.range(len(vocab), dtype=tf.int64)),
        num_oov_buckets=1)
    self._tokenizer = text.BertTokenizer(
        table, lower_case=lower_case, token_out_type=tf.int64)

  def tokenize(self, strings):
    return self._tokenizer.tokenize(strings)


def _vocab(lower_case):
  """The special tokens, then every word tensorflow_text makes of TEXTS
  (after the trainer's clean_text), so each word has an id."""
  basic = bert_tokenizer.BasicTokenizer(lower_case=lower_case)
  words = basic.tokenize(preprocessing.clean_text(tf.constant(TEXTS)))
  found = sorted({w.decode() for w in words.flat_values.numpy().tolist()})
  return list(preprocessing.SPECIAL_TOKENS) + found


@pytest.mark.parametrize("lower_case", [True, False])
def test_tf_hub_text_path_gives_tensorflow_texts_ids(lower_case):
  vocab = _vocab(lower_case)
  preprocessor = _TfHubStyle(vocab, lower_case)
  path = hf_tokenizer.read_text_path(preprocessor, vocab)
  assert path == hf_tokenizer.TextPath("tf_text", lower_case, lower_case)
  special = {
      "start_of_sequence_id": vocab.index("[CLS]"),
      "end_of_segment_id": vocab.index("[SEP]"),
      "padding_id": vocab.index("[PAD]"),
      "mask_id": vocab.index("[MASK]"),
  }
  backend = tokenizers.Tokenizer.from_str(
      json.dumps(hf_tokenizer.tokenizer_json(vocab, special, path)))
  want = preprocessor.tokenize(preprocessing.clean_text(
      tf.constant(TEXTS))).merge_dims(-2, -1).to_list()
  unk = vocab.index("[UNK]")
  for line, ids in zip(TEXTS, want):
    assert unk not in ids, line  # every word is in the vocabulary
    assert backend.encode(line, add_special_tokens=False).ids == ids, line
  if lower_case:  # what the rules are for, spelled out
    fold = lambda s: [vocab[i] for i in backend.encode(s).ids[1:-1]]
    assert fold("Stra\u00dfe \u03c3\u03bf\u03c2") == [
        "strasse", "\u03c3\u03bf\u03c3"
    ]
    assert fold("\uff28\uff49 \ufb01ne") == ["hi", "fine"]
