"""What a run learns, resolved once: `resolve(config) -> Task`.

A `Task` is what every part of a run reads about the problem: where the
examples come from, their text fields (one, or two for a sentence pair) and
label field, the classes and their names, the metrics evals report, and
whether the test split hides its labels. It is a pure function of the
flags (nothing is read), resolved once by the command that runs and saved
in the run's config.json.

Known TFDS datasets (`TFDS_TASKS`) bring their fields, class count, class
names and eval metrics by default (flags the user sets win:
`config.complete`). GLUE's test splits hide their labels (-1), so they are
never evaluated. No TensorFlow at import time.
"""

import dataclasses
import re

# What an eval can report (`--eval_metrics`, `eval/<metric>`); loss is
# always reported. Higher is better for all of them.
CLASSIFICATION_METRICS = ("accuracy", "f1", "mcc")
REGRESSION_METRICS = ("pearson", "spearman")
# Tagging's: entity-level micro F1, precision and recall over exact spans
# (conlleval's), and accuracy over the words (`evaluation.tagging`).
TAGGING_METRICS = ("f1", "precision", "recall", "accuracy")
METRICS = CLASSIFICATION_METRICS + REGRESSION_METRICS + TAGGING_METRICS
# What a run learns (--task): a class or score per text or pair, or a tag
# per word.
CLASSIFICATION, TAGGING = "classification", "tagging"
KINDS = (CLASSIFICATION, TAGGING)


def metric_key(split, metric):
  """The name under which an eval of validation split `split` reports
  `metric`: validation's own plainly, another's under its suffix (MNLI's
  "validation_mismatched": `mismatched_accuracy`)."""
  prefix = split.removeprefix("validation").removeprefix("_")
  return f"{prefix}_{metric}" if prefix else metric


def reported(metrics, regression, validation_splits=("validation",)):
  """Every scalar an eval reports (`eval/<name>`, what
  --early_stopping_metric may pick): loss, accuracy for any
  classification, the task's `metrics`, for each of `validation_splits`."""
  own = ("loss",) + (() if regression else ("accuracy",))
  own += tuple(m for m in metrics if m not in own)
  return tuple(metric_key(s, m) for s in validation_splits for m in own)


@dataclasses.dataclass(frozen=True)
class KnownTask:
  """A TFDS dataset's defaults: `text_keys` one or two features (a pair);
  `num_classes` 1 for regression."""

  text_keys: str
  label_key: str = "label"
  num_classes: int = 2
  label_names: str = ""
  metrics: str = "accuracy"
  hidden_test_labels: bool = False
  # Its split names, used when TFDS does not know them before loading.
  splits: tuple = ()
  kind: str = CLASSIFICATION


_GLUE_SPLITS = ("train", "validation", "test")


def _glue(text_keys,
          label_names,
          metrics="accuracy",
          num_classes=2,
          splits=_GLUE_SPLITS):
  return KnownTask(text_keys, "label", num_classes, label_names, metrics, True,
                   splits)


TFDS_TASKS = {
    "sentiment140":
        KnownTask("text", "polarity", 2, "negative,positive"),
    "imdb_reviews":
        KnownTask("text", "label", 2, "negative,positive"),
    "yelp_polarity_reviews":
        KnownTask("text", "label", 2, "negative,positive"),
    "ag_news_subset":
        KnownTask("description", "label", 4, "World,Sports,Business,Sci/Tech"),
    "glue/cola":
        _glue("sentence", "unacceptable,acceptable", "mcc"),
    "glue/sst2":
        _glue("sentence", "negative,positive"),
    "glue/mrpc":
        _glue("sentence1,sentence2", "not_equivalent,equivalent",
              "f1,accuracy"),
    "glue/qqp":
        _glue("question1,question2", "not_duplicate,duplicate", "f1,accuracy"),
    "glue/stsb":
        _glue("sentence1,sentence2", "", "pearson,spearman", 1),
    "glue/mnli":
        _glue(
            "premise,hypothesis",
            "entailment,neutral,contradiction",
            num_classes=3,
            splits=("train", "validation_matched", "validation_mismatched",
                    "test_matched", "test_mismatched")),
    "glue/qnli":
        _glue("question,sentence", "entailment,not_entailment"),
    "glue/rte":
        _glue("sentence1,sentence2", "entailment,not_entailment"),
    "glue/wnli":
        _glue("sentence1,sentence2", "not_entailment,entailment"),
    # The tag set is read from the data (its ClassLabel names).
    "conll2003":
        KnownTask("tokens", "ner", 9, "", "f1", kind=TAGGING),
}


