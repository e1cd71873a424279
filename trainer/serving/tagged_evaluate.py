"""Score a tagging model (an export, or a run's checkpoint) on tagged
sentences: what `trainer.evaluate` does for --task=tagging.

The sentences are read as training reads them (CoNLL or JSON lines files,
TFDS conll2003: `tagged_sources`, with the model's tag set, IOB1 detected
and converted to IOB2 as training converts it); every word of
every usable sentence is scored once, whatever its length (the export's
`serve_words` signature: windows of whole words), and the report is what
training's eval reports (`evaluation.tagging`): entity-level micro F1,
precision and recall, word accuracy, per entity type precision, recall, F1
and support, and the mean loss over the words (each word's -log of its
gold tag's probability, the probability clipped at float32's least normal
number: a softmax that underflows to 0 adds about 87.3, not inf).
"""

import dataclasses

from absl import logging
import numpy as np

from trainer.data import counts as counts_lib
from trainer.data import input_pipeline
from trainer.data import splits as splits_lib
from trainer.data import tagged_sources
from trainer.data import word_pieces
from trainer.evaluation import tagging
from trainer.foundation import errors
from trainer.foundation import tasks
from trainer.serving import exported
from trainer.serving import export
from trainer.serving import run_folder

# What `trainer.evaluate --tensorboard_dir` writes (`eval/<name>`), as
# training's eval summaries name them.
SCALARS = ("f1", "precision", "recall", "accuracy", "loss")

# The least probability a loss is taken of: the softmax of a confident
# wrong word underflows to 0 in float32, whose -log is inf; training's
# cross-entropy, from the logits, stays finite. Clipped at float32's least
# normal number, a word adds at most -log(tiny) ~= 87.3 to the sum.
_TINY = np.finfo(np.float32).tiny


def serving(c, task, export_dir="", checkpoint=""):
  """(serve fn of words [batch, max_words] string, the Task with the
  model's tags, what is scored: {export_dir} or {checkpoint, step}): the
  tagging export at `export_dir`, else the run in `c.model_dir` rebuilt
  from its `checkpoint` (the best, else the newest)."""
  if export_dir:
    tagger = exported.load_tagger(export_dir)
    logging.info("Scoring the tagging export %s", export_dir)
    return (lambda words: tagger.words(words=words),
            _with_tags(task, tagger.tag_names), dict(export_dir=export_dir))
  saved = run_folder.read_run_config(c.model_dir, c.checkpoint_dir)
  if saved.task != tasks.TAGGING:
    raise errors.ConfigError(
        f"--model_dir={c.model_dir} holds a {saved.task} run, not a tagging "
        "one: evaluate it without --task=tagging")
  task = _with_tags(task, tasks.resolve(saved).class_names)
  module, path, step = export.run_module(c, saved, task, checkpoint)
  serve = module.serve_words_rows or module.serve_words
  return serve, task, dict(checkpoint=path, step=step)


def _with_tags(task, names):
  return dataclasses.replace(
      task, class_names=tuple(names), num_classes=len(names))


def data_split(c, task, split="", input_file=""):
  """The Split of tagged sentences to score: `input_file` whole, else the
  run's data flags' `split` (validation, test or train)."""
  data = splits_lib.from_flags(c)
  if input_file:
    if split:
      raise errors.ConfigError(
          "give --input_file (one tagged file, scored whole) or --split, "
          "not both")
    tags = _tag_set(task, data, input_file)
    return splits_lib.Split(
        "input", splits_lib.tagged_source(task, data, input_file, tags=tags))
  if not (data.train_file or data.tfds_name):
    raise errors.ConfigError(
        "give the tagged sentences to score: --input_file (CoNLL or JSON "
        "lines), or the data flags of a run (--model_dir's, --train_file)")
  scheme = _tag_set(task, data, data.train_file).scheme
  named = splits_lib.make_splits(
      dataclasses.replace(task, tag_scheme=scheme), data)
  name = split or ("test" if "test" in named else "validation")
  if name not in named:
    raise errors.ConfigError(
        f"--split={name!r} is invalid: this data has splits {sorted(named)}")
  return named[name]


def _tag_set(task, data, path):
  """The model's tags in the scheme of the data at `path` (a file, else
  the TFDS train split), detected as training detects it
  (`tagged_sources.read_tag_set`: IOB1 is converted to IOB2 as read)."""
  source = splits_lib.tagged_source(
      task, data, path=path, split="" if path else "train")
  return tagged_sources.read_tag_set(source, task.class_names)


def score(serve, split, tag_names, batch_size=256):
  """Serves every usable sentence of Split `split` (words and gold tag ids
  in `tag_names`) through `serve` (words -> a tagging signature's
  outputs); returns the metrics dict (the module docstring)."""
  counts = counts_lib.count(split)
  if not counts["rows_used"]:
    raise errors.DataError(
        f"{split.describe()}: no usable sentence to score "
        f"({counts['rows_read']} read, rejected {counts['rejected'] or 'none'})"
    )
  names = np.asarray(tag_names, dtype=object)
  gold, predicted, losses = [], [], []
  for texts, labels in input_pipeline.usable_rows(split).batch(batch_size):
    out = serve(word_pieces.split_words(texts).to_tensor(""))
    ids = word_pieces.parse_tags(labels["tags"]).to_list()
    served, tags = out["word_count"].numpy(), out["tags"].numpy()
    probabilities = out["probabilities"].numpy()
    for i, truth in enumerate(ids):
      if served[i] != len(truth):
        raise errors.ExportError(
            f"the model scored {served[i]} words of a sentence of "
            f"{len(truth)}: {texts[i].numpy().decode()[:80]!r}")
      gold.append(list(names[truth]))
      predicted.append([t.decode("utf-8") for t in tags[i, :served[i]]])
      p = probabilities[i, np.arange(len(truth)), truth]
      losses.append(-np.log(np.maximum(p, _TINY)))
  report = tagging.tagging_metrics(gold, predicted)
  return dict(
      f1=report["f1"],
      precision=report["precision"],
      recall=report["recall"],
      accuracy=report["accuracy"],
      loss=float(np.mean(np.concatenate(losses).astype(np.float64))),
      examples=report["sentences"],
      words=report["tokens"],
      entities=report["entities"],
      predicted_entities=report["predicted_entities"],
      correct_entities=report["correct_entities"],
      per_type=report["per_type"],
      class_names=list(tag_names),
      split=split.name,
      data=split.describe(),
      rows_read=counts["rows_read"],
      rows_used=counts["rows_used"],
      excluded=counts["rejected"])


def evaluate(c, task, export_dir="", checkpoint="", split="", input_file=""):
  """The metrics of a tagging model (`serving`) on tagged sentences
  (`data_split`), with what was scored."""
  serve, task, scored = serving(c, task, export_dir, checkpoint)
  result = score(serve, data_split(c, task, split, input_file),
                 task.class_names)
  result.update(scored)
  return result
