"""The BERT encoder module: saved in the TF Hub format with its config,
rebuilt with dropout masks hashed from one seed per call and keyed by
example, and in shared rows giving each example its own outputs and masks
(ours and a Model Garden BERT rebuilt), so the layouts train alike."""

import json
import os

import numpy as np
import pytest
import tensorflow as tf
import tensorflow_hub as hub

import testing
from trainer.data import preprocessing
from trainer.encoders import bert
from trainer.foundation import features
from trainer.encoders import demo
from trainer.encoders import dropout as dropout_lib
from trainer.encoders import handles
from trainer.encoders import native
from trainer.model import classifier
from trainer.model import optimization
from trainer.training import train_step


def test_bert_config_round_trip(demo_paths):
  encoder = tf.saved_model.load(demo_paths["encoder"])
  config = json.loads(encoder.get_config_json().numpy())
  assert config == json.loads(
      bert.BertConfig(vocab_size=len(demo.vocabulary()),
                      **demo.DEMO_BERT).to_json())


_LOW32 = np.uint64(0xFFFFFFFF)  # NumPy 1.x does not mix uint64 and int


def _lowbias32(x):
  x = np.asarray(x, np.uint64) & _LOW32
  x ^= x >> np.uint64(16)
  x = (x * np.uint64(0x7FEB352D)) & _LOW32
  x ^= x >> np.uint64(15)
  x = (x * np.uint64(0x846CA68B)) & _LOW32
  x ^= x >> np.uint64(16)
  return x


def _reference_keep(shape, rate, seed):
  index = np.arange(int(np.prod(shape)), dtype=np.uint64)
  bits = _lowbias32(((index * np.uint64(0x9E3779B9)) & _LOW32)
                    ^ _lowbias32(seed))
  return (bits >= round(rate * 2**32)).reshape(shape)


@pytest.mark.xla
@pytest.mark.parametrize("jit_compile", [False, True])
def test_hashed_keep_mask_is_the_documented_hash(jit_compile):
  shape, rate, seed = [3, 5, 7], 0.1, 4_000_000_007
  mask = tf.function(
      lambda s: dropout_lib.hashed_keep_mask(tf.constant(shape), rate, s),
      jit_compile=jit_compile)(
          tf.constant(seed, tf.uint32))
  expected = _reference_keep(shape, rate, seed)
  np.testing.assert_array_equal(mask.numpy(), expected)
  assert 0 < (~expected).sum() < expected.size  # some dropped, some kept


def test_hashed_keep_mask_keeps_the_rate_and_varies_with_the_seed():
  shape, rate = [64, 128, 128], 0.1  # 1,048,576 draws
  a = dropout_lib.hashed_keep_mask(
      tf.constant(shape), rate, tf.constant(1, tf.uint32)).numpy()
  b = dropout_lib.hashed_keep_mask(
      tf.constant(shape), rate, tf.constant(2, tf.uint32)).numpy()
  # Binomial standard deviation at n = 2^20, p = 0.1: 0.0003.
  assert abs(a.mean() - 0.9) < 0.0015
  assert abs(b.mean() - 0.9) < 0.0015
  # Independent masks agree on 0.9^2 + 0.1^2 = 82% of the elements, and
  # neighbours are dropped together 0.1^2 = 1% of the time.
  assert abs((a == b).mean() - 0.82) < 0.002
  flat = a.reshape(-1)
  assert abs((~flat[1:] & ~flat[:-1]).mean() - 0.01) < 0.001


@pytest.mark.xla
def test_native_encoder_dropout_is_reproducible_from_its_state(demo_paths):
  """Hashed masks come from the generator state, which checkpoints carry:
  the same state gives the same masks, the next call new ones."""
  encoder = native.NativeEncoder.load(
      hub.load(demo_paths["encoder"]), hashed_dropout=True)
  inputs = dict(
      input_word_ids=tf.constant([[2, 40, 41, 42, 3, 0]] * 2),
      input_mask=tf.constant([[1, 1, 1, 1, 1, 0]] * 2),
      input_type_ids=tf.zeros([2, 6], tf.int32))
  call = tf.function(
      lambda x: encoder(x, training=True)["sequence_output"], jit_compile=True)
  state = encoder.encoder.dropout_rng.state.numpy()
  first, second = call(inputs).numpy(), call(inputs).numpy()
  assert np.abs(first - second).max() > 1e-3
  encoder.encoder.dropout_rng.state.assign(state)
  np.testing.assert_array_equal(call(inputs).numpy(), first)
  # Without dropout it is the saved graph's math.
  loaded = hub.load(demo_paths["encoder"])
  np.testing.assert_allclose(
      encoder(inputs, training=False)["sequence_output"].numpy(),
      loaded(inputs, training=False)["sequence_output"].numpy(),
      atol=1e-6)


