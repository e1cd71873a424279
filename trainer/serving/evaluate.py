r"""Evaluate an exported model (or a checkpoint) on any data the trainer reads.

`evaluate(config, export_dir=... or model_dir=...)` (`trainer.evaluate` in
Python) scores and returns the metrics; `python -m trainer.evaluate`
prints them (its usage: trainer/commands/evaluate.py).

`--input_file` scores every row of one labelled file (CSV or TSV, such as
Sentiment140's CSV; the trainer's `--text_column`, `--label_column`,
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
classes, the PR curve. --task=tagging (a tagging run's --model_dir implies
it) scores tagged sentences as training's eval does (`tagged_evaluate`);
its `--tensorboard_dir` gets `eval/f1`, `eval/precision`, `eval/recall`,
`eval/accuracy` and `eval/loss`, at the step scored.
"""

import dataclasses
import json

from absl import logging
import numpy as np
import tensorflow as tf

from trainer.data import counts as counts_lib
from trainer.data import input_pipeline
from trainer.data import splits as splits_lib
from trainer.encoders import demo
from trainer.evaluation import metrics as metrics_lib
from trainer.evaluation import summaries
from trainer.foundation import checks
from trainer.foundation import config as config_lib
from trainer.foundation import errors
from trainer.foundation import tasks
from trainer.model import checkpoints
from trainer.runtime import run_dir
from trainer.serving import export
from trainer.serving import exported
from trainer.serving import run_folder
from trainer.serving import tagged_evaluate


def with_run_config(c, given):
  """`c` over the run's config.json when `c.model_dir` holds a run: the
  run's flags, and those of `c` named in `given` (the user's) instead.
  Otherwise `c` completed as trainer.main completes its flags
  (`config.complete`: a TFDS task's fields, the demo's defaults), which a
  run's own flags need not be: its log would open with the demo's
  defaults for a run that is not the demo."""
  if "model_dir" in given:
    where = run_dir.locations(c.model_dir, c.checkpoint_dir)
    if (tf.io.gfile.exists(where.config_json) or
        checkpoints.exist(where.checkpoints)):
      saved = run_folder.read_run_config(c.model_dir, c.checkpoint_dir)
      return dataclasses.replace(
          saved, **{n: getattr(c, n) for n in given if n in config_lib.FIELDS})
  return config_lib.complete(c, given)


def _check_classes(c, classes, what):
  """The flags' classes must be the model's: scores of K classes cannot be
  read as another number's."""
  if c.num_classes != classes:
    raise errors.ConfigError(
        f"--num_classes={c.num_classes} does not match {what}, which scores "
        f"{classes} classes; give --num_classes={classes} with the data's "
        "--label_map (and --label_names)")


def _check_pairs(task, pairs, what):
  if task.pairs != pairs:
    raise errors.ConfigError(
        f"{what} takes {'sentence pairs' if pairs else 'one text'} but the "
        f"data flags give {'pairs' if task.pairs else 'one text field'}; set "
        "--text_column/--text_key to " +
        ("two comma-separated fields" if pairs else "one field"))


def call(serve, texts):
  """`serve` on texts [batch] (`text`) or [batch, 2] (`text`,
  `text_pair`)."""
  if texts.shape.rank == 2:
    return serve(text=texts[:, 0], text_pair=texts[:, 1])
  return serve(text=texts)


def serving(c, task, export_dir="", checkpoint=""):
  """(serve fn of texts, class names or None to take the Task's, what is
  scored: {export_dir} or {checkpoint, step}): the export at `export_dir`,
  else the run in `c.model_dir` rebuilt from its `checkpoint` (the best,
  else the newest)."""
  if export_dir:
    serve, classes = exported.load_serving(export_dir)
    _check_classes(c, classes, f"the export {export_dir}")
    _check_pairs(task, exported.pairs(serve), f"the export {export_dir}")
    logging.info("Scoring the export %s", export_dir)
    return lambda texts: call(serve, texts), None, dict(export_dir=export_dir)
  saved = run_folder.read_run_config(c.model_dir, c.checkpoint_dir)
  if saved.task == tasks.TAGGING:
    raise errors.ConfigError(
        f"--model_dir={c.model_dir} holds a tagging run (a tag per word): "
        "evaluate it with --task=tagging, or leave --task unset")
  _check_classes(c, saved.num_classes, f"the run in {c.model_dir}")
  _check_pairs(task, tasks.resolve(saved).pairs, f"the run in {c.model_dir}")
  module, path, step = export.run_module(c, saved, task, checkpoint)
  serve = module.serve_rows or module.serve
  return (lambda texts: call(serve, texts), task.class_names,
          dict(checkpoint=path, step=step))


def data_split(c, task, split="", input_file=""):
  """The Split to score (`split`, `input_file`): one labelled file, a TFDS
  split by name, or a split of the trainer's data (`splits.make_splits`)."""
  data = splits_lib.from_flags(c)
  if input_file:
    if split:
      raise errors.ConfigError(
          "give --input_file (one labelled file, scored whole) or --split, "
          "not both")
    return splits_lib.file_split(
        tasks.resolve(c, source="file"), data, input_file)
  if (task.source == "tfds" and task.hidden_test_labels and
      split.startswith("test")):
    raise errors.ConfigError(
        f"--split={split} of {c.tfds_name} hides its labels (all -1), "
        "so it cannot be scored: predict it with python -m trainer.predict "
        f"--tfds_name={c.tfds_name} --split={split}")
  if (task.source == "tfds" and split and
      split.split("[")[0] in splits_lib.tfds_split_names(data)):
    return splits_lib.tfds_split(task, data, split)
  if task.source == "demo":
    data = _demo_data(c, data)
  named = splits_lib.make_splits(task, data)
  name = split or ("test" if "test" in named else "validation")
  if name not in named:
    raise errors.ConfigError(
        f"--split={name!r} is invalid: this data has splits {sorted(named)}")
  return named[name]


