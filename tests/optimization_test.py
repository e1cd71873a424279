"""AdamW and the learning-rate schedule against independent references."""

import numpy as np
import pytest
import tensorflow as tf

from trainer import optimization


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
                 eps=1e-6):
  params = [p.copy() for p in params]
  m = [np.zeros_like(p) for p in params]
  v = [np.zeros_like(p) for p in params]
  for step, grads in enumerate(grads_seq):
    norm = np.sqrt(sum((g.astype(np.float64)**2).sum() for g in grads))
    if norm > clip:
      grads = [g * clip / norm for g in grads]
    t = step + 1
    lr = lr_fn(step)
    for i, g in enumerate(grads):
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
