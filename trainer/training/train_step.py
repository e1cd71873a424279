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

import numpy as np
import tensorflow as tf

from trainer.evaluation import metrics
from trainer.evaluation import tagging
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


def _flat_logits(logits):
  """Per-token logits [rows, seq_length, classes] as [rows * seq_length,
  classes], the way `examples` flattens their labels; others as they
  are."""
  if logits.shape.rank == 3:
    return tf.reshape(logits, [-1, tf.shape(logits)[-1]])
  return logits


def _per_example_loss(logits, labels):
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
    accumulation_steps: K; the replica's batch is cut into K micro-batches
      whose gradients are summed in a `tf.while_loop` before the one
      all-reduce, clipping and AdamW update (`_accumulate`).
    loss_scale: an `optimization.LossScale` (float16): the gradient is
      taken of the scaled loss and unscaled; a step that overflowed applies
      nothing and reports `applied` 0 and `grad_norm` 0, so the loop's mean
      norm (and the NaN rollback) sees only real steps. At scale 1 there is
      no scaling left to blame: a non-finite gradient there is reported.
    per_token: the labels are per token (tagging): the loss is the
      weighted pieces' cross-entropy summed and divided by the weighted
      pieces of the GLOBAL batch (all replicas, all micro-batches: one
      scalar all-reduce a step), so any replica count or
      `accumulation_steps` gives the same update.

  Batch: dict with int32 `input_word_ids`, `input_mask`, `input_type_ids`
  [per_replica_batch, seq_length] and `label` [per_replica_batch]; or this
  replica's shared rows (`features.ROW_INPUTS`, and `label` and `weight`
  [rows, slots]), whose examples count by their weight, so the
  loss is the same sum over the same examples divided by the global batch.
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
    if per_token:
      total = ctx.all_reduce(tf.distribute.ReduceOp.SUM,
                             tf.reduce_sum(batch["weight"]))
      denominator = tf.maximum(total, 1.0)
    else:
      denominator = tf.constant(float(global_batch_size))
    if k == 1:
      loss, grads = forward_backward(batch, dropout_seed, denominator)
    else:
      loss, grads = _accumulate(forward_backward, batch, dropout_seed, k,
                                variables, denominator)
    grads = ctx.all_reduce(tf.distribute.ReduceOp.SUM, grads)
    return dict(loss=loss, **_apply(optimizer, grads, loss_scale))

  return step


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
      per_example = _per_example_loss(_flat_logits(logits), label)
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


# What a regression eval gathers per example, beside its sums: Spearman's
# correlation needs every prediction, not a sum.
GATHERED = ("prediction", "label", "weight")
# What a tagging eval gathers per token: entities are spans of words, so
# each word's tag (its first piece's) is put back into its sentence on the
# host (`sentence`: its sentence's place in the split; `word`: its place in
# the sentence, -1 off a first piece).
TAGGED = GATHERED + ("sentence", "word")


def gathered(num_classes, per_token=False):
  """What an eval gathers per example or token (`GATHERED`, `TAGGED`)."""
  if per_token:
    return TAGGED
  return GATHERED if num_classes == 1 else ()


def eval_layout(num_classes, per_token=False):
  """(name, shape) of what one eval pass sums: loss, correct and weight;
  the confusion counts [true, predicted]; for two classes the histograms of
  the positive class's probability for positive and negative examples
  (`metrics.PR_BUCKETS` buckets, the PR curve's data). A regression
  (`num_classes=1`) sums loss and weight and gathers `GATHERED`; tagging
  (`per_token`) sums loss, correct and weight over the words and gathers
  `TAGGED`."""
  if per_token:
    return [("loss_sum", ()), ("correct_sum", ()), ("weight_sum", ())]
  if num_classes == 1:
    return [("loss_sum", ()), ("weight_sum", ())]
  layout = [("loss_sum", ()), ("correct_sum", ()), ("weight_sum", ()),
            ("confusion", (num_classes, num_classes))]
  if num_classes == 2:
    layout += [("positive_histogram", (metrics.PR_BUCKETS,)),
               ("negative_histogram", (metrics.PR_BUCKETS,))]
  return layout


