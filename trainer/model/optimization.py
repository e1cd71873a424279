"""AdamW with decoupled weight decay, warmup + linear decay, clipping.

Our own optimizer rather than a Keras one: it does not depend on which Keras
is installed, its slots are plain variables created under the strategy scope,
and its update is ordinary TF math that XLA (and so the TPU) compiles.
"""

import re

import tensorflow as tf

from trainer.runtime import host

# Variables whose names match are not weight-decayed (BERT convention).
NO_DECAY_PATTERN = r"layer_norm|LayerNorm|/bias|/beta|/gamma"


class WarmupLinearDecay:
  """Learning rate for the update with 0-based index `step`.

  With t = step + 1 updates done (1..total):
    t <= warmup: peak * t / warmup         (linear warmup, peak at the last
                                            warmup update)
    t >  warmup: peak * (total - t) / (total - warmup)
                                           (linear decay, 0 at the last update)
  """

  def __init__(self, peak, total_steps, warmup_steps):
    if not 0 <= warmup_steps <= total_steps or total_steps < 1:
      raise ValueError(f"need 0 <= warmup_steps ({warmup_steps}) <= "
                       f"total_steps ({total_steps}) and total_steps >= 1")
    self.peak = float(peak)
    self.total = int(total_steps)
    self.warmup = int(warmup_steps)

  def __call__(self, step):
    t = tf.cast(step, tf.float32) + 1.0
    warm = self.peak * t / max(self.warmup, 1)
    decay = self.peak * (self.total - t) / max(self.total - self.warmup, 1)
    lr = tf.where(t <= self.warmup, warm, decay)
    return tf.maximum(lr, 0.0)


def global_norm(grads):
  """sqrt(sum of squares) over `grads`: one fused pass per tensor
  (`l2_loss` is sum(g^2) / 2), where square-then-sum took two and a
  temporary the size of the model (3.5x the time for MiniLM on a CPU)."""
  return tf.sqrt(2.0 * tf.add_n([tf.nn.l2_loss(g) for g in grads]))


class LossScale(tf.Module):
  """Dynamic loss scaling for float16: the loss is multiplied by `scale`
  before the gradient, the gradients divided by it after.

  A step whose gradients are not all finite (float16 overflowed) applies
  nothing: the scale halves (not below 1) and the step counts in `skipped`.
  After `growth_interval` finite steps in a row the scale doubles. Its three
  variables are checkpointed with the optimizer, so a resumed run goes on
  with the same scale. Create it under the strategy scope; `update` runs in
  cross-replica context (AdamW's merge_call).
  """

  def __init__(self, initial=2.0**15, growth_interval=2000, name="loss_scale"):
    super().__init__(name=name)
    self.growth_interval = int(growth_interval)
    agg = tf.VariableAggregation.ONLY_FIRST_REPLICA
    with tf.name_scope(name):
      self.scale = tf.Variable(
          float(initial), trainable=False, name="scale", aggregation=agg)
      self.good_steps = tf.Variable(
          0,
          dtype=tf.int64,
          trainable=False,
          name="good_steps",
          aggregation=agg)
      self.skipped = tf.Variable(
          0, dtype=tf.int64, trainable=False, name="skipped", aggregation=agg)

  def update(self, finite):
    """After a step: grow, or halve and count the skip. Returns the ops."""
    good = tf.where(finite, self.good_steps + 1, tf.constant(0, tf.int64))
    grow = good >= self.growth_interval
    scale = tf.where(finite, tf.where(grow, self.scale * 2.0, self.scale),
                     tf.maximum(self.scale / 2.0, 1.0))
    return [
        self.scale.assign(scale),
        self.good_steps.assign(tf.where(grow, tf.constant(0, tf.int64), good)),
        self.skipped.assign_add(tf.cast(tf.logical_not(finite), tf.int64))
    ]


