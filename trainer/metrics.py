"""Classification metrics from labels and predicted probabilities (NumPy)."""

import numpy as np


def roc_auc(labels, scores):
  """Area under the ROC curve (ties count half), labels in {0, 1}."""
  labels = np.asarray(labels)
  scores = np.asarray(scores, np.float64)
  positives, negatives = labels.sum(), len(labels) - labels.sum()
  if positives == 0 or negatives == 0:
    return None
  order = np.argsort(scores, kind="mergesort")
  ranks = np.empty(len(scores), np.float64)
  sorted_scores = scores[order]
  # Average ranks over ties (1-based).
  i = 0
  while i < len(scores):
    j = i
    while j + 1 < len(scores) and sorted_scores[j + 1] == sorted_scores[i]:
      j += 1
    ranks[order[i:j + 1]] = (i + j) / 2.0 + 1.0
    i = j + 1
  rank_sum = ranks[labels == 1].sum()
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
