"""AdamW and the learning-rate schedule against independent references."""

import numpy as np
import pytest
import tensorflow as tf

from trainer.encoders import bert
from trainer.encoders import demo
from trainer.foundation import errors
from trainer.model import layer_decay
from trainer.model import optimization


def test_schedule_table():
  # total 100 updates, warmup 10: t = step + 1.
  s = optimization.WarmupLinearDecay(1e-3, total_steps=100, warmup_steps=10)
  table = {
      0: 1e-4,  # first update: peak * 1 / 10
      4: 5e-4,  # mid-warmup
      9: 1e-3,  # last warmup update reaches the peak
      10: 1e-3 * 89 / 90,  # first decay update
      54: 1e-3 * 45 / 90,  # mid-decay
      99: 0.0,  # last update
  }
  for step, want in table.items():
    assert float(s(step)) == pytest.approx(want, rel=1e-6, abs=1e-12), step


def test_schedule_without_warmup_and_all_warmup():
  s = optimization.WarmupLinearDecay(2.0, total_steps=4, warmup_steps=0)
  assert [float(s(i)) for i in range(4)] == pytest.approx([1.5, 1.0, 0.5, 0])
  s = optimization.WarmupLinearDecay(2.0, total_steps=4, warmup_steps=4)
  assert [float(s(i)) for i in range(4)] == pytest.approx([0.5, 1, 1.5, 2])


def test_schedule_rejects_warmup_longer_than_run():
  with pytest.raises(ValueError):
    optimization.WarmupLinearDecay(1.0, total_steps=10, warmup_steps=11)


def _numpy_adamw(params,
                 grads_seq,
                 decay,
                 lr_fn,
                 wd,
                 clip,
                 b1=0.9,
                 b2=0.999,
                 eps=1e-6,
                 factors=None):
  params = [p.copy() for p in params]
  m = [np.zeros_like(p) for p in params]
  v = [np.zeros_like(p) for p in params]
  for step, grads in enumerate(grads_seq):
    norm = np.sqrt(sum((g.astype(np.float64)**2).sum() for g in grads))
    if norm > clip:
      grads = [g * clip / norm for g in grads]
    t = step + 1
    for i, g in enumerate(grads):
      lr = lr_fn(step) * (factors[i] if factors else 1.0)
      m[i] = b1 * m[i] + (1 - b1) * g
      v[i] = b2 * v[i] + (1 - b2) * g * g
      mh = m[i] / (1 - b1**t)
      vh = v[i] / (1 - b2**t)
      update = mh / (np.sqrt(vh) + eps)
      if decay[i]:
        update = update + wd * params[i]
      params[i] = params[i] - lr * update
  return params


def test_adamw_matches_numpy_reference_with_decay_exclusion():
  rng = np.random.default_rng(0)
  init = [
      rng.normal(size=(3, 4)).astype(np.float32),
      rng.normal(size=(4,)).astype(np.float32),
      rng.normal(size=(4,)).astype(np.float32)
  ]
  names = ["dense/kernel", "dense/bias", "layer_norm/gamma"]
  variables = [tf.Variable(x, name=n) for x, n in zip(init, names)]
  schedule = optimization.WarmupLinearDecay(
      0.05, total_steps=10, warmup_steps=3)
  opt = optimization.AdamW(variables, schedule, weight_decay=0.1, clip_norm=1.0)
  assert opt.decay_rates == [0.1, 0.0, 0.0]
  grads_seq = [[rng.normal(size=x.shape).astype(np.float32) * 2
                for x in init]
               for _ in range(10)]
  norms = []
  for grads in grads_seq:
    norms.append(float(opt.apply([tf.constant(g) for g in grads])))
  want = _numpy_adamw(
      init,
      grads_seq, [True, False, False],
      lambda s: float(schedule(s)),
      wd=0.1,
      clip=1.0)
  for var, ref in zip(variables, want):
    np.testing.assert_allclose(var.numpy(), ref, rtol=1e-5, atol=1e-6)
  assert int(opt.iterations) == 10
  # Reported norms are before clipping (all of these were clipped).
  np.testing.assert_allclose(
      norms, [
          np.sqrt(sum((g.astype(np.float64)**2).sum()
                      for g in gs))
          for gs in grads_seq
      ],
      rtol=1e-5)
  assert min(norms) > 1.0


