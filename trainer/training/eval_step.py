"""Replica eval step factories and the loop that runs them, and the metrics
of a pass: no I/O.

`make_eval_step` (one replica's sums of a batch, `eval_layout`, and what
it gathers per example or token) runs inside `make_eval_loop`'s compiled
loop over a group, as the train step does inside `train_step.
make_train_loop`; `evaluate` sums a pass over every group on the host and
turns the sums into the task's metrics (classification from the confusion
counts, regression from the gathered predictions, tagging from the
gathered tokens put back into their sentences).
"""

import numpy as np
import tensorflow as tf

from trainer.evaluation import metrics
from trainer.evaluation import tagging
from trainer.foundation import features
from trainer.training import train_step

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
    logits = train_step.flat_logits(
        model(features.encoder_inputs(batch), training=False))
    label, weight = train_step.examples(batch)
    loss = train_step.per_example_loss(logits, label)
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


def make_eval_loop(strategy, step, num_classes, per_token=False):
  """Returns eval_loop(group) -> the float32 sums of `eval_layout` over the
  real batches of a distributed eval group (`input_pipeline.eval_groups`);
  for a regression also `GATHERED`, each [the group's examples incl.
  padding] in order. Traced once per group shape (bucket or row count)."""
  layout = eval_layout(num_classes, per_token)
  sizes = [int(np.prod(shape, dtype=np.int64)) for _, shape in layout]
  gathered_ = gathered(num_classes, per_token)

  def replica_step(group, i):
    return step(train_step.batch_of(group, i))

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
    count = train_step.group_count(strategy, group)

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