SINGLES = [
    "a great movie", "terrible plot and bad acting all along the way", "ok",
    "i loved it, really loved it", "meh", "the best thing i have seen", "no",
    "what a day it was for all of us at the office"
]


def _shared_and_fixed(model, preprocessor, texts, seq_length, ladder):
  """(logits of `texts` one a row, the same in shared rows in the batch's
  order, the rows)."""
  batch = preprocessing.make_packer(preprocessor, seq_length)(texts)
  batch["label"] = tf.range(texts.shape[0])
  rows = testing.in_rows(batch, ladder)
  fixed = model(features.encoder_inputs(batch)).numpy()
  shared = model(features.encoder_inputs(rows)).numpy()
  return fixed, shared[testing.slot_order(rows)], rows


@pytest.mark.core
@pytest.mark.parametrize("pooling", ["cls", "mean"])
def test_shared_rows_give_each_example_its_own_logits(demo_paths, pooling):
  """Eight texts of 4 to 25 tokens in 4 rows of 32 (and eight pairs in
  7): each gets the logits it gets in a row of its own, to float
  rounding."""
  preprocessor = hub.load(demo_paths["preprocessor"])
  model = classifier.Classifier(
      native.NativeEncoder.load(hub.load(demo_paths["encoder"])),
      3,
      seed=1,
      pooling=pooling)
  pairs = tf.stack([tf.constant(SINGLES), tf.constant(SINGLES[::-1])], 1)
  for texts, ladder in ((tf.constant(SINGLES), (4,)), (pairs, (7,))):
    fixed, shared, rows = _shared_and_fixed(model, preprocessor, texts, 32,
                                            ladder)
    assert rows["input_word_ids"].shape[0] == ladder[0]
    assert rows["weight"].numpy().sum(axis=1).max() >= 2  # rows are shared
    np.testing.assert_allclose(shared, fixed, atol=1e-5)


@pytest.mark.core
@pytest.mark.xla
@pytest.mark.parametrize("pooling,jit_compile",
                         [("cls", False), ("mean", False), ("cls", True)])
def test_an_example_draws_its_dropout_masks_in_shared_rows(
    demo_paths, pooling, jit_compile):
  """Dropout on (the encoder's and the head's): from the same generator
  state and step seed, each text gets the training logits in shared rows
  that it gets in a row of its own, to float rounding, single texts and
  pairs, with XLA too; the masks are drawn (the logits are not
  inference's) and the next call draws new ones."""
  preprocessor = hub.load(demo_paths["preprocessor"])
  rebuilt = native.NativeEncoder.load(
      hub.load(demo_paths["encoder"]), hashed_dropout=True)
  model = classifier.Classifier(rebuilt, 3, seed=1, pooling=pooling)
  state = rebuilt.encoder.dropout_rng.state.numpy()
  seed = tf.constant([7, 11])
  call = tf.function(
      lambda x: model(x, training=True, dropout_seed=seed),
      jit_compile=jit_compile)
  pairs = tf.stack([tf.constant(SINGLES), tf.constant(SINGLES[::-1])], 1)
  for texts, ladder in ((tf.constant(SINGLES), (4,)), (pairs, (7,))):
    batch = preprocessing.make_packer(preprocessor, 32)(texts)
    batch["label"] = tf.range(texts.shape[0])
    rows = testing.in_rows(batch, ladder)
    assert rows["weight"].numpy().sum(axis=1).max() >= 2  # rows are shared
    rebuilt.encoder.dropout_rng.state.assign(state)
    fixed = call(features.encoder_inputs(batch)).numpy()
    again = call(features.encoder_inputs(batch)).numpy()
    rebuilt.encoder.dropout_rng.state.assign(state)
    shared = call(features.encoder_inputs(rows)).numpy()
    np.testing.assert_allclose(
        shared[testing.slot_order(rows)], fixed, atol=1e-5)
    inference = model(features.encoder_inputs(batch)).numpy()
    assert np.abs(fixed - inference).max() > 1e-3
    assert np.abs(fixed - again).max() > 1e-3


GARDEN = os.path.join(
    os.path.dirname(os.path.abspath(__file__)), "data", "model_garden_bert")


