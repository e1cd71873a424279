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
