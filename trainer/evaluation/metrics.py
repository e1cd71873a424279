"""Task metrics (NumPy): from labels and predicted probabilities, from a
confusion matrix (F1 of class 1, Matthews correlation), and from scores
(Pearson, Spearman). Degenerate inputs give 0, never NaN: a model that
predicts one class only has MCC 0, a constant prediction correlation 0.
"""

import numpy as np


def ranks(values):
  """1-based ranks of `values`, ties sharing their average rank."""
  values = np.asarray(values, np.float64)
  order = np.argsort(values, kind="mergesort")
  sorted_values = values[order]
  # Where each run of equal values starts and ends, in sorted order.
  starts = np.flatnonzero(np.r_[True, sorted_values[1:] != sorted_values[:-1]])
  ends = np.r_[starts[1:], len(values)] - 1
  out = np.empty(len(values), np.float64)
  for start, end in zip(starts, ends):
    out[order[start:end + 1]] = (start + end) / 2.0 + 1.0
  return out


def roc_auc(labels, scores):
  """Area under the ROC curve (ties count half), labels in {0, 1}."""
  labels = np.asarray(labels)
  positives, negatives = labels.sum(), len(labels) - labels.sum()
  if positives == 0 or negatives == 0:
    return None
  rank_sum = ranks(scores)[labels == 1].sum()
  return float(
      (rank_sum - positives * (positives + 1) / 2.0) / (positives * negatives))


def classification_metrics(labels, probabilities, class_names):
  """Accuracy, per-class precision/recall/F1, macro F1, confusion matrix and,
  for two classes, ROC AUC of the positive class.

  Args:
    labels: [n] int class ids.
    probabilities: [n, num_classes] float.
    class_names: num_classes names.
  """
  labels = np.asarray(labels, np.int64)
  probabilities = np.asarray(probabilities)
  k = len(class_names)
  predicted = probabilities.argmax(axis=-1)
  confusion = np.zeros([k, k], np.int64)  # rows: true, columns: predicted
  np.add.at(confusion, (labels, predicted), 1)
  per_class = {}
  f1s = []
  for i, name in enumerate(class_names):
    tp = confusion[i, i]
    predicted_i, actual_i = confusion[:, i].sum(), confusion[i, :].sum()
    precision = tp / predicted_i if predicted_i else 0.0
    recall = tp / actual_i if actual_i else 0.0
    f1 = (2 * precision * recall / (precision + recall) if precision +
          recall else 0.0)
    f1s.append(f1)
    per_class[name] = dict(
        precision=float(precision),
        recall=float(recall),
        f1=float(f1),
        support=int(actual_i))
  out = dict(
      examples=int(len(labels)),
      accuracy=float((predicted == labels).mean()) if len(labels) else 0.0,
      per_class=per_class,
      macro_f1=float(np.mean(f1s)),
      confusion_matrix=confusion.tolist(),
      class_names=list(class_names))
  if k == 2:
    out["roc_auc"] = roc_auc(labels, probabilities[:, 1])
  return out


# Buckets of the positive class's probability behind the PR curve: bucket b
# holds p in [b/B, (b+1)/B) (p = 1 in the last), so the curve has B + 1
# thresholds i/B, evenly spaced over [0, 1] as TensorBoard's are.
PR_BUCKETS = 200


def pr_histograms(labels, positive_probability, buckets=PR_BUCKETS):
  """(positive, negative): counts per bucket of the positive class's
  probability, for examples of each true class; computed in float32 as the
  eval step does."""
  labels = np.asarray(labels)
  scaled = np.asarray(positive_probability, np.float32) * np.float32(buckets)
  bucket = np.minimum(np.floor(scaled).astype(np.int64), buckets - 1)
  return (np.bincount(bucket[labels == 1], minlength=buckets),
          np.bincount(bucket[labels != 1], minlength=buckets))


def pr_curve(positive, negative):
  """Counts, precision and recall at thresholds i/B, i = 0..B, from the
  histograms: an example is predicted positive at threshold t when its
  probability is >= t, except at t = 1, which counts none (p = 1 falls in
  the last bucket with [1 - 1/B, 1)). Precision is 0 where nothing is
  predicted positive (TensorBoard's convention)."""
  positive = np.asarray(positive, np.float64)
  negative = np.asarray(negative, np.float64)
  tp = np.append(np.cumsum(positive[::-1])[::-1], 0.0)
  fp = np.append(np.cumsum(negative[::-1])[::-1], 0.0)
  fn, tn = positive.sum() - tp, negative.sum() - fp
  return dict(
      thresholds=np.arange(len(tp)) / (len(tp) - 1),
      true_positive_counts=tp,
      false_positive_counts=fp,
      true_negative_counts=tn,
      false_negative_counts=fn,
      precision=tp / np.maximum(tp + fp, 1.0),
      recall=tp / max(positive.sum(), 1.0))


def f1_positive(confusion):
  """F1 of class 1 (GLUE's MRPC and QQP), confusion [true, predicted]; 0
  when class 1 is never predicted or never true."""
  confusion = np.asarray(confusion, np.float64)
  tp = confusion[1, 1]
  predicted, actual = confusion[:, 1].sum(), confusion[1, :].sum()
  return float(2 * tp / (predicted + actual)) if predicted + actual else 0.0


def matthews(confusion):
  """Matthews correlation of a K-class confusion matrix (Gorodkin's R_K; for
  two classes the usual MCC); 0 when a marginal is constant."""
  confusion = np.asarray(confusion, np.float64)
  total, correct = confusion.sum(), np.trace(confusion)
  predicted, actual = confusion.sum(axis=0), confusion.sum(axis=1)
  covariance = correct * total - predicted @ actual
  spread = ((total**2 - predicted @ predicted) * (total**2 - actual @ actual))
  return float(covariance / np.sqrt(spread)) if spread > 0 else 0.0


def pearson(x, y):
  """Pearson correlation in float64; 0 when either side is constant, NaN
  when a value is not finite (a diverged model shows as such)."""
  if not (np.isfinite(x).all() and np.isfinite(y).all()):
    return float("nan")
  x = np.asarray(x, np.float64) - np.mean(x)
  y = np.asarray(y, np.float64) - np.mean(y)
  spread = np.sqrt((x @ x) * (y @ y))
  return float(x @ y / spread) if spread > 0 else 0.0


def spearman(x, y):
  """Spearman rank correlation: Pearson's of the tie-averaged ranks (NaN
  when a value is not finite, as `pearson`)."""
  if not (np.isfinite(x).all() and np.isfinite(y).all()):
    return float("nan")
  return pearson(ranks(x), ranks(y))


def from_confusion(confusion, names):
  """{name: value} of the classification metrics `names` (accuracy, f1,
  mcc) of a confusion matrix."""
  confusion = np.asarray(confusion)
  total = max(int(confusion.sum()), 1)
  compute = dict(
      accuracy=lambda: float(np.trace(confusion)) / total,
      f1=lambda: f1_positive(confusion),
      mcc=lambda: matthews(confusion))
  return {name: compute[name]() for name in names}


def from_scores(predictions, labels, names):
  """{name: value} of the regression metrics `names` (pearson, spearman)."""
  compute = dict(pearson=pearson, spearman=spearman)
  return {name: compute[name](predictions, labels) for name in names}
