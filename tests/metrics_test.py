"""Metrics against hand computations: accuracy, per-class P/R/F1, ROC AUC,
the PR curve, F1 of class 1, MCC, Pearson and Spearman."""

import numpy as np
import pytest

from trainer.evaluation import metrics


def test_metrics_against_hand_computed_values():
  confusion = [[5, 1], [2, 3]]  # rows: true class
  assert metrics.f1_positive(confusion) == pytest.approx(6 / 9)
  assert metrics.matthews(confusion) == pytest.approx(13 / np.sqrt(840))
  three = [[3, 1, 0], [0, 2, 1], [1, 0, 2]]
  assert metrics.matthews(three) == pytest.approx(36 / 66)
  # One class predicted only: MCC and F1 are 0, not NaN.
  assert metrics.matthews([[5, 0], [3, 0]]) == 0.0
  assert metrics.f1_positive([[5, 0], [3, 0]]) == 0.0
  assert metrics.pearson([1, 2, 3, 4],
                         [2, 4, 5, 9]) == pytest.approx(11 / np.sqrt(130))
  # Ties share their average rank: x ranks 1, 2.5, 2.5, 4.
  assert metrics.spearman([1, 2, 2, 3],
                          [1, 3, 2, 4]) == pytest.approx(4.5 / np.sqrt(22.5))
  assert metrics.pearson([3, 3, 3], [1, 2, 3]) == 0.0
  assert np.isnan(metrics.spearman([1.0, np.nan, 2.0], [1, 2, 3]))
  assert metrics.from_confusion(confusion, ["accuracy", "f1"]) == dict(
      accuracy=pytest.approx(8 / 11), f1=pytest.approx(6 / 9))


def test_metrics_against_a_hand_computation():
  labels = [0, 0, 0, 1, 1, 1, 1, 1]
  p1 = [0.1, 0.6, 0.3, 0.8, 0.4, 0.9, 0.7, 0.2]
  probs = np.stack([1 - np.array(p1), np.array(p1)], axis=1)
  m = metrics.classification_metrics(labels, probs, ["neg", "pos"])
  # predicted: 0 1 0 1 0 1 1 0 -> TN=2 FP=1 FN=2 TP=3
  assert m["confusion_matrix"] == [[2, 1], [2, 3]]
  assert m["accuracy"] == pytest.approx(5 / 8)
  assert m["per_class"]["pos"] == pytest.approx(
      dict(precision=3 / 4, recall=3 / 5, f1=2 / 3, support=5))
  assert m["per_class"]["neg"] == pytest.approx(
      dict(precision=2 / 4, recall=2 / 3, f1=4 / 7, support=3))
  assert m["macro_f1"] == pytest.approx((2 / 3 + 4 / 7) / 2)
  # AUC: pairs (pos, neg) ranked right: 0.8>{.1,.6,.3}=3, .4>{.1,.3}=2,
  # .9=3, .7>{.1,.6,.3}=3, .2>{.1}=1 -> 12 of 15.
  assert m["roc_auc"] == pytest.approx(12 / 15)
  assert metrics.roc_auc([0, 1, 1], [0.5, 0.5, 0.9]) == pytest.approx(0.75)


def test_pr_curve_against_a_hand_computation():
  # Buckets of 1/4: p = 0.1 -> 0, 0.3 -> 1, 0.5 -> 2 (the edge is the upper
  # bucket's), 0.99 and 1.0 -> 3.
  positive, negative = metrics.pr_histograms([1, 0, 1, 1, 0, 1],
                                             [0.5, 0.1, 0.99, 0.3, 0.5, 1.0],
                                             buckets=4)
  assert positive.tolist() == [0, 1, 1, 2] and negative.tolist() == [1, 0, 1, 0]
  curve = metrics.pr_curve(positive, negative)
  assert curve["thresholds"].tolist() == [0, 0.25, 0.5, 0.75, 1]
  # Predicted positive at threshold t: p >= t.
  assert curve["true_positive_counts"].tolist() == [4, 4, 3, 2, 0]
  assert curve["false_positive_counts"].tolist() == [2, 1, 1, 0, 0]
  assert curve["true_negative_counts"].tolist() == [0, 1, 1, 2, 2]
  assert curve["false_negative_counts"].tolist() == [0, 0, 1, 2, 4]
  assert curve["precision"].tolist() == [4 / 6, 4 / 5, 3 / 4, 1, 0]
  assert curve["recall"].tolist() == [1, 1, 0.75, 0.5, 0]