class AdamW(tf.Module):
  """Adam with bias correction and decoupled weight decay.

  For each variable w with gradient g at update t (1-based):
    m = b1 m + (1 - b1) g;  v = b2 v + (1 - b2) g^2
    w -= lr * (m / (1 - b1^t) / (sqrt(v / (1 - b2^t)) + eps) + wd * w)
  where wd is 0 for LayerNorm and bias variables and lr is the schedule's
  rate times the variable's `rate_multipliers` factor (layer-wise decay;
  the decoupled decay uses it too). Gradients are clipped to `clip_norm` by
  global norm first (0 disables clipping).

  With `ema_decay` d > 0 it also keeps an exponential moving average of
  each variable (`ema`, starting at its initial value), after each update:
    ema = d_t ema + (1 - d_t) w,  d_t = min(d, t / (t + 9))
  (the ramp keeps the pretrained start from dominating a short run). The
  averages are checkpointed with the slots; `swap_average()` exchanges
  them with the weights (evals and exports use the average).

  Create it under the strategy scope; call `apply` in replica context with
  gradients that are already summed over replicas.
  """

  def __init__(self,
               variables,
               schedule,
               weight_decay=0.01,
               beta_1=0.9,
               beta_2=0.999,
               epsilon=1e-6,
               clip_norm=1.0,
               no_decay_pattern=NO_DECAY_PATTERN,
               rate_multipliers=None,
               ema_decay=0.0,
               name="adamw"):
    super().__init__(name=name)
    self.schedule = schedule
    self.ema_decay = float(ema_decay)
    self.beta_1, self.beta_2, self.epsilon = beta_1, beta_2, epsilon
    self.clip_norm = clip_norm
    self._variables = list(variables)
    self.decay_rates = [
        0.0 if re.search(no_decay_pattern, v.name) else weight_decay
        for v in self._variables
    ]
    # Per-variable learning-rate factors (layer-wise decay), Python floats:
    # one scalar multiply per variable and update.
    self.rate_multipliers = list(rate_multipliers or
                                 [1.0] * len(self._variables))
    if len(self.rate_multipliers) != len(self._variables):
      raise ValueError("rate_multipliers must align with the variables")
    # On CPUs and GPUs one XLA kernel per variable: it reads var, m, v and
    # the gradient and writes var, m and v, where TF's ops (ApplyAdam, the
    # decay, the clipping) made a pass each: 40% less optimizer time for
    # MiniLM on a CPU (BUILD_NOTES "The optimizer"). Traced and compiled
    # once per variable shape.
    # (Plain ops where XLA cannot compile for the CPU: tensorflow-tpu.)
    self._fused_update = (
        _by_handles(
            tf.function(adamw_update, jit_compile=True, autograph=False))
        if _xla_compiles() else adamw_update)
    with tf.name_scope(name):
      self.iterations = tf.Variable(
          0,
          dtype=tf.int64,
          trainable=False,
          name="iterations",
          aggregation=tf.VariableAggregation.ONLY_FIRST_REPLICA)
      self.m, self.v = [], []
      for var in self._variables:
        with tf.distribute.get_strategy().extended.colocate_vars_with(var):
          self.m.append(
              tf.Variable(
                  tf.zeros(var.shape, var.dtype), trainable=False, name="m"))
          self.v.append(
              tf.Variable(
                  tf.zeros(var.shape, var.dtype), trainable=False, name="v"))
      self.ema = []
      for var in self._variables if self.ema_decay else ():
        with tf.distribute.get_strategy().extended.colocate_vars_with(var):
          self.ema.append(
              tf.Variable(var.read_value(), trainable=False, name="ema"))

  def swap_average(self):
    """Exchanges each variable with its moving average (cross-replica
    context, between loops); twice restores both exactly."""
    for var, ema in zip(self._variables, self.ema):
      held = tf.identity(var.read_value())
      var.assign(ema.read_value())
      ema.assign(held)

  def learning_rate(self):
    return self.schedule(self.iterations)

  def apply(self, grads, loss_scale=None):
    """Clips and applies `grads` (aligned with the variables).

    With a `LossScale`, `grads` are already unscaled; a step whose norm is
    not finite changes no weight or slot (the step counter still moves on,
    so the schedule and the data position stay those of the plan) and
    updates the scale instead.

    Returns:
      The global norm of `grads` before clipping, float32 scalar.
    """
    # Once: an embedding's IndexedSlices would be made dense by each user.
    grads = [tf.convert_to_tensor(g) for g in grads]
    norm = global_norm(grads)
    # Same formula as tf.clip_by_global_norm, without its NaN special case
    # so a non-finite gradient stays visible in the reported norm; applied
    # inside each variable's update, not as a pass of its own.
    clip = (
        self.clip_norm / tf.maximum(norm, self.clip_norm)
        if self.clip_norm > 0 else tf.constant(1.0))
    lr = self.learning_rate()
    if loss_scale is None:
      tf.distribute.get_replica_context().merge_call(
          self._update_all, args=(grads, clip, lr))
    else:
      tf.distribute.get_replica_context().merge_call(
          self._update_scaled, args=(grads, clip, lr, loss_scale, norm))
    return norm

  def _update_scaled(self, strategy, grads, clip, lr, loss_scale, norm):
    """Cross-replica: the update if `norm` is finite, else only the step
    counter; then the loss scale. `norm` is the same on every replica (the
    gradients were all-reduced), so every replica takes the same branch."""
    finite = tf.math.is_finite(strategy.experimental_local_results(norm)[0])

    def after(result, value):
      with tf.control_dependencies(tf.nest.flatten(result)):
        return tf.constant(value)

    done = tf.cond(
        finite,
        lambda: after(self._update_all(strategy, grads, clip, lr), True),
        lambda: after(self.iterations.assign_add(1), False))
    with tf.control_dependencies([done]):
      return tf.group(loss_scale.update(finite))

  def _update_all(self, strategy, grads, clip, lr):
    t = tf.cast(self.iterations + 1, tf.float32)
    beta_1_power = tf.pow(self.beta_1, t)
    beta_2_power = tf.pow(self.beta_2, t)
    # m_hat / (sqrt(v_hat) + eps) as lr_t * m / (sqrt(v) + eps_t): the bias
    # corrections folded into two scalars, as TF's ApplyAdam folds them.
    correction = tf.sqrt(1.0 - beta_2_power) / (1.0 - beta_1_power)
    epsilon = self.epsilon * tf.sqrt(1.0 - beta_2_power)
    # The average's ramp, at the update's 0-based index.
    ema_decay = tf.minimum(self.ema_decay, t / (t + 9.0))
    # TPUs compile the whole step, so the plain ops fuse there; elsewhere
    # XLA fuses each variable's update into one kernel (`_fused_update`).
    update = adamw_update if _is_tpu(strategy) else self._fused_update
    updates = []
    for i, (var, g, m, v, rate, factor) in enumerate(
        zip(self._variables, grads, self.m, self.v, self.decay_rates,
            self.rate_multipliers)):
      average = dict(ema=self.ema[i], ema_decay=ema_decay) if self.ema else {}
      # `lr` and `clip` come from the replicas (each device's own copy);
      # `update` combines them with the rest on the variable's device.
      updates.append(
          strategy.extended.update(
              var,
              update,
              args=(m, v, g, clip, lr, tf.constant(factor, tf.float32),
                    tf.constant(rate, tf.float32), correction, epsilon,
                    self.beta_1, self.beta_2),
              kwargs=average,
              group=False))
    with tf.control_dependencies(tf.nest.flatten(updates)):
      return self.iterations.assign_add(1)


