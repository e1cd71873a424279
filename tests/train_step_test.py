"""The replica step: XLA-compilable, and independent of the replica count."""

import numpy as np
import pytest
import tensorflow as tf
import tensorflow_hub as hub

import testing
from trainer.data import input_pipeline
from trainer.data import preprocessing
from trainer.encoders import native
from trainer.encoders import placement
from trainer.foundation import features
from trainer.evaluation import metrics
from trainer.foundation import buckets as buckets_lib
from trainer.model import classifier as model_lib
from trainer.model import optimization
from trainer.training import eval_step
from trainer.training import train_step

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
  losses = testing.step_each(strategy, step, batches[:steps])
  return losses, [v.numpy() for v in model.trainable_variables]


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


def _float16_step(strategy, demo_paths, initial_scale, growth_interval=2000):
  """The demo classifier with float16 matmuls, AdamW and a LossScale; the
  distributed step and the pieces a test inspects."""
  with strategy.scope():
    encoder = native.NativeEncoder.load(
        hub.load(demo_paths["encoder"]), "float16")
    model = model_lib.Classifier(encoder, 2, dropout_rate=0.0, seed=3)
    opt = optimization.AdamW(model.trainable_variables,
                             optimization.WarmupLinearDecay(1e-3, 10, 0))
    scale = optimization.LossScale(initial_scale, growth_interval)
  step = train_step.make_train_step(model, opt, BATCH, loss_scale=scale)

  @tf.function
  def run(batch):
    out = strategy.run(step, args=(batch,))
    return {
        k: strategy.reduce(tf.distribute.ReduceOp.MEAN, v, axis=None)
        for k, v in out.items()
    }

  def one(batch):
    ds = tf.data.Dataset.from_tensors(batch)
    return {
        k: float(v) for k, v in run(
            next(iter(strategy.experimental_distribute_dataset(ds)))).items()
    }

  return one, model, opt, scale


def _values(variables):
  return [v.numpy().copy() for v in variables]


@pytest.mark.core
@pytest.mark.parametrize("replicas", [1, 2])
def test_float16_overflow_skips_the_step_and_halves_the_scale(
    demo_paths, strategies, replicas):
  """A scale of 2**40 overflows float16's backward pass (max 65504): the step
  changes no weight and no Adam slot, counts as skipped, halves the scale
  and reports grad norm 0, applied 0 (no NaN for the rollback to see); the
  step counter moves on. A sane scale then trains."""
  strategy = strategies[replicas - 1]
  preprocessor = hub.load(demo_paths["preprocessor"])
  one, model, opt, scale = _float16_step(strategy, demo_paths, 2.0**40)
  weights, slots = _values(model.trainable_variables), _values(opt.m + opt.v)
  out = one(_batch(preprocessor))
  assert out["applied"] == 0.0 and out["grad_norm"] == 0.0
  assert np.isfinite(out["loss"])
  assert float(scale.scale.numpy()) == 2.0**39
  assert int(scale.skipped.numpy()) == 1 and int(scale.good_steps.numpy()) == 0
  assert int(opt.iterations.numpy()) == 1
  for a, b in zip(weights, _values(model.trainable_variables)):
    np.testing.assert_array_equal(a, b)
  for a, b in zip(slots, _values(opt.m + opt.v)):
    np.testing.assert_array_equal(a, b)

  scale.scale.assign(2.0**10)
  out = one(_batch(preprocessor, start=1))
  assert out["applied"] == 1.0 and 0 < out["grad_norm"] < np.inf
  assert int(scale.skipped.numpy()) == 1 and int(scale.good_steps.numpy()) == 1
  assert int(opt.iterations.numpy()) == 2
  changed = [
      not np.array_equal(a, b)
      for a, b in zip(weights, _values(model.trainable_variables))
  ]
  assert all(changed)


