"""--jit_compile on CPU/GPU: the encoder rebuilt for XLA, and its dropout.

XLA cannot compile the gradient of a function loaded from a SavedModel
without making the batch a compile-time constant, so it recompiles at every
step (the negative control below shows it on TensorFlow's own loading path).
The trainer rebuilds this project's encoders in Python for XLA
(`bert.NativeEncoder`), which compiles once, with dropout masks hashed from
one seed per call (`bert.hashed_keep_mask`).
"""

import os
import re
import sys

import numpy as np
import pytest
import tensorflow as tf
import tensorflow_hub as hub

from conftest import ROOT
from conftest import run_process
from trainer.model import bert
from trainer.base import config as config_lib
from trainer.loop import train_lib

sys.path.insert(0, os.path.join(ROOT, "benchmarks"))
import profile_ops  # noqa: E402  pylint: disable=g-import-not-at-top

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


def test_foreign_encoder_with_jit_unset_trains_without_xla(no_dropout_encoder):
  """Only an explicit --jit_compile=true on a foreign encoder is an error
  (precision_test); unset, it trains without XLA everywhere."""

  class Foreign(tf.Module):

    def __init__(self, loaded):
      super().__init__()
      self.loaded = loaded

  foreign = Foreign(hub.load(no_dropout_encoder))
  encoder, route = train_lib.prepare(config_lib.Config(),
                                     tf.distribute.get_strategy(), foreign)
  assert encoder is foreign and route.jit_compile is False
  assert route.note == "precision: float32"


# XLA writes one `before_optimizations` module per compilation into
# --xla_dump_to: a count that does not depend on TensorFlow's log format
# (the compile profiler's "Compiled ... N times" line of TF 2.21 is not
# logged by 2.20).
_MODULE = re.compile(r"^module_\d+\.a_inference_(\w+?)_\d+__.*"
                     r"\.before_optimizations\.txt$")


def _compile_counts(dump_dir):
  counts = {}
  for name in os.listdir(dump_dir):
    match = _MODULE.match(name)
    if match:
      counts[match.group(1)] = counts.get(match.group(1), 0) + 1
  return counts


def _run_dumping(args, tmp_path):
  """Runs `args` with XLA dumping each compiled module; returns the counts
  of compilations per function."""
  dump = tmp_path / "xla_dump"
  env = dict(os.environ, PYTHONPATH=ROOT, XLA_FLAGS=f"--xla_dump_to={dump}")
  out = run_process(args, cwd=str(tmp_path), env=env)
  assert out.returncode == 0, out.stderr[-3000:]
  return out, _compile_counts(dump)


@pytest.mark.core
@pytest.mark.xla
def test_jit_training_compiles_the_step_once(tmp_path, demo_paths):
  """`python -m trainer.main --jit_compile=true` over 6 steps (3 loops of
  different batches): XLA compiles the forward/backward function once. The
  profile of steps 5-6 shows the XLA cluster's ops (benchmarks/profile_ops)."""
  out, counts = _run_dumping([
      sys.executable, "-m", "trainer.main",
      f"--flagfile={ROOT}/flags/demo_quick.flags",
      f"--demo_cache_dir={demo_paths['root']}", f"--model_dir={tmp_path}/run",
      "--train_steps=6", "--steps_per_loop=2", "--eval_every=0",
      "--checkpoint_every=0", "--export=false", "--jit_compile=true",
      "--profile_steps=5,6"
  ], tmp_path)
  assert "XLA: the encoder rebuilt from its saved config" in out.stderr
  assert "step 6/6" in out.stderr
  # The step once, and the trainer's probe of XLA:CPU (one tiny function).
  assert counts == {"forward_backward": 1, "xla_cpu_probe": 1}

  summary = profile_ops.summarize(
      profile_ops.newest_trace(f"{tmp_path}/run/summaries/train"))
  if ("XLA cluster (forward and backward)" not in summary["by_phase"] and
      tuple(map(int,
                tf.__version__.split(".")[:2])) < (2, 20)):
    pytest.skip("the profiler of TF < 2.20 does not trace XLA:CPU "
                "instructions (the compile count above held)")
  trainable = len(hub.load(demo_paths["encoder"]).trainable_variables) + 2
  assert summary["by_type"]["ResourceApplyAdam"][1] == 2 * trainable
  matmuls = summary["by_type"]["xla:MatMul"][1]
  assert matmuls > 0 and matmuls % 2 == 0  # the same dots in both steps
  assert summary["by_phase"]["XLA cluster (forward and backward)"] > 0
  assert "backward" not in summary["by_phase"]  # all inside the cluster


_LOADED_GRADIENT = r"""
import sys
import tensorflow as tf
import tensorflow_hub as hub
encoder = hub.load(sys.argv[1])

@tf.function(jit_compile=True)
def loaded_gradient(ids):
  inputs = dict(input_word_ids=ids, input_mask=tf.ones_like(ids),
                input_type_ids=tf.zeros_like(ids))
  with tf.GradientTape() as tape:
    loss = tf.reduce_sum(encoder(inputs, training=False)["pooled_output"])
  grads = tape.gradient(loss, encoder.trainable_variables)
  return tf.add_n([tf.reduce_sum(tf.convert_to_tensor(g)) for g in grads])

for i in range(3):
  loaded_gradient(tf.constant([[2, 40 + i, 41, 3]] * 2))
"""


@pytest.mark.core
@pytest.mark.xla
def test_negative_control_loaded_savedmodel_gradient_recompiles(
    tmp_path, demo_paths):
  """Why foreign encoders get no XLA: the same encoder called through its
  SavedModel recompiles for every new batch (3 batches, 3 compilations).
  If a TensorFlow release fixes this, this test fails: lift the error in
  `precision.choose` then."""
  script = tmp_path / "loaded_gradient.py"
  script.write_text(_LOADED_GRADIENT)
  _, counts = _run_dumping(
      [sys.executable, str(script), demo_paths["encoder"]], tmp_path)
  assert counts == {"loaded_gradient": 3}
