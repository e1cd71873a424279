"""The BERT encoder module: saved in the TF Hub format with its config, and
rebuilt for XLA with dropout masks hashed from one seed per call."""

import json

import numpy as np
import pytest
import tensorflow as tf
import tensorflow_hub as hub

from trainer.encoders import bert
from trainer.encoders import demo


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
      lambda s: bert.hashed_keep_mask(tf.constant(shape), rate, s),
      jit_compile=jit_compile)(
          tf.constant(seed, tf.uint32))
  expected = _reference_keep(shape, rate, seed)
  np.testing.assert_array_equal(mask.numpy(), expected)
  assert 0 < (~expected).sum() < expected.size  # some dropped, some kept


def test_hashed_keep_mask_keeps_the_rate_and_varies_with_the_seed():
  shape, rate = [64, 128, 128], 0.1  # 1,048,576 draws
  a = bert.hashed_keep_mask(
      tf.constant(shape), rate, tf.constant(1, tf.uint32)).numpy()
  b = bert.hashed_keep_mask(
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
  encoder = bert.NativeEncoder(
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
