"""The replica step: XLA-compilable, and independent of the replica count."""

import numpy as np
import pytest
import tensorflow as tf
import tensorflow_hub as hub

from trainer import model as model_lib
from trainer import optimization
from trainer import preprocessing
from trainer import train_step

SEQ, BATCH = 16, 8
TEXTS = [
    "the movie was great", "my day was awful lol", "i think work is dull",
    "wow the food was brilliant", "the traffic was horrible today",
    "this book is lovely", "the update was broken again", "dinner was fun"
]


def _batch(preprocessor, start=0, size=BATCH):
  texts = tf.constant([TEXTS[(start + i) % len(TEXTS)] for i in range(size)])
  batch = preprocessing.make_packer(preprocessor, SEQ)(texts)
  batch["label"] = tf.constant([(start + i * 3) % 2 for i in range(size)],
                               tf.int32)
  return batch


def _build(strategy, encoder_path, total_steps=10, dropout=0.0):
  with strategy.scope():
    encoder = hub.load(encoder_path)
    model = model_lib.Classifier(encoder, 2, dropout_rate=dropout, seed=3)
    schedule = optimization.WarmupLinearDecay(1e-3, total_steps, 2)
    opt = optimization.AdamW(model.trainable_variables, schedule)
  return model, opt


@pytest.mark.core
@pytest.mark.xla
def test_whole_replica_step_compiles_with_xla(demo_paths):
  """Forward, backward and the AdamW update, all inside one XLA cluster."""
  preprocessor = hub.load(demo_paths["preprocessor"])
  strategy = tf.distribute.get_strategy()
  model, opt = _build(strategy, demo_paths["encoder"], dropout=0.1)
  step = tf.function(
      train_step.make_train_step(model, opt, BATCH), jit_compile=True)
  before = [v.numpy().copy() for v in model.trainable_variables]
  out = step(_batch(preprocessor))
  assert np.isfinite(float(out["loss"])) and float(out["grad_norm"]) > 0
  assert int(opt.iterations) == 1
  changed = [
      not np.array_equal(b, v.numpy())
      for b, v in zip(before, model.trainable_variables)
  ]
  assert all(changed)


@pytest.mark.core
@pytest.mark.xla
def test_negative_control_string_preprocessor_inside_step_fails_xla(demo_paths):
  """The common recipe's mistake: text ops inside the compiled step."""
  preprocessor = hub.load(demo_paths["preprocessor"])
  model, opt = _build(tf.distribute.get_strategy(), demo_paths["encoder"])
  inner = train_step.make_train_step(model, opt, BATCH)
  packer = preprocessing.make_packer(preprocessor, SEQ)

  @tf.function(jit_compile=True)
  def step_with_strings(texts, labels):
    batch = packer(texts)
    batch["label"] = labels
    return inner(batch)

  # XLA on CPU fails like the TPU rewrite does: the lookup-table resource is
  # handed to the compiled cluster as if it were a variable (RET_CHECK), or
  # a string op is refused outright.
  with pytest.raises(
      (tf.errors.InvalidArgumentError, tf.errors.UnimplementedError,
       tf.errors.InternalError)) as info:
    step_with_strings(tf.constant(TEXTS), tf.zeros([BATCH], tf.int32))
  message = str(info.value)
  assert ("RET_CHECK" in message or "compil" in message.lower() or
          "XLA" in message), message
  assert int(opt.iterations) == 0


def _train(strategy, encoder_path, batches, steps, accumulation_steps=1):
  model, opt = _build(strategy, encoder_path)
  step = train_step.make_train_step(
      model,
      opt,
      int(batches[0]["label"].shape[0]),
      accumulation_steps=accumulation_steps)

  @tf.function
  def run(batch):
    out = strategy.run(step, args=(batch,))
    return strategy.reduce(tf.distribute.ReduceOp.SUM, out["loss"], axis=None)

  losses = []
  for i in range(steps):
    ds = tf.data.Dataset.from_tensors(batches[i])
    dist = iter(strategy.experimental_distribute_dataset(ds))
    losses.append(float(run(next(dist))))
  weights = [v.numpy() for v in model.trainable_variables]
  return losses, weights


@pytest.fixture(scope="module")
def strategies():
  """One replica and two. The two reduce through one device, not collective
  ops: collective instance keys restart with every MirroredStrategy, and the
  process-wide collective executor keeps the shapes an earlier test's
  strategy sent under the same key (a test-process artefact; a run has one
  strategy)."""
  return (tf.distribute.OneDeviceStrategy("/cpu:0"),
          tf.distribute.MirroredStrategy(
              ["/cpu:0", "/cpu:1"],
              cross_device_ops=tf.distribute.ReductionToOneDevice()))


@pytest.mark.core
def test_one_replica_and_two_accumulating_give_the_same_weights(
    demo_paths, no_dropout_encoder, strategies):
  preprocessor = hub.load(demo_paths["preprocessor"])
  batches = [_batch(preprocessor, start=i) for i in range(5)]
  one, two = strategies
  assert two.num_replicas_in_sync == 2
  loss1, w1 = _train(one, no_dropout_encoder, batches, 5)
  # Two replicas, each accumulating 2 micro-batches of 2 (replica-count
  # independence at K=1 is multi_worker_test's, with real processes).
  loss2, w2 = _train(two, no_dropout_encoder, batches, 5, accumulation_steps=2)
  np.testing.assert_allclose(loss1, loss2, atol=1e-5)
  assert loss1[0] != loss1[-1]
  for a, b in zip(w1, w2):
    np.testing.assert_allclose(a, b, atol=1e-5)


@pytest.mark.core
def test_gradient_accumulation_equals_the_whole_batch(demo_paths,
                                                      no_dropout_encoder,
                                                      strategies):
  """K=2 micro-batches of 8 give the weights of one batch of 16 (dropout
  off); the loss is the whole batch's. (On two replicas: the test above.)"""
  preprocessor = hub.load(demo_paths["preprocessor"])
  batches = [_batch(preprocessor, start=i, size=16) for i in range(2)]
  one, _ = strategies
  whole_loss, whole = _train(one, no_dropout_encoder, batches, 2)
  loss, weights = _train(
      one, no_dropout_encoder, batches, 2, accumulation_steps=2)
  np.testing.assert_allclose(loss, whole_loss, atol=1e-6)
  for a, b in zip(weights, whole):
    np.testing.assert_allclose(a, b, atol=1e-5)


@pytest.mark.xla
def test_accumulating_step_compiles_with_xla(demo_paths):
  preprocessor = hub.load(demo_paths["preprocessor"])
  model, opt = _build(tf.distribute.get_strategy(), demo_paths["encoder"])
  step = tf.function(
      train_step.make_train_step(model, opt, BATCH, accumulation_steps=4),
      jit_compile=True)
  out = step(_batch(preprocessor))
  assert np.isfinite(float(out["loss"])) and int(opt.iterations) == 1