def test_adamw_on_two_replicas_updates_each_variable_of_a_shape():
  """Under a MirroredStrategy, two variables of one shape (the kernel is
  traced once per shape) each take their own update on both devices, as
  the NumPy reference says: a trace given the variables themselves kept
  updating the first one's slots (BUILD_NOTES, Pitfalls)."""
  strategy = tf.distribute.MirroredStrategy(
      ["/cpu:0", "/cpu:1"],
      cross_device_ops=tf.distribute.ReductionToOneDevice())
  rng = np.random.default_rng(1)
  init = [rng.normal(size=(4,)).astype(np.float32) for _ in range(3)]
  names = ["a/kernel", "b/kernel", "c/bias"]
  schedule = optimization.WarmupLinearDecay(0.05, total_steps=4, warmup_steps=1)
  with strategy.scope():
    variables = [tf.Variable(x, name=n) for x, n in zip(init, names)]
    opt = optimization.AdamW(variables, schedule, weight_decay=0.1)
  grads_seq = [[rng.normal(size=(4,)).astype(np.float32) * 0.1
                for _ in init]
               for _ in range(4)]

  @tf.function
  def step(grads):

    def replica():
      ctx = tf.distribute.get_replica_context()
      # Each replica holds half; the sum is the gradient.
      return opt.apply(
          ctx.all_reduce(tf.distribute.ReduceOp.SUM, [g / 2 for g in grads]))

    return strategy.run(replica)

  for grads in grads_seq:
    step([tf.constant(g) for g in grads])
  want = _numpy_adamw(
      init,
      grads_seq, [True, True, False],
      lambda s: float(schedule(s)),
      wd=0.1,
      clip=1.0)
  for var, ref in zip(variables, want):
    for copy in var.values:  # each device's
      np.testing.assert_allclose(copy.numpy(), ref, rtol=1e-5, atol=1e-6)


def test_layer_decay_table_of_the_demo_encoder():
  encoder = bert.BertEncoder(
      bert.BertConfig(vocab_size=len(demo.vocabulary()), **demo.DEMO_BERT))
  head = (tf.Variable([[0.0]], name="classifier/kernel"),)
  factors, table = layer_decay.multipliers(encoder.trainable_variables, head,
                                           0.5)
  assert table == {
      "embeddings": 0.125,
      "layer_0": 0.25,
      "layer_1": 0.5,
      "pooler": 0.5,
      "head": 1.0
  }
  by_name = dict(zip([v.name for v in encoder.trainable_variables], factors))
  assert by_name["bert_encoder/word_embeddings/embeddings:0"] == 0.125
  assert by_name["bert_encoder/embeddings_layer_norm/gamma:0"] == 0.125
  assert by_name[
      "bert_encoder/transformer_layer_0/self_attention_query/kernel:0"] == 0.25
  assert by_name["bert_encoder/transformer_layer_1/output/bias:0"] == 0.5
  assert by_name["bert_encoder/pooler_transform/kernel:0"] == 0.5
  assert factors[-1] == 1.0 and len(factors) == len(by_name) + 1
  # 1 = off: every factor 1, no table.
  assert layer_decay.multipliers(encoder.trainable_variables, head,
                                 1.0) == ([1.0] * len(factors), {})


# Model Garden's BertEncoder variable names, as TF Hub's BERT encoders
# carry them (three layers).
HUB_NAMES = [
    "word_embeddings/embeddings", "position_embedding/embeddings",
    "type_embeddings/embeddings", "embeddings/layer_norm/gamma",
    "embeddings/layer_norm/beta"
] + [
    f"transformer/layer_{i}/{part}" for i in range(3)
    for part in ("self_attention/query/kernel",
                 "self_attention/attention_output/bias",
                 "self_attention_layer_norm/gamma", "intermediate/kernel",
                 "output/kernel", "output_layer_norm/beta")
] + ["pooler_transform/kernel", "pooler_transform/bias"]