def reportable():
  """Every name some run's evals report: any classification or regression
  metric, and the known tasks' further validation splits (MNLI's
  mismatched_loss, mismatched_accuracy)."""
  names = reported(CLASSIFICATION_METRICS, False) + reported(
      REGRESSION_METRICS, True) + reported(TAGGING_METRICS, False)
  for known in TFDS_TASKS.values():
    names += reported(
        parse_metrics(known.metrics, known.num_classes, known.kind),
        known.num_classes == 1 and known.kind == CLASSIFICATION,
        _validation_splits(known))
  return tuple(dict.fromkeys(names))


# The fields a known task fills when the user left them unset (`task` from
# its `kind`, `eval_metrics` from its `metrics`).
TASK_FIELDS = ("task", "num_classes", "label_names", "eval_metrics")


def tfds_task(tfds_name):
  """The KnownTask of a TFDS name (a version after ':' is ignored), or
  None."""
  return TFDS_TASKS.get(tfds_name.split(":")[0])


def default_metrics(num_classes, kind=CLASSIFICATION):
  """The metrics of a task that names none: accuracy; for regression
  Pearson and Spearman; for tagging entity F1, precision and recall."""
  if kind == TAGGING:
    return "f1,precision,recall"
  return "pearson,spearman" if num_classes == 1 else "accuracy"


def parse_metrics(spec, num_classes, kind=CLASSIFICATION):
  """'f1,accuracy' -> ("f1", "accuracy"); ValueError naming what is valid
  for this kind of task."""
  if kind == TAGGING:
    valid, name = TAGGING_METRICS, "tagging"
  elif num_classes == 1:
    valid, name = REGRESSION_METRICS, "regression"
  else:
    valid, name = CLASSIFICATION_METRICS, "classification"
  names = tuple(m.strip() for m in spec.split(",") if m.strip())
  bad = [m for m in names if m not in valid]
  if bad or not names:
    raise ValueError(f"{', '.join(bad) or 'no metric'} is not a "
                     f"{name} metric; choose from {', '.join(valid)}")
  if "f1" in names and num_classes != 2 and kind != TAGGING:
    raise ValueError("f1 (of class 1) needs --num_classes=2")
  return names


SENTIMENT140_LABEL_MAP = {"0": 0, "4": 1}


def source_kind(c):
  """Where the examples of Config `c` come from: "file", "tfds" or "demo"."""
  if c.train_file:
    return "file"
  if c.tfds_name:
    return "tfds"
  return "demo"


def class_names(label_names, num_classes):
  """--label_names as a tuple; by default negative,positive for two
  classes, score for a regression, class_<i> otherwise."""
  if label_names:
    return tuple(n.strip() for n in label_names.split(","))
  if num_classes == 1:
    return ("score",)
  if num_classes == 2:
    return ("negative", "positive")
  return tuple(f"class_{i}" for i in range(num_classes))


def parse_label_map(spec):
  """'0:0,4:1' -> {"0": 0, "4": 1}, 'no:0,yes:1' -> {"no": 0, "yes": 1}
  (an integer raw label in its canonical digits); ValueError on a malformed
  spec."""
  mapping = {}
  for item in spec.split(","):
    raw, sep, cls = item.strip().rpartition(":")
    if not sep or not raw.strip():
      raise ValueError(f"label map entry {item!r} is not of the form raw:class")
    raw = raw.strip()
    mapping[str(int(raw)) if re.fullmatch(r"[+-]?\d+", raw) else raw] = int(cls)
  return mapping


