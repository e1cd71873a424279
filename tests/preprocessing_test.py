"""BERT preprocessing on the host: exact token ids, truncation, sentence
pairs as TF Text packs them and as transformers' tokenizer does, the same
eagerly and inside tf.data."""

import glob
import os

import numpy as np
import pytest
import tensorflow as tf
import tensorflow_hub as hub
import tensorflow_text as text

import testing
from trainer.data import preprocessing
from trainer.encoders import demo

AWKWARD = [
    "The movie was GREAT!", "&quot;great&quot; &amp; fun", "zzz",
    "Café résumé 😀 @user http://t.co/x", "", "dinner " * 200
]


@pytest.fixture(scope="module")
def preprocessor(demo_paths):
  return hub.load(demo_paths["preprocessor"])


def _ids(*tokens):
  vocab = demo.vocabulary()
  return [vocab.index(t) for t in tokens]


@pytest.mark.core
def test_exact_token_ids(preprocessor):
  packer = preprocessing.make_packer(preprocessor, 12)
  out = packer(tf.constant(AWKWARD[:3]))
  cls, sep = _ids("[CLS]", "[SEP]")
  want = [
      [cls] + _ids("the", "movie", "was", "great", "!") + [sep],
      [cls] + _ids('"', "great", '"', "&", "fun") + [sep],
      [cls] + _ids("z", "##z", "##z") + [sep],
  ]
  want = [row + [0] * (12 - len(row)) for row in want]
  np.testing.assert_array_equal(out["input_word_ids"].numpy(), want)
  np.testing.assert_array_equal(out["input_mask"].numpy(),
                                (np.array(want) > 0).astype(np.int32))
  np.testing.assert_array_equal(out["input_type_ids"].numpy(), np.zeros([3,
                                                                         12]))


def test_long_text_is_truncated_with_sep_kept(preprocessor):
  out = preprocessing.make_packer(preprocessor, 8)(tf.constant([AWKWARD[5]]))
  dinner, = _ids("dinner")
  cls, sep = _ids("[CLS]", "[SEP]")
  assert out["input_word_ids"].numpy().tolist() == [[cls] + [dinner] * 6 +
                                                    [sep]]


@pytest.mark.core
def test_same_ids_eager_and_in_tf_data_batched_and_unbatched(preprocessor):
  packer = preprocessing.make_packer(preprocessor, 24)
  eager = packer(tf.constant(AWKWARD))["input_word_ids"].numpy()
  batched = tf.data.Dataset.from_tensor_slices(AWKWARD).batch(
      len(AWKWARD)).map(packer)
  in_data = next(iter(batched))["input_word_ids"].numpy()
  one_by_one = np.concatenate([
      b["input_word_ids"].numpy()
      for b in tf.data.Dataset.from_tensor_slices(AWKWARD).batch(1).map(packer)
  ])
  np.testing.assert_array_equal(eager, in_data)
  np.testing.assert_array_equal(eager, one_by_one)


SEQ = 24


def _vocab_file(demo_paths):
  return glob.glob(os.path.join(demo_paths["preprocessor"], "assets", "*"))[0]


def _reference(vocab_file, pairs, seq_length):
  """[CLS] a [SEP] b [SEP] from TF Text's ops directly, not through the
  project's preprocessor."""
  with open(vocab_file) as f:
    vocab = [line.rstrip("\n") for line in f]
  tokenizer = text.BertTokenizer(
      vocab_file, lower_case=True, token_out_type=tf.int64)
  segments = [
      tokenizer.tokenize(tf.constant([p[i]
                                      for p in pairs])).merge_dims(-2, -1)
      for i in (0, 1)
  ]
  trimmed = text.RoundRobinTrimmer(max_seq_length=seq_length - 3).trim(segments)
  ids, types = text.combine_segments(
      trimmed,
      start_of_sequence_id=vocab.index("[CLS]"),
      end_of_segment_id=vocab.index("[SEP]"))
  word_ids, mask = text.pad_model_inputs(ids, max_seq_length=seq_length)
  type_ids, _ = text.pad_model_inputs(types, max_seq_length=seq_length)
  return dict(
      input_word_ids=word_ids.numpy(),
      input_mask=mask.numpy(),
      input_type_ids=type_ids.numpy())


def _assert_inputs_equal(got, want):
  for key in preprocessing.ENCODER_INPUTS:
    np.testing.assert_array_equal(np.asarray(got[key]), want[key], err_msg=key)


@pytest.mark.core
def test_pairs_pack_as_tf_text_does_eagerly_and_in_tf_data(demo_paths):
  preprocessor = tf.saved_model.load(demo_paths["preprocessor"])
  pack = preprocessing.make_packer(preprocessor, SEQ)
  strings = tf.constant([list(p) for p in testing.PAIRS])
  want = _reference(_vocab_file(demo_paths), testing.PAIRS, SEQ)
  _assert_inputs_equal({k: v.numpy() for k, v in pack(strings).items()}, want)
  in_data = next(
      iter(
          tf.data.Dataset.from_tensor_slices(strings).batch(len(
              testing.PAIRS)).map(pack)))
  _assert_inputs_equal({k: v.numpy() for k, v in in_data.items()}, want)
  # The layout itself: [CLS] a [SEP] b [SEP], types 0 then 1, trimmed
  # round-robin (both long: 11 + 10 of the 21 places).
  with open(_vocab_file(demo_paths)) as f:
    vocab = [line.rstrip("\n") for line in f]
  cls, sep = vocab.index("[CLS]"), vocab.index("[SEP]")
  ids, types = want["input_word_ids"], want["input_type_ids"]
  length = want["input_mask"][0].sum()  # b empty: a's [SEP], then b's
  assert ids[0][length - 2:length].tolist() == [sep, sep]
  assert types[0].sum() == 1
  assert ids[1][:2].tolist() == [cls, sep]  # a empty
  assert types[1][:3].tolist() == [0, 0, 1]
  assert (types[2] == 1).sum() == 10 + 1 and want["input_mask"][2].sum() == SEQ


def test_pairs_pack_as_transformers_tokenizer_when_nothing_is_trimmed(
    demo_paths):
  transformers = pytest.importorskip(
      "transformers",
      reason="transformers is not installed: pip install -e '.[convert]'")
  hf = transformers.BertTokenizer(_vocab_file(demo_paths), do_lower_case=True)
  pairs = [("hello world", "good movie"), ("The Dog sat.", "a cat, ran!"),
           ("what a day", "awful")]
  preprocessor = tf.saved_model.load(demo_paths["preprocessor"])
  got = preprocessing.make_packer(preprocessor, SEQ)(
      tf.constant([list(p) for p in pairs]))
  want = hf([p[0] for p in pairs], [p[1] for p in pairs],
            padding="max_length",
            max_length=SEQ)
  np.testing.assert_array_equal(got["input_word_ids"], want["input_ids"])
  np.testing.assert_array_equal(got["input_type_ids"], want["token_type_ids"])
  np.testing.assert_array_equal(got["input_mask"], want["attention_mask"])