def _demo_data(c, data):
  paths = demo.ensure_assets(c.demo_cache_dir or None)
  return dataclasses.replace(
      data, demo_files=(paths["train"], paths["validation"]))


# Word-count boundaries of the batches `score` forms: texts of like length
# together, so the export packs each batch to a small bucket.
_WORD_BOUNDARIES = (8, 16, 24, 32, 48, 64, 96, 128, 192, 256)


def by_length(rows, batch_size):
  """(texts, labels) rows -> batches of texts of like length in words (the
  order of the rows changes; the metrics do not)."""

  def words(texts, label):
    del label  # a pair's texts count together
    return tf.size(
        tf.strings.split(tf.strings.reduce_join(texts, separator=" ")))

  return rows.bucket_by_sequence_length(
      words,
      list(_WORD_BOUNDARIES), [batch_size] * (len(_WORD_BOUNDARIES) + 1),
      no_padding=True)


def score(task, serve, split, class_names=None, batch_size=256):
  """Runs `serve` over the usable rows of Split `split`; returns the
  metrics dict (and the probabilities' PR histograms, two classes)."""
  counts = counts_lib.count(split)
  if not counts["rows_used"]:
    raise errors.DataError(
        f"{split.describe()}: no usable row to score ({counts['rows_read']} "
        f"read, rejected {counts['rejected'] or 'none'}); check the data "
        "flags, --label_map and --text_column/--label_column")
  labels, outputs = [], []
  key = "scores" if task.regression else "probabilities"
  for texts, batch_labels in by_length(
      input_pipeline.usable_rows(split), batch_size):
    outputs.append(serve(texts)[key].numpy())
    labels.append(batch_labels.numpy())
  outputs, labels = np.concatenate(outputs), np.concatenate(labels)
  if task.regression:
    result = dict(
        examples=int(len(labels)),
        loss=float(np.mean((outputs.astype(np.float64) - labels)**2)))
    result.update(metrics_lib.from_scores(outputs, labels, task.metrics))
    return _described(result, split, counts), None
  names = class_names or task.class_names
  result = metrics_lib.classification_metrics(labels, outputs, names)
  result.update(
      metrics_lib.from_confusion(result["confusion_matrix"], task.metrics))
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


def _check_outputs(output_file, tensorboard_dir):
  if output_file:
    run_dir.check_output_file("output_file", output_file)
  if tensorboard_dir:
    try:
      tf.io.gfile.makedirs(tensorboard_dir)
    except tf.errors.OpError as e:
      raise errors.ConfigError(
          f"--tensorboard_dir={tensorboard_dir}: cannot create it "
          f"({errors.first_line(e)}); write elsewhere") from None


def evaluate(c=None,
             given=None,
             *,
             export_dir="",
             checkpoint="",
             split="",
             input_file="",
             output_file="",
             tensorboard_dir=""):
  """Scores a model on data the trainer reads; returns the metrics dict.

  Args:
    c: a Config holding the data flags (and with `model_dir`, the run to
      score: its best checkpoint and its own flags, overridden by those of
      `c` named in `given`); default `Config()`.
    given: the names of the fields of `c` the user set (None: those that
      differ from their defaults, as for `fit`).
    export_dir: an export to score instead of a run's checkpoint.
    checkpoint: with `c.model_dir`, the checkpoint to score.
    split: validation, test or train of the data flags; with a TFDS
      dataset any of its splits, read whole.
    input_file: a labelled file, scored whole.
    output_file: also write the metrics there as JSON.
    tensorboard_dir: also write the confusion matrix and the PR curve (a
      tagging model: the eval scalars, `eval/f1`, ..., at the step scored).
  """
  c = config_lib.Config() if c is None else c
  given = config_lib.changed_fields(c) if given is None else set(given)
  if not export_dir and "model_dir" not in given:
    raise errors.ConfigError("give --export_dir (an export) or --model_dir "
                             "(a training run: its checkpoint and flags)")
  _check_outputs(output_file, tensorboard_dir)
  c = checks.validate(with_run_config(c, given))
  task = tasks.resolve(c)
  histograms = None
  if task.tagging:
    result = tagged_evaluate.evaluate(c, task, export_dir, checkpoint, split,
                                      input_file)
  else:
    serve, names, scored = serving(c, task, export_dir, checkpoint)
    result, histograms = score(task, serve,
                               data_split(c, task, split, input_file), names)
    result.update(scored)
  if output_file:
    with tf.io.gfile.GFile(output_file, "w") as f:
      f.write(json.dumps(result, indent=2, sort_keys=True) + "\n")
  if tensorboard_dir:
    writer = tf.summary.create_file_writer(tensorboard_dir)
    if task.tagging:
      # What training's eval writes of a tagging run, at the step scored.
      summaries.write_eval_scalars(writer, result.get(
          "step", 0), {k: result[k] for k in tagged_evaluate.SCALARS})
    else:
      summaries.write_eval_pictures(writer, 0, result["confusion_matrix"],
                                    result["class_names"], histograms)
    writer.close()
  return result
