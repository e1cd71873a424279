r"""Evaluate an exported model (or a checkpoint) on any data the trainer reads.

    python -m trainer.evaluate --export_dir=DIR --tfds_name=sentiment140
    python -m trainer.evaluate --model_dir=RUN [--checkpoint=PATH] \
        --split=test --output_file=metrics.json

Data flags are the trainer's (`--tfds_name`, `--train_file`, `--test_file`,
`--label_map`, ...). With `--model_dir`, the run's config.json supplies them
and flags given on the command line override it. Prints and writes JSON with
accuracy, per-class precision/recall/F1, macro F1, ROC AUC (two classes), the
confusion matrix (rows: true class) and the rows excluded, by reason.
"""

import dataclasses
import json
import os

from absl import flags
import numpy as np
import tensorflow as tf

from trainer import cli
from trainer import config as config_lib
from trainer import errors
from trainer import export
from trainer import input_pipeline
from trainer import metrics as metrics_lib
from trainer import run_dir

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


def _serving(c):
  """Returns (serve fn, class names or None to take the Config's)."""
  if FLAGS.export_dir:
    serve, classes = export.load_serving(FLAGS.export_dir)
    _check_classes(c, classes, f"the export {FLAGS.export_dir}")
    return lambda text: serve(text=text), None
  saved, preprocessor, model, _, _ = export.load_classifier(
      FLAGS.model_dir, FLAGS.checkpoint)
  _check_classes(c, saved.num_classes, f"the run in {FLAGS.model_dir}")
  module = export.ServingModule(preprocessor, model, c.seq_length,
                                c.class_names())
  # The lambda keeps `module` alive: a tf.function method holds only a weak
  # reference to its object.
  return lambda text: module.serve(text), c.class_names()


def evaluate(c, serve, split_name, class_names=None, batch_size=256):
  """Runs `serve` over a split's usable rows; returns the metrics dict."""
  splits = input_pipeline.make_splits(c)
  if split_name not in splits:
    raise errors.ConfigError(
        f"--split={split_name!r} is invalid: this data has splits "
        f"{sorted(splits)}")
  split = splits[split_name]
  counts = input_pipeline.count(split)
  if not counts["rows_used"]:
    raise errors.DataError(
        f"{split.describe()}: no usable row to score ({counts['rows_read']} "
        f"read, rejected {counts['rejected'] or 'none'}); check the data "
        "flags, --label_map and --text_column/--label_column")
  labels, probabilities = [], []
  for texts, batch_labels in input_pipeline.usable_rows(split).batch(
      batch_size):
    out = serve(texts)
    probabilities.append(out["probabilities"].numpy())
    labels.append(batch_labels.numpy())
  num_classes = c.num_classes
  probabilities = (
      np.concatenate(probabilities)
      if probabilities else np.zeros([0, num_classes]))
  labels = np.concatenate(labels) if labels else np.zeros([0], np.int64)
  names = class_names or c.class_names()
  result = metrics_lib.classification_metrics(labels, probabilities, names)
  result.update(
      split=split_name,
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
      "split", "", "validation, test or train ('' = test if "
      "the data has one, else validation).")
  flags.DEFINE_string("output_file", "", "Where to write the JSON ('' = "
                      "stdout only).")


def main(argv):
  del argv
  if not FLAGS.export_dir and not FLAGS["model_dir"].present:
    raise errors.ConfigError("give --export_dir (an export) or --model_dir "
                             "(a training run: its checkpoint and flags)")
  if FLAGS.output_file:
    run_dir.check_output_file("output_file", FLAGS.output_file)
  c = config_lib.validate(_config())
  serve, names = _serving(c)
  split = FLAGS.split or ("test" if "test" in input_pipeline.make_splits(c) else
                          "validation")
  result = evaluate(c, serve, split, names)
  text = json.dumps(result, indent=2, sort_keys=True)
  print(text)
  if FLAGS.output_file:
    with tf.io.gfile.GFile(FLAGS.output_file, "w") as f:
      f.write(text + "\n")


if __name__ == "__main__":
  define_flags()
  cli.run(main)
