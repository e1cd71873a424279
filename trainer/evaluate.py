r"""Evaluate an exported model (or a checkpoint) on any data the trainer reads.

    python -m trainer.evaluate --export_dir=DIR --input_file=test.csv
    python -m trainer.evaluate --export_dir=DIR --tfds_name=sentiment140 \
        --split=test
    python -m trainer.evaluate --model_dir=RUN [--checkpoint=PATH] \
        --split=validation --output_file=metrics.json --tensorboard_dir=TB

`--input_file` scores every row of one labelled file (CSV, TSV, JSONL,
Parquet, Sentiment140's CSV; the trainer's `--text_column`, `--label_column`,
`--label_map` read it); with `--tfds_name`, `--split` names any split of the
dataset, scored whole. Otherwise the data flags are the trainer's and
`--split` is its validation (carved as the run carved it), test or train.
With `--model_dir`, the run's config.json supplies them and flags given on
the command line override it. Prints and writes JSON with accuracy,
per-class precision/recall/F1, macro F1, ROC AUC (two classes), the
task's --eval_metrics (F1 of class 1, Matthews correlation), the confusion
matrix (rows: true class) and the rows excluded, by reason; for a
regression (--num_classes=1) mean squared error, Pearson and Spearman.
Sentence pairs (two --text_column/--text_key fields) go to the model's
`text` and `text_pair`;
`--tensorboard_dir` also gets the confusion matrix image and, for two
classes, the PR curve.
"""

import dataclasses
import json
import os

from absl import flags
import numpy as np
import tensorflow as tf

from trainer.base import checks
from trainer import cli
from trainer.base import config as config_lib
from trainer.base import errors
from trainer import export
from trainer.data import input_pipeline
from trainer.base import metrics as metrics_lib
from trainer.base import run_dir
from trainer.base import summaries

FLAGS = flags.FLAGS


def _config():
  """The trainer's flags over the run's config.json (when --model_dir has)."""
  c = cli.config_from_flags()
  if not FLAGS["model_dir"].present or not tf.io.gfile.exists(
      os.path.join(FLAGS.model_dir, "config.json")):
    return c
  saved = export.read_run_config(FLAGS.model_dir)
  given = [name for name in config_lib.FIELDS if FLAGS[name].present]
  return dataclasses.replace(saved, **{n: getattr(c, n) for n in given})


def _check_classes(c, classes, what):
  """The flags' classes must be the model's: scores of K classes cannot be
  read as another number's."""
  if c.num_classes != classes:
    raise errors.ConfigError(
        f"--num_classes={c.num_classes} does not match {what}, which scores "
        f"{classes} classes; give --num_classes={classes} with the data's "
        "--label_map (and --label_names)")


def _check_pairs(c, pairs, what):
  if c.pairs != pairs:
    raise errors.ConfigError(
        f"{what} takes {'sentence pairs' if pairs else 'one text'} but the "
        f"data flags give {'pairs' if c.pairs else 'one text field'}; set "
        "--text_column/--text_key to " +
        ("two comma-separated fields" if pairs else "one field"))


def call(serve, texts):
  """`serve` on texts [batch] (`text`) or [batch, 2] (`text`,
  `text_pair`)."""
  if texts.shape.rank == 2:
    return serve(text=texts[:, 0], text_pair=texts[:, 1])
  return serve(text=texts)


def _serving(c):
  """Returns (serve fn of texts, class names or None to take the
  Config's)."""
  if FLAGS.export_dir:
    serve, classes = export.load_serving(FLAGS.export_dir)
    _check_classes(c, classes, f"the export {FLAGS.export_dir}")
    _check_pairs(c, export.pairs(serve), f"the export {FLAGS.export_dir}")
    return lambda texts: call(serve, texts), None
  saved, preprocessor, model, _, _ = export.load_classifier(
      FLAGS.model_dir, FLAGS.checkpoint)
  _check_classes(c, saved.num_classes, f"the run in {FLAGS.model_dir}")
  _check_pairs(c, saved.pairs, f"the run in {FLAGS.model_dir}")
  module = export.serving_module(c, preprocessor, model)
  return lambda texts: call(module.serve, texts), c.class_names()


