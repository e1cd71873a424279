r"""A floor for any fine-tuned encoder: TF-IDF + logistic regression.

    python benchmarks/tfidf_baseline.py \
        --flagfile=flags/sentiment140_minilm_cpu.flags

Takes the trainer's data flags and reads the splits through the trainer's
own data path (`input_pipeline.make_splits`), so the seeded train/validation
carve is the very one the fine-tuning run used. Needs scikit-learn
(`pip install -e '.[bench]'`). Prints a table and accuracy on validation.
"""

import os
import sys
import time

from absl import app
from absl import flags
import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from trainer import cli  # noqa: E402
from trainer import input_pipeline  # noqa: E402

cli.define_config_flags()  # the trainer's flags: the same data, the same split
flags.DEFINE_float(
    "c", 4.0, "Inverse regularization strength of the "
    "logistic regression.")
FLAGS = flags.FLAGS


def texts_and_labels(split):
  texts, labels = [], []
  for batch_texts, batch_labels in input_pipeline.usable_rows(split).batch(
      1024):
    texts.extend(t.decode("utf-8") for t in batch_texts.numpy())
    labels.extend(batch_labels.numpy().tolist())
  return texts, np.array(labels)


def main(argv):
  del argv
  # Optional dependencies (the `bench` extra), imported when used.
  from scipy import sparse  # pylint: disable=g-import-not-at-top
  from sklearn import feature_extraction  # pylint: disable=g-import-not-at-top
  from sklearn import linear_model  # pylint: disable=g-import-not-at-top
  tfidf = feature_extraction.text.TfidfVectorizer
  c = cli.config_from_flags()
  splits = input_pipeline.make_splits(c)
  train_texts, train_labels = texts_and_labels(splits["train"])
  eval_texts, eval_labels = texts_and_labels(splits["validation"])
  start = time.perf_counter()
  # Words and word pairs, plus character 2-5 grams inside word boundaries
  # (robust to the spelling of tweets: "loooove", "gr8").
  words = tfidf(ngram_range=(1, 2), min_df=2, sublinear_tf=True, lowercase=True)
  chars = tfidf(
      analyzer="char_wb", ngram_range=(2, 5), min_df=2, sublinear_tf=True)
  x_train = sparse.hstack(
      [words.fit_transform(train_texts),
       chars.fit_transform(train_texts)]).tocsr()
  x_eval = sparse.hstack(
      [words.transform(eval_texts),
       chars.transform(eval_texts)]).tocsr()
  classifier = linear_model.LogisticRegression(C=FLAGS.c, max_iter=2000)
  classifier.fit(x_train, train_labels)
  accuracy = float((classifier.predict(x_eval) == eval_labels).mean())
  seconds = time.perf_counter() - start
  print("| model | train rows | validation rows | features | accuracy | "
        "fit + predict s |")
  print("|---|---|---|---|---|---|")
  print(f"| TF-IDF (word 1-2 + char_wb 2-5) + logistic regression (C="
        f"{FLAGS.c}) | {len(train_texts)} | {len(eval_texts)} | "
        f"{x_train.shape[1]} | {accuracy:.4f} | {seconds:.1f} |")


if __name__ == "__main__":
  app.run(main)