def label_map(spec, num_classes, sentiment140=False):
  """The raw-label -> class-id map ({} for regression): `spec` (--label_map)
  when given, else 0:0,4:1 for Sentiment140 (TFDS, or a file in its
  layout), else the identity; raw labels as strings ("4", "entailment")."""
  if spec:
    return parse_label_map(spec)
  if num_classes == 1:
    return {}
  if sentiment140:
    return dict(SENTIMENT140_LABEL_MAP)
  return {str(i): i for i in range(num_classes)}


def _fields(spec):
  return tuple(f.strip() for f in spec.split(","))


def tfds_text_fields(tfds_name, text_key=""):
  """The text feature(s) of TFDS dataset `tfds_name`: `text_key` (one, or
  two comma-separated), else the known task's, else "text"."""
  known = tfds_task(tfds_name)
  return _fields(text_key or (known.text_keys if known else "text"))


@dataclasses.dataclass(frozen=True)
class Task:
  """What a run learns, resolved from its flags (`resolve`).

  `text_fields`: the TFDS features (`--text_key`, or the dataset's) or the
  file columns (`--text_column`): one, or two for a sentence pair.
  `num_classes` 1 is a regression (float labels, one output). A tagging
  task (`kind`) learns a tag per word: `class_names` are its tags (IOB2),
  read from the training data at set-up unless --label_names gives them
  (`tag_scheme`: "iob2", or "iob1" for data converted as read).
  """

  source: str
  num_classes: int
  class_names: tuple
  metrics: tuple
  text_fields: tuple = ("text",)
  label_field: str = "label"
  hidden_test_labels: bool = False
  validation_splits: tuple = ("validation",)
  kind: str = CLASSIFICATION
  tag_scheme: str = ""

  @property
  def regression(self):
    return self.num_classes == 1 and self.kind == CLASSIFICATION

  @property
  def tagging(self):
    """Whether a tag is learnt per word (else a class or score a text)."""
    return self.kind == TAGGING

  @property
  def reported(self):
    """What each of its evals reports (`reported`)."""
    return reported(self.metrics, self.regression, self.validation_splits)

  @property
  def pairs(self):
    """Whether examples are sentence pairs (two text fields)."""
    return len(self.text_fields) == 2

  def to_json(self):
    """What config.json records as the run's task."""
    return dataclasses.asdict(self)


def resolve(c, source=None):
  """The Task of Config `c` (completed: a known task's defaults filled in);
  `source` overrides where the examples come from (a labelled file scored
  whole is read by its columns, whatever the run trained on).

  Raises:
    ValueError: --eval_metrics names a metric this kind of task cannot
      report (`parse_metrics`).
  """
  source = source or source_kind(c)
  known = tfds_task(c.tfds_name) if source == "tfds" else None
  kind = getattr(c, "task", CLASSIFICATION)
  if source == "tfds":
    text_fields = tfds_text_fields(c.tfds_name, c.text_key)
    label = c.label_key or (known.label_key if known else "label")
  else:
    text_fields, label = _fields(c.text_column), c.label_column
  names = class_names(c.label_names, c.num_classes)
  if kind == TAGGING:
    names = tuple(n for n in names if c.label_names)  # read later if none
  return Task(
      source=source,
      num_classes=c.num_classes,
      class_names=names,
      metrics=parse_metrics(
          c.eval_metrics or default_metrics(c.num_classes, kind), c.num_classes,
          kind),
      text_fields=text_fields,
      label_field=label,
      hidden_test_labels=bool(known and known.hidden_test_labels),
      validation_splits=_validation_splits(known),
      kind=kind)


def _validation_splits(known):
  """The validation splits a known task evaluates, the main one first as
  "validation" (MNLI: matched, then mismatched beside it)."""
  named = [s for s in (known.splits if known else ()) if "validation" in s]
  return ("validation",) + tuple(named[1:])
