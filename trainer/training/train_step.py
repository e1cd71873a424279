"""Replica step factories and the loops that run them: no I/O.

The step functions run inside `strategy.run` on one replica and see only
int32 tensors of static shape (the batch features and labels), never a
string or a lookup table: that is what lets TPUs and XLA compile them. The
loop functions (Orbit's `loop_fns` style) run `num_steps` steps in one
`tf.function`, a `tf.while_loop` around `strategy.run`, `num_steps` a
tensor so the loop never retraces; host work happens between their calls.
The loops and the XLA-compiled functions are traced without AutoGraph
(`autograph=False`): the loops are written as `tf.while_loop`s and nothing
they call branches in Python on a tensor, so converting every function of
the encoder and the optimizer on each trace (a fifth of a demo run's time)
bought nothing.
"""

import tensorflow as tf

from trainer.foundation import features


def examples(batch):
  """(label, weight) of a batch's examples, as the logits come: [batch]
  each, or for shared rows one per slot [rows * slots], an empty slot's
  weight 0; per token ([rows * seq_length]) where the labels are per token
  (tagging). `weight` is None for a training batch at fixed shapes (every
  example real)."""
  label, weight = batch["label"], batch.get("weight")
  if not features.is_rows(batch) and label.shape.rank == 1:
    return label, weight
  return tf.reshape(label, [-1]), tf.reshape(weight, [-1])


def flat_logits(logits):
  """Per-token logits [rows, seq_length, classes] as [rows * seq_length,
  classes], the way `examples` flattens their labels; others as they
  are."""
  if logits.shape.rank == 3:
    return tf.reshape(logits, [-1, tf.shape(logits)[-1]])
  return logits


def per_example_loss(logits, labels):
  """Cross-entropy for class ids; squared error for regression (float32
  labels, one output)."""
  if labels.dtype.is_floating:
    return tf.square(logits[:, 0] - labels)
  return tf.nn.sparse_softmax_cross_entropy_with_logits(
      labels=labels, logits=logits)


def make_train_step(model,
                    optimizer,
                    global_batch_size,
                    seed=0,
                    jit_compile=False,
                    accumulation_steps=1,
                    loss_scale=None,
                    per_token=False):
  """Returns step(batch) -> {"loss", "grad_norm", "applied"} for one replica.

  `loss` is this replica's share of the global mean loss (its losses
  summed over the global batch size), so their sum over replicas is the
  global mean; gradients are summed over replicas before clipping and
  AdamW, so the update does not depend on the replica count.

  Args:
    model: a `model.Classifier`.
    optimizer: an `optimization.AdamW` over `model.trainable_variables`.
    global_batch_size: int, examples per step over all replicas.
    seed: int, seeds the (stateless) head dropout with the step and replica.
    jit_compile: compile forward and backward with XLA (TPUs always do).
    accumulation_steps: K; the replica's batch is cut into K micro-batches
      whose gradients are summed in a `tf.while_loop` before the one
      all-reduce, clipping and AdamW update (`_accumulate`).
    loss_scale: an `optimization.LossScale` (float16): the gradient is
      taken of the scaled loss and unscaled; a step that overflowed applies
      nothing and reports `applied` 0 and `grad_norm` 0, so the loop's mean
      norm (and the NaN rollback) sees only real steps. At scale 1 there is
      no scaling left to blame: a non-finite gradient there is reported.
    per_token: the labels are per token (tagging): the weighted pieces'
      loss over the weighted pieces of the GLOBAL batch (`_denominator`),
      so any replica count or `accumulation_steps` gives one update.

  Batch: dict with int32 `input_word_ids`, `input_mask`, `input_type_ids`
  [per_replica_batch, seq_length] and `label` [per_replica_batch]; or this
  replica's shared rows (`features.ROW_INPUTS`, `label` and `weight`
  [rows, slots]): the same sum over the same examples.
  """
  variables = model.trainable_variables
  k = accumulation_steps
  forward_backward = _forward_backward(model, variables, loss_scale,
                                       jit_compile)

  def step(batch):
    ctx = tf.distribute.get_replica_context()
    replica = tf.cast(ctx.replica_id_in_sync_group, tf.int32)
    dropout_seed = tf.stack([
        tf.constant(seed, tf.int32) + replica,
        tf.cast(optimizer.iterations, tf.int32)
    ])
    denominator = _denominator(ctx, batch, global_batch_size, per_token)
    if k == 1:
      loss, grads = forward_backward(batch, dropout_seed, denominator)
    else:
      loss, grads = _accumulate(forward_backward, batch, dropout_seed, k,
                                variables, denominator)
    grads = ctx.all_reduce(tf.distribute.ReduceOp.SUM, grads)
    return dict(loss=loss, **_apply(optimizer, grads, loss_scale))

  return step


def _denominator(ctx, batch, global_batch_size, per_token):
  """What the summed losses are divided by: the global batch size, or with
  `per_token` the weighted pieces of the global batch (every replica's
  whole batch, before it is cut into micro-batches: one scalar
  all-reduce)."""
  if not per_token:
    return tf.constant(float(global_batch_size))
  total = ctx.all_reduce(tf.distribute.ReduceOp.SUM,
                         tf.reduce_sum(batch["weight"]))
  return tf.maximum(total, 1.0)


