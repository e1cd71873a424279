"""What each known task is: its fields, classes and the metrics it is judged by.

A TFDS dataset named here gets its text and label features, class count,
class names and eval metrics by default (flags the user sets win). GLUE's
test splits hide their labels (-1), so they are never evaluated. No
TensorFlow at import time (`trainer.config` uses this).
"""

import dataclasses

# What an eval can report (`--eval_metrics`, `eval/<metric>`); loss is
# always reported. Higher is better for all of them.
CLASSIFICATION_METRICS = ("accuracy", "f1", "mcc")
REGRESSION_METRICS = ("pearson", "spearman")
METRICS = CLASSIFICATION_METRICS + REGRESSION_METRICS


@dataclasses.dataclass(frozen=True)
class Task:
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


_GLUE_SPLITS = ("train", "validation", "test")


def _glue(text_keys,
          label_names,
          metrics="accuracy",
          num_classes=2,
          splits=_GLUE_SPLITS):
  return Task(text_keys, "label", num_classes, label_names, metrics, True,
              splits)


TFDS_TASKS = {
    "sentiment140":
        Task("text", "polarity", 2, "negative,positive"),
    "imdb_reviews":
        Task("text", "label", 2, "negative,positive"),
    "yelp_polarity_reviews":
        Task("text", "label", 2, "negative,positive"),
    "ag_news_subset":
        Task("description", "label", 4, "World,Sports,Business,Sci/Tech"),
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
}

# The fields a known task fills when the user left them unset.
TASK_FIELDS = ("num_classes", "label_names", "eval_metrics")


def tfds_task(tfds_name):
  """The Task of a TFDS name (a version after ':' is ignored), or None."""
  return TFDS_TASKS.get(tfds_name.split(":")[0])


def default_metrics(num_classes):
  """The metrics of a task that names none: accuracy; for regression
  Pearson and Spearman."""
  return "pearson,spearman" if num_classes == 1 else "accuracy"


def parse_metrics(spec, num_classes):
  """'f1,accuracy' -> ("f1", "accuracy"); ValueError naming what is valid
  for this kind of task."""
  valid = REGRESSION_METRICS if num_classes == 1 else CLASSIFICATION_METRICS
  names = tuple(m.strip() for m in spec.split(",") if m.strip())
  bad = [m for m in names if m not in valid]
  if bad or not names:
    kind = "regression" if num_classes == 1 else "classification"
    raise ValueError(f"{', '.join(bad) or 'no metric'} is not a "
                     f"{kind} metric; choose from {', '.join(valid)}")
  if "f1" in names and num_classes != 2:
    raise ValueError("f1 (of class 1) needs --num_classes=2")
  return names