def _pair_counts(true, index, size):
  """[classes, size]: sums of the rows of `true` by `index` (int32 [b]);
  O(batch x classes), exact, and static-shaped for TPUs."""
  return tf.transpose(tf.math.unsorted_segment_sum(true, index, size))


def make_eval_step(model, num_classes, per_token=False):
  """Returns step(batch) -> this replica's sums of `eval_layout`.

  Batch as for training plus float32 `weight` [per_replica_batch]: 1 for
  real examples, 0 for the padding that fills the last batch, so every eval
  example counts exactly once and shapes stay static. Counts are float32
  sums of weights (exact up to 2**24 examples). `per_token` (tagging):
  the labels and weights are per token, and each token's prediction is
  gathered with its `sentence` and `word` (`TAGGED`).
  """

  def step(batch):
    logits = _flat_logits(model(features.encoder_inputs(batch), training=False))
    label, weight = examples(batch)
    loss = _per_example_loss(logits, label)
    if per_token:
      predicted = tf.argmax(logits, axis=-1, output_type=tf.int32)
      flat = lambda key: tf.cast(tf.reshape(batch[key], [-1]), tf.float32)
      return dict(
          loss_sum=tf.reduce_sum(loss * weight),
          correct_sum=tf.reduce_sum(
              tf.cast(tf.equal(predicted, label), tf.float32) * weight),
          weight_sum=tf.reduce_sum(weight),
          prediction=tf.cast(predicted, tf.float32),
          label=tf.cast(label, tf.float32),
          weight=weight,
          sentence=flat("sentence"),
          word=flat("word"))
    if num_classes == 1:
      return dict(
          loss_sum=tf.reduce_sum(loss * weight),
          weight_sum=tf.reduce_sum(weight),
          prediction=logits[:, 0],
          label=label,
          weight=weight)
    predicted = tf.argmax(logits, axis=-1, output_type=tf.int32)
    correct = tf.cast(tf.equal(predicted, label), tf.float32)
    # Weighted one-hot rows of the true class; counts are sums, not matmuls
    # (a TPU's float32 matmul would take bfloat16 passes).
    true = tf.one_hot(label, num_classes) * weight[:, None]
    out = dict(
        loss_sum=tf.reduce_sum(loss * weight),
        correct_sum=tf.reduce_sum(correct * weight),
        weight_sum=tf.reduce_sum(weight),
        confusion=_pair_counts(true, predicted, num_classes))
    if num_classes == 2:
      positive = tf.nn.softmax(tf.cast(logits, tf.float32))[:, 1]
      bucket = tf.minimum(
          tf.cast(tf.floor(positive * metrics.PR_BUCKETS), tf.int32),
          metrics.PR_BUCKETS - 1)
      counts = _pair_counts(true, bucket, metrics.PR_BUCKETS)  # [2, buckets]
      out.update(positive_histogram=counts[1], negative_histogram=counts[0])
    return out

  return step


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


def make_eval_loop(strategy, step, num_classes, per_token=False):
  """Returns eval_loop(group) -> the float32 sums of `eval_layout` over the
  real batches of a distributed eval group (`input_pipeline.eval_groups`);
  for a regression also `GATHERED`, each [the group's examples incl.
  padding] in order. Traced once per group shape (bucket or row count)."""
  layout = eval_layout(num_classes, per_token)
  sizes = [int(np.prod(shape, dtype=np.int64)) for _, shape in layout]
  gathered_ = gathered(num_classes, per_token)

  def replica_step(group, i):
    return step(batch_of(group, i))

  @tf.function(autograph=False)  # as train_loop
  def eval_loop(group):
    # The sums of `layout` in one flat accumulator (one loop variable).
    totals = tf.zeros([sum(sizes)])
    arrays = tuple(
        tf.TensorArray(
            tf.float32,
            size=0,
            dynamic_size=True,
            infer_shape=False,
            element_shape=tf.TensorShape([None]))  # concat of none: [0]
        for _ in gathered_)
    count = group_count(strategy, group)

    def body(i, totals, arrays):
      out = strategy.run(replica_step, args=(group, i))
      totals += tf.concat([
          tf.reshape(
              strategy.reduce(tf.distribute.ReduceOp.SUM, out[name], axis=None),
              [-1]) for name, _ in layout
      ], 0)
      arrays = tuple(
          a.write(i, tf.cast(strategy.gather(out[name], axis=0), tf.float32))
          for a, name in zip(arrays, gathered_))
      return i + 1, totals, arrays

    _, totals, arrays = tf.while_loop(lambda i, *_: i < count, body,
                                      (tf.constant(0), totals, arrays))
    parts = tf.split(totals, sizes)
    result = {
        name: tf.reshape(part, shape)
        for (name, shape), part in zip(layout, parts)
    }
    result.update({name: a.concat() for a, name in zip(arrays, gathered_)})
    return result

  eval_loop.layout, eval_loop.gathered = layout, gathered_
  return eval_loop