def test_a_model_garden_encoder_rebuilt_takes_shared_rows():
  """A BERT written by Model Garden's TF Hub exporter (as experts/bert and
  bert_en_uncased_L-* are) is rebuilt as this project's encoder with its
  weights: in shared rows each text gets the logits the loaded SavedModel
  gives it one a row."""
  loaded = hub.load(os.path.join(GARDEN, "encoder"))
  rebuilt = handles.rebuilt(loaded, "garden")
  assert isinstance(rebuilt, native.NativeEncoder)
  fixed_model = classifier.Classifier(loaded, 2, seed=4)
  shared_model = fixed_model.with_encoder(rebuilt)
  preprocessor = hub.load(os.path.join(GARDEN, "preprocessor"))
  batch = preprocessing.make_packer(preprocessor, 32)(tf.constant(SINGLES))
  batch["label"] = tf.range(len(SINGLES))
  rows = testing.in_rows(batch, (4,))
  assert rows["input_word_ids"].shape[0] == 4
  fixed = fixed_model(features.encoder_inputs(batch)).numpy()
  shared = shared_model(features.encoder_inputs(rows)).numpy()
  np.testing.assert_allclose(shared[testing.slot_order(rows)], fixed, atol=1e-5)
  # An opaque SavedModel (the demo preprocessor stands in) is not rebuilt.
  assert handles.rebuilt(preprocessor, "pre") is None


TWEETS = SINGLES + [
    "@friend omg the concert last night was AMAZING!!! can't wait 4 the next",
    "stuck in traffic again... monday mornings are the worst",
    "just finished my exams, time to sleep for a week",
    "why does my phone always die right when i need it", "lol", "so tired",
    "happy birthday to my little sister, love you loads", "rain rain go away"
]


def _three_steps(rebuilt, preprocessor, texts, seq_length, ladder, dropout):
  """The weights after three training steps of `texts` (rotated a step,
  labels alternating) at fixed shapes and in shared rows of `ladder`
  (each layout from a copy of `rebuilt`, dropout `dropout` in the encoder
  and the head)."""
  trained = []
  for layout in ("fixed", "rows"):
    model = classifier.Classifier(
        testing.encoder_copy(rebuilt, dropout_rate=dropout),
        2,
        dropout_rate=dropout,
        seed=2)
    opt = optimization.AdamW(model.trainable_variables,
                             optimization.WarmupLinearDecay(1e-4, 10, 1))
    step = tf.function(train_step.make_train_step(model, opt, len(texts)))
    for i in range(3):
      batch = preprocessing.make_packer(preprocessor, seq_length)(
          tf.constant(texts[i:] + texts[:i]))
      batch["label"] = tf.constant([(i + j) % 2 for j in range(len(texts))])
      step(batch if layout == "fixed" else testing.in_rows(batch, ladder))
    trained.append([v.numpy() for v in model.trainable_variables])
  return trained


@pytest.mark.parametrize("dropout", [0.0, 0.1])
def test_a_converted_checkpoint_in_shared_rows_trains_as_fixed_shapes(
    minilm, dropout):
  """all-MiniLM-L6-v2 converted from Hugging Face: in shared rows each
  tweet gets its logits one a row gives it, and three training steps give
  the weights of three fixed-shape steps, with dropout off and on (an
  example draws its masks wherever it lies)."""
  preprocessor = hub.load(os.path.join(minilm, "preprocessor"))
  rebuilt = native.NativeEncoder.load(hub.load(os.path.join(minilm, "encoder")))
  model = classifier.Classifier(rebuilt, 2, seed=2)
  fixed, shared, rows = _shared_and_fixed(model, preprocessor,
                                          tf.constant(TWEETS), 48, (8,))
  assert rows["input_word_ids"].shape[0] == 8
  np.testing.assert_allclose(shared, fixed, atol=1e-5)
  trained = _three_steps(rebuilt, preprocessor, TWEETS, 48, (8,), dropout)
  for a, b in zip(*trained):
    np.testing.assert_allclose(b, a, atol=1e-5)
  start = [
      v.numpy()
      for v in classifier.Classifier(rebuilt, 2, seed=2).trainable_variables
  ]
  assert np.abs(trained[0][0] - start[0]).max() > 1e-5  # the steps moved it


@pytest.mark.core
def test_the_demo_encoder_in_shared_rows_trains_as_fixed_shapes(demo_paths):
  """The demo encoder, dropout on: three steps in shared rows (4 rows for 8
  texts) give the weights of three fixed-shape steps, which are not the
  weights of three steps without dropout (the masks were drawn)."""
  preprocessor = hub.load(demo_paths["preprocessor"])
  rebuilt = native.NativeEncoder.load(hub.load(demo_paths["encoder"]))
  first, second = _three_steps(rebuilt, preprocessor, SINGLES, 32, (4,), 0.1)
  for a, b in zip(first, second):
    np.testing.assert_allclose(b, a, atol=1e-5)
  off, _ = _three_steps(rebuilt, preprocessor, SINGLES, 32, (4,), 0.0)
  assert max(np.abs(a - b).max() for a, b in zip(first, off)) > 1e-4