def data_split(c, split="", input_file=""):
  """The Split to score (`--split`, `--input_file`): one labelled file, a TFDS
  split by name, or a split of the trainer's data
  (`input_pipeline.make_splits`)."""
  if input_file:
    if split:
      raise errors.ConfigError(
          "give --input_file (one labelled file, scored whole) or --split, "
          "not both")
    return input_pipeline.whole_split(c, input_file=input_file)
  if (c.source_kind == "tfds" and c.hidden_test_labels() and
      split.startswith("test")):
    raise errors.ConfigError(
        f"--split={split} of {c.tfds_name} hides its labels (all -1), "
        "so it cannot be scored: predict it with python -m trainer.predict "
        f"--tfds_name={c.tfds_name} --split={split}")
  if (c.source_kind == "tfds" and split and
      split.split("[")[0] in input_pipeline.tfds_split_names(c)):
    return input_pipeline.whole_split(c, tfds_split=split)
  splits = input_pipeline.make_splits(c)
  name = split or ("test" if "test" in splits else "validation")
  if name not in splits:
    raise errors.ConfigError(
        f"--split={name!r} is invalid: this data has splits {sorted(splits)}")
  return splits[name]


def evaluate(c, serve, split, class_names=None, batch_size=256):
  """Runs `serve` over the usable rows of Split `split`; returns the
  metrics dict (and the probabilities' PR histograms, two classes)."""
  counts = input_pipeline.count(split)
  if not counts["rows_used"]:
    raise errors.DataError(
        f"{split.describe()}: no usable row to score ({counts['rows_read']} "
        f"read, rejected {counts['rejected'] or 'none'}); check the data "
        "flags, --label_map and --text_column/--label_column")
  labels, outputs = [], []
  key = "scores" if c.regression else "probabilities"
  for texts, batch_labels in input_pipeline.usable_rows(split).batch(
      batch_size):
    outputs.append(serve(texts)[key].numpy())
    labels.append(batch_labels.numpy())
  outputs, labels = np.concatenate(outputs), np.concatenate(labels)
  if c.regression:
    result = dict(
        examples=int(len(labels)),
        loss=float(np.mean((outputs.astype(np.float64) - labels)**2)))
    result.update(metrics_lib.from_scores(outputs, labels, c.metrics()))
    return _described(result, split, counts), None
  names = class_names or c.class_names()
  result = metrics_lib.classification_metrics(labels, outputs, names)
  result.update(
      metrics_lib.from_confusion(result["confusion_matrix"], c.metrics()))
  histograms = (
      metrics_lib.pr_histograms(labels, outputs[:, 1])
      if len(names) == 2 else None)
  return _described(result, split, counts), histograms


def _described(result, split, counts):
  """`result` with the split and its row counts."""
  result.update(
      split=split.name,
      data=split.describe(),
      rows_read=counts["rows_read"],
      rows_used=counts["rows_used"],
      excluded=counts["rejected"])
  return result


def define_flags():
  cli.define_config_flags()
  flags.DEFINE_string("export_dir", "", "An export from trainer.export.")
  flags.DEFINE_string(
      "checkpoint", "", "With --model_dir: the checkpoint "
      "('' = best, else newest).")
  flags.DEFINE_string(
      "input_file", "", "A labelled file to score whole (no carve), read "
      "with --text_column, --label_column, --label_map, --file_format.")
  flags.DEFINE_string(
      "split", "", "validation, test or train ('' = test if the data has "
      "one, else validation); with --tfds_name, any split of the dataset "
      "(e.g. test, train[:10%]), scored whole.")
  flags.DEFINE_string(
      "tensorboard_dir", "", "Also write the confusion matrix image and "
      "the PR curve (two classes) here, for TensorBoard.")
  flags.DEFINE_string("output_file", "", "Where to write the JSON ('' = "
                      "stdout only).")


def main(argv):
  del argv
  if not FLAGS.export_dir and not FLAGS["model_dir"].present:
    raise errors.ConfigError("give --export_dir (an export) or --model_dir "
                             "(a training run: its checkpoint and flags)")
  if FLAGS.output_file:
    run_dir.check_output_file("output_file", FLAGS.output_file)
  if FLAGS.tensorboard_dir:
    try:
      tf.io.gfile.makedirs(FLAGS.tensorboard_dir)
    except tf.errors.OpError as e:
      raise errors.ConfigError(
          f"--tensorboard_dir={FLAGS.tensorboard_dir}: cannot create it "
          f"({errors.first_line(e)}); write elsewhere") from None
  c = checks.validate(_config())
  serve, names = _serving(c)
  result, histograms = evaluate(c, serve,
                                data_split(c, FLAGS.split, FLAGS.input_file),
                                names)
  text = json.dumps(result, indent=2, sort_keys=True)
  print(text)
  if FLAGS.output_file:
    with tf.io.gfile.GFile(FLAGS.output_file, "w") as f:
      f.write(text + "\n")
  if FLAGS.tensorboard_dir and "confusion_matrix" in result:
    writer = tf.summary.create_file_writer(FLAGS.tensorboard_dir)
    summaries.write_eval_pictures(writer, 0, result["confusion_matrix"],
                                  result["class_names"], histograms)
    writer.close()


if __name__ == "__main__":
  define_flags()
  cli.run(main)