def _forward_backward(model, variables, loss_scale, jit_compile):
  """(batch, dropout_seed, denominator) -> (this replica's loss, unscaled
  gradients): the weighted per-example (or per-token) losses summed and
  divided by `denominator` (the global batch size, or the global batch's
  weighted tokens)."""

  def forward_backward(batch, dropout_seed, denominator):
    with tf.GradientTape() as tape:
      logits = model(
          features.encoder_inputs(batch),
          training=True,
          dropout_seed=dropout_seed)
      label, weight = examples(batch)
      per_example = per_example_loss(flat_logits(logits), label)
      if weight is not None:  # shared rows: empty slots count 0
        per_example *= weight
      loss = tf.reduce_sum(per_example) / denominator
      scaled = loss
      if loss_scale is not None:
        scale = loss_scale.scale.read_value()
        scaled = loss * scale
    # Zeros, not None, for what the loss does not reach (the pooler under
    # mean pooling): AdamW and the accumulation sum every variable.
    grads = tape.gradient(
        scaled, variables, unconnected_gradients=tf.UnconnectedGradients.ZERO)
    if loss_scale is None:
      return loss, grads
    return loss, [tf.convert_to_tensor(g) / scale for g in grads]

  if jit_compile:
    return tf.function(forward_backward, jit_compile=True, autograph=False)
  return forward_backward


def _apply(optimizer, grads, loss_scale):
  """{"grad_norm", "applied"} of AdamW's update with `grads`: with a loss
  scale, an overflow (a non-finite norm at a scale above 1) reports norm 0
  and applied 0."""
  if loss_scale is None:
    return dict(grad_norm=optimizer.apply(grads), applied=tf.constant(1.0))
  scale = loss_scale.scale.read_value()
  grad_norm = optimizer.apply(grads, loss_scale)
  overflow = tf.logical_and(
      tf.logical_not(tf.math.is_finite(grad_norm)), scale > 1.0)
  return dict(
      grad_norm=tf.where(overflow, 0.0, grad_norm),
      applied=1.0 - tf.cast(overflow, tf.float32))


def _accumulate(forward_backward, batch, dropout_seed, k, variables,
                denominator):
  """The summed loss and gradients of `batch` cut into `k` micro-batches,
  one after the other in a `tf.while_loop` (no Python state: it compiles
  for TPUs and XLA, and only one micro-batch's activations are alive at a
  time). Each micro-batch's loss is already divided by the global batch
  size, so the sums are the whole batch's. Micro-batch i of a replica
  draws its head dropout with seed (seed + replica) * k + i."""
  micro = {
      name: tf.reshape(x, [k, x.shape[0] // k] + x.shape[1:])
      for name, x in batch.items()
  }
  base = dropout_seed * tf.constant([k, 1], tf.int32)

  def body(i, loss, grads):
    part = {name: x[i] for name, x in micro.items()}
    part_loss, part_grads = forward_backward(part, base + tf.stack([i, 0]),
                                             denominator)
    return (i + 1, loss + part_loss,
            [a + tf.convert_to_tensor(g) for a, g in zip(grads, part_grads)])

  _, loss, grads = tf.while_loop(
      lambda i, *_: i < k, body,
      (tf.constant(0), tf.constant(0.0),
       [tf.zeros(v.shape, v.dtype) for v in variables]))
  return loss, grads


def make_predict_step(model, regression=False):
  """Returns step(features) -> probabilities [batch, num_classes] float32
  (regression: the scores [batch])."""

  def step(batch):
    logits = model(features.encoder_inputs(batch), training=False)
    return logits[:, 0] if regression else tf.nn.softmax(logits, axis=-1)

  return step


def batch_of(group, i):
  """Batch `i` of a group (`input_pipeline.train_groups`: features
  [batch, group_size, ...], batch-major): [batch, ...] features."""
  return {k: v[:, i] for k, v in group.items() if k != "meta"}


def group_count(strategy, group):
  """The real batches of a distributed group (its `meta`, the same on every
  replica), as a scalar tensor."""
  return strategy.experimental_local_results(group["meta"])[0][0, 1]


def make_train_loop(strategy, step):
  """Returns train_loop(group, offset, num_steps) -> (mean loss, mean grad
  norm, steps applied).

  `group` is a distributed group of batches of one length
  (`input_pipeline.train_groups`); the loop runs batches offset ..
  offset + num_steps - 1 of it, one `strategy.run` each inside a
  `tf.while_loop` (`offset` and `num_steps` int32 scalar tensors, so it
  never retraces for them). It is traced once per group shape: once per
  bucket or row count, which is one compiled program each on a TPU or
  under XLA. The loss is averaged over the steps, the gradient norm over
  the steps that applied their update (float16 overflows skip).
  """

  def replica_step(group, i):
    return step(batch_of(group, i))

  @tf.function(autograph=False)  # the module docstring says why
  def train_loop(group, offset, num_steps):

    def body(i, loss_sum, norm_sum, applied):
      out = strategy.run(replica_step, args=(group, i))
      reduce = lambda op, x: strategy.reduce(op, x, axis=None)
      sum_, mean = tf.distribute.ReduceOp.SUM, tf.distribute.ReduceOp.MEAN
      return (i + 1, loss_sum + reduce(sum_, out["loss"]),
              norm_sum + reduce(mean, out["grad_norm"]),
              applied + reduce(mean, out["applied"]))

    zero = tf.constant(0.0)
    _, loss_sum, norm_sum, applied = tf.while_loop(
        lambda i, *_: i < offset + num_steps, body,
        (tf.convert_to_tensor(offset, tf.int32), zero, zero, zero))
    n = tf.cast(num_steps, tf.float32)
    return loss_sum / n, norm_sum / tf.maximum(applied, 1.0), applied

  return train_loop