def test_layer_decay_table_of_tf_hub_naming(tmp_path):
  """Names as they come back from a SavedModel written with them."""
  module = tf.Module()
  module.v = [tf.Variable(tf.zeros([2]), name=n) for n in HUB_NAMES]
  tf.saved_model.save(module, str(tmp_path))
  loaded = tf.saved_model.load(str(tmp_path))
  factors, table = layer_decay.multipliers(loaded.v, (), 0.8)
  assert table == pytest.approx({
      "embeddings": 0.8**4,
      "layer_0": 0.8**3,
      "layer_1": 0.8**2,
      "layer_2": 0.8,
      "pooler": 0.8,
      "head": 1.0
  })
  assert factors == pytest.approx([0.8**4] * 5 + [0.8**3] * 6 + [0.8**2] * 6 +
                                  [0.8] * 6 + [0.8] * 2)


def test_layer_decay_refuses_names_it_cannot_place():
  odd = [tf.Variable(0.0, name=n) for n in ("encoder/w1", "encoder/w2")]
  with pytest.raises(errors.ConfigError) as info:
    layer_decay.multipliers(odd, (), 0.9)
  assert str(info.value) == (
      "--layer_decay=0.9 cannot place 2 encoder variables in a layer, e.g. "
      "['encoder/w1:0', 'encoder/w2:0']: their names follow neither this "
      "project's nor Model Garden's BERT naming (transformer/layer_<i>/, "
      "word_embeddings, ...); use --layer_decay=1")


def test_adamw_with_layer_rates_matches_numpy_reference():
  rng = np.random.default_rng(1)
  init = [rng.normal(size=(3, 4)).astype(np.float32) for _ in range(3)]
  variables = [tf.Variable(x, name=f"w{i}") for i, x in enumerate(init)]
  factors = [0.25, 0.5, 1.0]
  schedule = optimization.WarmupLinearDecay(0.05, total_steps=6, warmup_steps=2)
  opt = optimization.AdamW(
      variables,
      schedule,
      weight_decay=0.1,
      clip_norm=1.0,
      rate_multipliers=factors)
  grads_seq = [[rng.normal(size=x.shape).astype(np.float32)
                for x in init]
               for _ in range(6)]
  for grads in grads_seq:
    opt.apply([tf.constant(g) for g in grads])
  want = _numpy_adamw(
      init,
      grads_seq, [True] * 3,
      lambda s: float(schedule(s)),
      wd=0.1,
      clip=1.0,
      factors=factors)
  for var, ref in zip(variables, want):
    np.testing.assert_allclose(var.numpy(), ref, rtol=1e-5, atol=1e-6)


def test_the_moving_average_follows_each_update_and_swaps_exactly():
  """--ema_decay=0.5: after update t (1-based) the average is
  d_t * previous + (1 - d_t) * the new weights, d_t = min(0.5, t / (t + 9))
  (0.1, 2/11, 0.25, 4/13, 1/3, 0.4, 7/16, 8/17, 0.5, 0.5), from the
  initial weights; the weights themselves follow plain AdamW; two swaps give
  back both exactly."""
  rng = np.random.default_rng(1)
  init = [rng.normal(size=(3, 2)).astype(np.float32)]
  schedule = optimization.WarmupLinearDecay(
      0.05, total_steps=10, warmup_steps=2)
  plain = [tf.Variable(x) for x in init]
  averaged = [tf.Variable(x) for x in init]
  reference = optimization.AdamW(plain, schedule)
  opt = optimization.AdamW(averaged, schedule, ema_decay=0.5)
  assert reference.ema == [] and len(opt.ema) == 1
  want = init[0].astype(np.float64)
  for t in range(1, 11):
    grads = [tf.constant(rng.normal(size=(3, 2)).astype(np.float32))]
    reference.apply(grads)
    opt.apply(grads)
    np.testing.assert_array_equal(averaged[0].numpy(), plain[0].numpy())
    d = min(0.5, t / (t + 9))
    want = d * want + (1 - d) * averaged[0].numpy()
    np.testing.assert_allclose(opt.ema[0].numpy(), want, rtol=1e-6)
  weights, average = averaged[0].numpy(), opt.ema[0].numpy()
  opt.swap_average()
  np.testing.assert_array_equal(averaged[0].numpy(), average)
  opt.swap_average()
  np.testing.assert_array_equal(averaged[0].numpy(), weights)
  np.testing.assert_array_equal(opt.ema[0].numpy(), average)