@pytest.mark.core
def test_float16_gradients_unscaled_follow_float32(demo_paths,
                                                   no_dropout_encoder,
                                                   strategies):
  """The unscaled float16 update lands where float32's does: one step from
  the same weights, weights within float16's rounding of the matmuls."""
  one_device, _ = strategies
  preprocessor = hub.load(demo_paths["preprocessor"])
  batch = _batch(preprocessor)
  weights = {}
  for precision in ("float32", "float16"):
    with one_device.scope():
      encoder = native.NativeEncoder.load(
          hub.load(no_dropout_encoder), precision)
      model = model_lib.Classifier(encoder, 2, dropout_rate=0.0, seed=3)
      opt = optimization.AdamW(model.trainable_variables,
                               optimization.WarmupLinearDecay(1e-3, 10, 0))
      scale = (optimization.LossScale() if precision == "float16" else None)
    step = tf.function(
        train_step.make_train_step(model, opt, BATCH, loss_scale=scale))
    before = _values(model.trainable_variables)
    out = step(batch)
    assert float(out["applied"]) == 1.0
    weights[precision] = [
        v.numpy() - b for v, b in zip(model.trainable_variables, before)
    ]
  # Adam's first step moves each weight by about lr * sign(g): the updates
  # agree in direction wherever float32's gradient is not tiny.
  a, b = (
      np.concatenate([w.ravel()
                      for w in weights[p]])
      for p in ("float32", "float16"))
  big = np.abs(a) > 5e-4
  assert big.sum() > 10_000
  assert np.mean(np.sign(a[big]) == np.sign(b[big])) > 0.98


def test_loss_scale_grows_after_good_steps_and_stops_halving_at_one():
  scale = optimization.LossScale(initial=2.0, growth_interval=2)
  for finite, expected, good in [(True, 2.0, 1), (True, 4.0, 0),
                                 (False, 2.0, 0), (False, 1.0, 0),
                                 (False, 1.0, 0), (True, 1.0, 1)]:
    scale.update(tf.constant(finite))
    assert float(scale.scale.numpy()) == expected
    assert int(scale.good_steps.numpy()) == good
  assert int(scale.skipped.numpy()) == 3


@pytest.mark.core
def test_mean_pooling_head_and_its_step(demo_paths):
  """--pooling=mean: the head reads the mean of sequence_output over the
  real tokens (a NumPy reference, padding excluded); the step trains with
  the unused pooler's gradient zero, not None."""
  preprocessor = hub.load(demo_paths["preprocessor"])
  with tf.distribute.get_strategy().scope():
    encoder = hub.load(demo_paths["encoder"])
    model = model_lib.Classifier(encoder, 2, dropout_rate=0.0, pooling="mean")
    opt = optimization.AdamW(model.trainable_variables,
                             optimization.WarmupLinearDecay(1e-3, 10, 0))
  batch = _batch(preprocessor)
  inputs = features.encoder_inputs(batch)
  mask = batch["input_mask"].numpy()
  assert 0 < mask.sum() < mask.size  # some padding to exclude
  sequence = encoder(inputs, training=False)["sequence_output"].numpy()
  want = (sequence * mask[..., None]).sum(1) / mask.sum(1, keepdims=True)
  np.testing.assert_allclose(
      placement.of(inputs).mean(sequence).numpy(), want, rtol=1e-5, atol=1e-6)
  np.testing.assert_allclose(
      model(inputs).numpy(),
      want @ model.kernel.numpy() + model.bias.numpy(),
      rtol=1e-4,
      atol=1e-5)
  pooler = [
      i for i, v in enumerate(model.trainable_variables) if "pooler" in v.name
  ]
  assert pooler
  before = [model.trainable_variables[i].numpy().copy() for i in pooler]
  out = tf.function(train_step.make_train_step(model, opt, BATCH))(batch)
  assert np.isfinite(float(out["loss"])) and int(opt.iterations) == 1
  for i, b in zip(pooler, before):
    # No gradient reaches it: Adam's step is 0, only the decoupled decay.
    np.testing.assert_allclose(
        model.trainable_variables[i].numpy(),
        b * (1 - 9e-4 * opt.decay_rates[i]),
        rtol=1e-6,
        atol=1e-9)


