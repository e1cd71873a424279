"""Replica step factories: the math of one train or eval step, no I/O.

The functions returned here run inside `strategy.run` on one replica and see
only int32 tensors of static shape (the batch features and labels), never a
string or a lookup table: that is what lets TPUs and XLA compile them.
"""

import tensorflow as tf

ENCODER_KEYS = ("input_word_ids", "input_mask", "input_type_ids")


def encoder_inputs(batch):
  """The three encoder inputs of a batch (a TF Hub encoder rejects extras)."""
  return {k: batch[k] for k in ENCODER_KEYS}


def _per_example_loss(logits, labels):
  return tf.nn.sparse_softmax_cross_entropy_with_logits(
      labels=labels, logits=logits)


def make_train_step(model,
                    optimizer,
                    global_batch_size,
                    seed=0,
                    jit_compile=False):
  """Returns step(batch) -> {"loss", "grad_norm"} for one replica.

  `loss` is this replica's share of the global mean loss (its per-example
  losses summed and divided by the global batch size), so summing it over
  replicas gives the global mean. Gradients are summed over replicas before
  clipping and the AdamW update, which makes the result independent of the
  number of replicas for a fixed global batch.

  Args:
    model: a `model.Classifier`.
    optimizer: an `optimization.AdamW` over `model.trainable_variables`.
    global_batch_size: int, examples per step over all replicas.
    seed: int, seeds the (stateless) head dropout with the step and replica.
    jit_compile: compile forward and backward with XLA. (TPUs compile the
      whole step with XLA regardless.)

  Batch: dict with int32 `input_word_ids`, `input_mask`, `input_type_ids`
  [per_replica_batch, seq_length] and `label` [per_replica_batch].
  """
  variables = model.trainable_variables

  def forward_backward(batch, dropout_seed):
    with tf.GradientTape() as tape:
      logits = model(
          encoder_inputs(batch), training=True, dropout_seed=dropout_seed)
      loss = tf.nn.compute_average_loss(
          _per_example_loss(logits, batch["label"]),
          global_batch_size=global_batch_size)
    return loss, tape.gradient(loss, variables)

  if jit_compile:
    forward_backward = tf.function(forward_backward, jit_compile=True)

  def step(batch):
    ctx = tf.distribute.get_replica_context()
    replica = tf.cast(ctx.replica_id_in_sync_group, tf.int32)
    dropout_seed = tf.stack([
        tf.constant(seed, tf.int32) + replica,
        tf.cast(optimizer.iterations, tf.int32)
    ])
    loss, grads = forward_backward(batch, dropout_seed)
    grads = ctx.all_reduce(tf.distribute.ReduceOp.SUM, grads)
    grad_norm = optimizer.apply(grads)
    return dict(loss=loss, grad_norm=grad_norm)

  return step


def make_eval_step(model):
  """Returns step(batch) -> sums of loss, correct and weight for one replica.

  Batch as for training plus float32 `weight` [per_replica_batch]: 1 for
  real examples, 0 for the padding that fills the last batch, so every eval
  example counts exactly once and shapes stay static.
  """

  def step(batch):
    logits = model(encoder_inputs(batch), training=False)
    weight = batch["weight"]
    loss = _per_example_loss(logits, batch["label"])
    correct = tf.cast(
        tf.equal(
            tf.argmax(logits, axis=-1, output_type=tf.int32), batch["label"]),
        tf.float32)
    return dict(
        loss_sum=tf.reduce_sum(loss * weight),
        correct_sum=tf.reduce_sum(correct * weight),
        weight_sum=tf.reduce_sum(weight))

  return step


def make_predict_step(model):
  """Returns step(features) -> probabilities [batch, num_classes] float32."""

  def step(features):
    return tf.nn.softmax(
        model(encoder_inputs(features), training=False), axis=-1)

  return step
