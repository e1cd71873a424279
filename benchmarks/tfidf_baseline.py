r"""A floor for any fine-tuned encoder: TF-IDF + a linear model.

    python benchmarks/tfidf_baseline.py \
        --flagfile=flags/sentiment140_minilm_cpu.flags
    python benchmarks/tfidf_baseline.py \
        --flagfile=flags/glue_mrpc_minilm_cpu.flags

Takes the trainer's data flags and reads the splits through the trainer's
own data path (`splits.make_splits`), so the seeded train/validation
carve (or --eval_file) is the very one the fine-tuning run used. One text:
word 1-2 and char_wb 2-5 grams. A sentence pair: each side's features, their
elementwise product and their cosine (what the two share). Logistic
regression for classes, ridge regression for a regression
(--num_classes=1); scored with the trainer's own metrics (--eval_metrics).
Needs scikit-learn (`pip install -e '.[bench]'`). Prints a table.
"""

import os
import sys
import time

from absl import app
from absl import flags
import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from trainer.commands import cli  # noqa: E402
from trainer.data import input_pipeline  # noqa: E402
from trainer.data import splits as splits_lib  # noqa: E402
from trainer.evaluation import metrics  # noqa: E402
from trainer.foundation import tasks  # noqa: E402
from trainer.training import inputs  # noqa: E402

cli.define_config_flags()  # the trainer's flags: the same data, the same split
flags.DEFINE_float(
    "c", 4.0, "Inverse regularization strength of the linear model (ridge: "
    "alpha = 1/c).")
FLAGS = flags.FLAGS


def texts_and_labels(split):
  """([texts] or [(text, text_pair)], labels) of the usable rows."""
  texts, labels = [], []
  for batch_texts, batch_labels in input_pipeline.usable_rows(split).batch(
      1024):
    for t in batch_texts.numpy():
      texts.append(
          t.decode("utf-8") if isinstance(t, bytes) else tuple(
              s.decode("utf-8") for s in t))
    labels.extend(batch_labels.numpy().tolist())
  return texts, np.array(labels)


def _vectorizers():
  from sklearn import feature_extraction  # pylint: disable=g-import-not-at-top
  tfidf = feature_extraction.text.TfidfVectorizer
  # Words and word pairs, plus character 2-5 grams inside word boundaries
  # (robust to the spelling of tweets: "loooove", "gr8").
  return (tfidf(ngram_range=(1, 2), min_df=2, sublinear_tf=True),
          tfidf(
              analyzer="char_wb",
              ngram_range=(2, 5),
              min_df=2,
              sublinear_tf=True))


def features(train, evaluate):
  """(x_train, x_eval) sparse matrices."""
  from scipy import sparse  # pylint: disable=g-import-not-at-top
  vectorizers = _vectorizers()
  if not isinstance(train[0], tuple):
    fit = [v.fit_transform(train) for v in vectorizers]
    return (sparse.hstack(fit).tocsr(),
            sparse.hstack([v.transform(evaluate) for v in vectorizers]).tocsr())
  for v in vectorizers:
    v.fit([t[0] for t in train] + [t[1] for t in train])

  def pair(rows):
    a, b = (
        sparse.hstack([v.transform([r[i]
                                    for r in rows])
                       for v in vectorizers]).tocsr()
        for i in (0, 1))
    shared = a.multiply(b).tocsr()
    norms = np.sqrt(
        np.asarray(a.multiply(a).sum(1)) * np.asarray(b.multiply(b).sum(1)))
    cosine = np.asarray(shared.sum(1)) / np.maximum(norms, 1e-9)
    return sparse.hstack([a, b, shared, sparse.csr_matrix(cosine)]).tocsr()

  return pair(train), pair(evaluate)


def fit_and_score(task, x_train, train_labels, x_eval, eval_labels):
  """(what was fitted, {metric: value}) with the trainer's metrics."""
  from sklearn import linear_model  # pylint: disable=g-import-not-at-top
  if task.regression:
    model = linear_model.Ridge(alpha=1.0 / FLAGS.c)
    model.fit(x_train, train_labels)
    return (f"ridge regression (alpha={1.0 / FLAGS.c:g})",
            metrics.from_scores(
                model.predict(x_eval), eval_labels, task.metrics))
  model = linear_model.LogisticRegression(C=FLAGS.c, max_iter=2000)
  model.fit(x_train, train_labels)
  k = task.num_classes
  confusion = np.zeros([k, k], np.int64)
  np.add.at(confusion, (eval_labels, model.predict(x_eval)), 1)
  names = ("accuracy",) + tuple(m for m in task.metrics if m != "accuracy")
  return (f"logistic regression (C={FLAGS.c:g})",
          metrics.from_confusion(confusion, names))


def main(argv):
  del argv
  c = cli.config_from_flags()
  task = tasks.resolve(c)
  splits = splits_lib.make_splits(task, inputs.data_spec(c, task))
  train_texts, train_labels = texts_and_labels(splits["train"])
  eval_texts, eval_labels = texts_and_labels(splits["validation"])
  start = time.perf_counter()
  x_train, x_eval = features(train_texts, eval_texts)
  kind, scores = fit_and_score(task, x_train, train_labels, x_eval, eval_labels)
  seconds = time.perf_counter() - start
  names = list(scores)
  print("| model | train rows | validation rows | features | " +
        " | ".join(names) + " | fit + predict s |")
  print("|---" * (5 + len(names)) + "|")
  print(f"| TF-IDF (word 1-2 + char_wb 2-5) + {kind} | {len(train_texts)} | "
        f"{len(eval_texts)} | {x_train.shape[1]} | " +
        " | ".join(f"{scores[n]:.4f}" for n in names) + f" | {seconds:.1f} |")


if __name__ == "__main__":
  app.run(main)