@pytest.mark.core
def test_regression_eval_gathers_every_prediction_even_of_an_empty_split(
    demo_paths, no_dropout_encoder, strategies):
  """On 2 replicas the eval loop gathers each prediction, label and weight
  in dataset order (the last batch padded: weight 0); a split with no
  batch gives empty arrays and zero sums, not an error."""
  preprocessor = hub.load(demo_paths["preprocessor"])
  two = strategies[1]
  with two.scope():
    model = model_lib.Classifier(
        hub.load(no_dropout_encoder), 1, dropout_rate=0.0, seed=3)
  examples = _batch(preprocessor, size=2 * BATCH)
  examples["label"] = tf.range(2 * BATCH, dtype=tf.float32) / 4
  examples["weight"] = tf.constant([1.0] * 13 + [0.0] * 3)
  group = _group_of(examples, BATCH, group_size=3)  # 2 batches and a pad
  dataset = tf.data.Dataset.from_tensors(group)
  loop = eval_step.make_eval_loop(two, eval_step.make_eval_step(model, 1), 1)
  out = loop(next(iter(two.experimental_distribute_dataset(dataset))))
  want = model(features.encoder_inputs(examples), training=False)[:, 0]
  np.testing.assert_allclose(out["prediction"], want, rtol=1e-5, atol=1e-6)
  np.testing.assert_array_equal(out["label"], examples["label"])
  np.testing.assert_array_equal(out["weight"], examples["weight"])
  assert float(out["weight_sum"]) == 13.0
  squared = (want.numpy() - examples["label"].numpy())**2
  np.testing.assert_allclose(
      float(out["loss_sum"]), squared[:13].sum(), rtol=1e-5)
  empty = eval_step.evaluate(
      loop, two.experimental_distribute_dataset(dataset.take(0)),
      ("pearson", "spearman"))
  assert empty["examples"] == 0 and empty["loss"] == 0.0
  assert (empty["pearson"], empty["spearman"]) == (0.0, 0.0)


def _group_of(examples, batch, group_size):
  """Batches of `batch` rows of `examples` as one group of `group_size`
  (`input_pipeline.eval_groups`' layout: [batch, group, ...], the batches
  past the real ones zero)."""
  count = int(examples["label"].shape[0]) // batch
  group = {}
  for key, value in examples.items():
    value = tf.reshape(value, [count, batch] + value.shape[1:].as_list())
    value = tf.transpose(value, [1, 0] + list(range(2, len(value.shape))))
    group[key] = tf.pad(value, [[0, 0], [0, group_size - count]] + [[0, 0]] *
                        (len(value.shape) - 2))
  group["meta"] = tf.tile(tf.constant([[0, count]], tf.int32), [batch, 1])
  return group


def test_eval_step_counts_match_the_host_metrics(no_dropout_encoder):
  """The replica's confusion and PR histograms (float32 sums of weights)
  equal the NumPy ones of the same probabilities; padding counts nothing."""
  encoder = tf.saved_model.load(no_dropout_encoder)
  model = model_lib.Classifier(encoder, 2, 0.0, seed=3)
  rng = np.random.default_rng(0)
  batch = dict(
      input_word_ids=tf.constant(rng.integers(5, 60, [24, 16]), tf.int32),
      input_mask=tf.ones([24, 16], tf.int32),
      input_type_ids=tf.zeros([24, 16], tf.int32),
      label=tf.constant(rng.integers(0, 2, [24]), tf.int32),
      weight=tf.constant([1.0] * 20 + [0.0] * 4))
  out = eval_step.make_eval_step(model, 2)(batch)
  probabilities = tf.nn.softmax(
      model(features.encoder_inputs(batch), training=False)).numpy()[:20]
  labels = batch["label"].numpy()[:20]
  host = metrics.classification_metrics(labels, probabilities, ["a", "b"])
  assert out["confusion"].numpy().tolist() == host["confusion_matrix"]
  positive, negative = metrics.pr_histograms(labels, probabilities[:, 1])
  assert out["positive_histogram"].numpy().tolist() == positive.tolist()
  assert out["negative_histogram"].numpy().tolist() == negative.tolist()
  assert float(out["weight_sum"]) == 20.0


def _bucketed_training(strategy, encoder_path, split, packer, spe):
  """Trains 2 epochs of `split` in buckets (4, 8), a loop call per group
  of up to 2 batches of 4; returns (losses, weights, loop)."""
  groups = input_pipeline.train_groups(
      split,
      input_pipeline.labelled(packer),
      testing.layout((4, 8), 4, 2),
      spe,
      seed=1,
      shuffle_buffer=64)
  model, opt = _build(strategy, encoder_path, total_steps=2 * spe)
  loop = train_step.make_train_loop(strategy,
                                    train_step.make_train_step(model, opt, 4))
  losses, shapes = testing.run_groups(strategy, loop, groups, 2 * spe)
  assert len(losses) == 2 * spe and {s[2] for s in shapes} == {4, 8}
  return losses, [v.numpy() for v in model.trainable_variables], loop