def _sum_groups(eval_loop, groups):
  """The eval sums over every group of a distributed eval dataset (the
  gathered arrays concatenated in order)."""
  totals = None
  for group in groups:
    out = {k: v.numpy() for k, v in eval_loop(group).items()}
    if totals is None:
      totals = out
      continue
    for key, value in out.items():
      totals[key] = (
          np.concatenate([totals[key], value])
          if key in eval_loop.gathered else totals[key] + value)
  return totals


def evaluate(eval_loop, groups, metric_names=("accuracy",), class_names=()):
  """One eval pass over a distributed dataset of eval groups: mean loss, the
  example count and `metric_names` (`metrics.from_confusion` /
  `from_scores`); for classification also accuracy, the confusion matrix
  (int counts, rows: true class) and, for two classes, the PR histograms
  (`histograms`: positive, negative); for tagging (`TAGGED` gathered,
  `class_names` the tags) entity F1, precision and recall, token accuracy
  and `per_type` (`evaluation.tagging`), `examples` the sentences."""
  totals = _sum_groups(eval_loop, groups)
  if totals is None:  # an empty split: the sums of no batch
    totals = {k: np.zeros(shape, np.float32) for k, shape in eval_loop.layout}
    totals.update({k: np.zeros([0], np.float32) for k in eval_loop.gathered})
  n = max(float(totals["weight_sum"]), 1.0)
  out = dict(
      loss=float(totals["loss_sum"]) / n,
      examples=int(round(float(totals["weight_sum"]))))
  if "sentence" in totals:
    out.update(_tagging(totals, class_names))
    return out
  if "prediction" in totals:
    real = totals["weight"] > 0
    out.update(
        metrics.from_scores(totals["prediction"][real], totals["label"][real],
                            metric_names))
    return out
  out.update(
      accuracy=float(totals["correct_sum"]) / n,
      confusion=np.rint(totals["confusion"]).astype(np.int64))
  out.update(
      metrics.from_confusion(out["confusion"],
                             [m for m in metric_names if m != "accuracy"]))
  if "positive_histogram" in totals:
    out["histograms"] = tuple(
        np.rint(totals[k]).astype(np.int64)
        for k in ("positive_histogram", "negative_histogram"))
  return out


def _tagging(totals, class_names):
  """The tagging metrics of an eval's gathered tokens: each sentence's
  words put back in order (by `sentence` and `word`), their gold and
  predicted tags scored (`evaluation.tagging`)."""
  real = totals["weight"] > 0
  sentence = totals["sentence"][real].astype(np.int64)
  word = totals["word"][real].astype(np.int64)
  order = np.lexsort((word, sentence))
  sentence, names = sentence[order], np.asarray(class_names, dtype=object)
  gold = names[totals["label"][real][order].astype(np.int64)]
  predicted = names[totals["prediction"][real][order].astype(np.int64)]
  cuts = np.flatnonzero(np.diff(sentence)) + 1
  report = tagging.tagging_metrics(
      [list(g) for g in np.split(gold, cuts)] if len(gold) else [],
      [list(p) for p in np.split(predicted, cuts)] if len(gold) else [])
  return dict(
      f1=report["f1"],
      precision=report["precision"],
      recall=report["recall"],
      accuracy=report["accuracy"],
      examples=report["sentences"],
      words=report["tokens"],
      per_type=report["per_type"])