def _xla_compiles():
  """Whether XLA compiles for the CPU in this TensorFlow build (probed
  eagerly, should an optimizer be made inside a tf.function)."""
  with tf.init_scope():
    return host.xla_cpu_problem() is None


def _is_tpu(strategy):
  return isinstance(strategy, tf.distribute.TPUStrategy)


def adamw_update(var,
                 m,
                 v,
                 grad,
                 clip,
                 lr,
                 factor,
                 rate,
                 correction,
                 epsilon,
                 beta_1,
                 beta_2,
                 ema=None,
                 ema_decay=None):
  """One variable's AdamW update, in place:

    g = clip * grad;  m += (1 - b1) (g - m);  v += (1 - b2) (g^2 - v)
    var -= lr' * (rate * var + correction * m / (sqrt(v) + epsilon))

  with lr' = lr * factor (layer-wise decay), `correction` and `epsilon`
  carrying the bias corrections and `rate` the weight decay (0: none).
  With `ema`, the moving average then follows the new value. `var`, `m`,
  `v` and `ema` are variables or their resource handles (`_by_handles`).
  """
  g = tf.convert_to_tensor(grad)
  dtype = g.dtype
  g = tf.cast(clip, dtype) * g
  m_new = _read(m, dtype) + (g - _read(m, dtype)) * (1.0 - beta_1)
  v_new = _read(v, dtype) + (tf.square(g) - _read(v, dtype)) * (1.0 - beta_2)
  lr = lr * factor
  decay, step_size = tf.cast(lr * rate, dtype), tf.cast(lr * correction, dtype)
  w = _read(var, dtype)
  w_new = w - decay * w - step_size * m_new / (
      tf.sqrt(v_new) + tf.cast(epsilon, dtype))
  ops = [_assign(m, m_new), _assign(v, v_new), _assign(var, w_new)]
  if ema is not None:
    d = tf.cast(ema_decay, dtype)
    ops.append(_assign(ema, d * _read(ema, dtype) + (1.0 - d) * w_new))
  # A scalar to wait on, not the new value: an output of the XLA kernel
  # would be one more write of the variable.
  with tf.control_dependencies(ops):
    return tf.constant(True)


def _read(x, dtype):
  if isinstance(x, tf.Variable):
    return x.read_value()
  return tf.raw_ops.ReadVariableOp(resource=x, dtype=dtype)


def _assign(x, value):
  if isinstance(x, tf.Variable):
    return x.assign(value)
  return tf.raw_ops.AssignVariableOp(resource=x, value=value)


def _by_handles(kernel):
  """`kernel` (a tf.function of `adamw_update`) called with the variables'
  resource handles: called with the variables themselves under a
  MirroredStrategy, one trace served every variable of a shape but kept
  updating the first one's slots (TF 2.21). A handle's trace is keyed by
  its variable's shape, and it updates the variable it is given."""

  def update(var, m, v, *args, ema=None, ema_decay=None):
    ema = None if ema is None else ema.handle
    return kernel(
        var.handle, m.handle, v.handle, *args, ema=ema, ema_decay=ema_decay)

  return update