@pytest.mark.core
def test_bucketed_groups_give_one_and_two_replicas_the_same_weights(
    tmp_path, demo_paths, no_dropout_encoder, strategies):
  """Groups of two lengths from the real input pipeline: on 1 replica and
  on 2 the same losses and weights, and each strategy's train loop traced
  exactly once per bucket (each trace one XLA program under jit_compile);
  the eval loop too, over two whole passes."""
  preprocessor = hub.load(demo_paths["preprocessor"])
  packer = preprocessing.make_packer(preprocessor, 8)
  testing.varied_csv(tmp_path / "d.csv", 40)
  split = testing.split(tmp_path / "d.csv")
  counts = buckets_lib.counts(
      input_pipeline.length_histogram(split, input_pipeline.labelled(packer),
                                      8), (4, 8))
  assert min(counts) >= 8  # both buckets train
  spe = buckets_lib.steps_per_epoch(counts, 4)
  one, two = strategies
  loss1, w1, loop1 = _bucketed_training(one, no_dropout_encoder, split, packer,
                                        spe)
  loss2, w2, loop2 = _bucketed_training(two, no_dropout_encoder, split, packer,
                                        spe)
  np.testing.assert_allclose(loss1, loss2, atol=1e-5)
  for a, b in zip(w1, w2):
    np.testing.assert_allclose(a, b, atol=1e-5)
  assert loop1.experimental_get_tracing_count() == 2
  assert loop2.experimental_get_tracing_count() == 2
  with two.scope():
    model = model_lib.Classifier(
        hub.load(no_dropout_encoder), 2, dropout_rate=0.0, seed=3)
  eval_loop = eval_step.make_eval_loop(two, eval_step.make_eval_step(model, 2),
                                       2)
  groups = input_pipeline.eval_groups(split, input_pipeline.labelled(packer),
                                      testing.layout((4, 8), 4, 2))
  dist = two.experimental_distribute_dataset(groups)
  passes = [eval_step.evaluate(eval_loop, dist) for _ in range(2)]
  assert [p["examples"] for p in passes] == [40, 40]
  assert passes[0]["loss"] == passes[1]["loss"]
  assert eval_loop.experimental_get_tracing_count() == 2


@pytest.mark.core
def test_shared_rows_train_the_weights_of_fixed_shapes(tmp_path, demo_paths,
                                                       no_dropout_encoder,
                                                       strategies):
  """Dropout off: 2 epochs in shared rows on 2 replicas (2 rows a batch
  of 6, or one example a row when 2 do not hold it) give the loss and the
  final weights of fixed shapes on 1; the train loop is traced once per
  row count. The eval in rows scores as fixed shapes."""
  preprocessor = hub.load(demo_paths["preprocessor"])
  packer = preprocessing.make_packer(preprocessor, 16)
  testing.varied_csv(tmp_path / "d.csv", 40)
  split = testing.split(tmp_path / "d.csv")
  one, two = strategies
  encode = input_pipeline.labelled(packer)
  fixed, w0, _, _ = testing.two_epochs(one, no_dropout_encoder, split, encode,
                                       None, 6)
  losses, weights, loop, shapes = testing.two_epochs(two, no_dropout_encoder,
                                                     split, encode, (2,), 6)
  assert shapes == {2, 6}  # both shapes trained: the overflow too
  assert loop.experimental_get_tracing_count() == 2
  np.testing.assert_allclose(np.sum(losses), np.sum(fixed), atol=1e-4)
  assert fixed[0] != fixed[-1]
  for a, b in zip(weights, w0):
    np.testing.assert_allclose(a, b, atol=1e-5)
  with two.scope():
    model = model_lib.Classifier(
        native.NativeEncoder.load(hub.load(no_dropout_encoder)), 2, seed=3)
  scores = []
  for rows in (None, (2,)):
    eval_loop = eval_step.make_eval_loop(two,
                                         eval_step.make_eval_step(model, 2), 2)
    groups = input_pipeline.eval_groups(split, input_pipeline.labelled(packer),
                                        testing.layout((16,), 6, 2, rows))
    scores.append(
        eval_step.evaluate(eval_loop,
                           two.experimental_distribute_dataset(groups)))
  assert [s["examples"] for s in scores] == [40, 40]
  assert scores[0]["confusion"].tolist() == scores[1]["confusion"].tolist()
  assert abs(scores[0]["loss"] - scores[1]["loss"]) < 1e-6
