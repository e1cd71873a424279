"""What a run learns, resolved once: label maps, known TFDS tasks, the
Task of a run."""

import pytest

from trainer.foundation import checks
from trainer.foundation import config as config_lib
from trainer.foundation import errors
from trainer.foundation import tasks


def test_label_map_defaults():
  assert tasks.label_map("", 2) == {"0": 0, "1": 1}
  assert tasks.label_map("", 3) == {"0": 0, "1": 1, "2": 2}
  # TFDS sentiment140, or a file in its layout.
  assert tasks.label_map("", 2, sentiment140=True) == {"0": 0, "4": 1}
  assert tasks.label_map("0:1,4:0", 2, sentiment140=True) == {"0": 1, "4": 0}
  assert tasks.label_map("2:0,07:1", 2, sentiment140=True) == {"2": 0, "7": 1}
  # Words (GLUE's RTE), and no map at all for a regression.
  assert tasks.label_map("not_entailment:0, entailment:1", 2) == {
      "not_entailment": 0,
      "entailment": 1
  }
  assert tasks.label_map("", 1) == {}


def test_known_tfds_tasks_fill_what_the_user_left_unset():
  mnli = config_lib.complete(
      config_lib.Config(tfds_name="glue/mnli"), given={"tfds_name"})
  task = tasks.resolve(mnli)
  assert (mnli.num_classes, mnli.label_names, task.metrics,
          task.pairs) == (3, "entailment,neutral,contradiction", ("accuracy",),
                          True)
  assert (task.text_fields, task.label_field) == (("premise", "hypothesis"),
                                                  "label")
  stsb = config_lib.complete(
      config_lib.Config(tfds_name="glue/stsb"), given={"tfds_name"})
  task = tasks.resolve(stsb)
  assert (stsb.num_classes, task.regression, task.class_names,
          task.metrics) == (1, True, ("score",), ("pearson", "spearman"))
  mrpc = config_lib.complete(
      config_lib.Config(tfds_name="glue/mrpc", eval_metrics="accuracy"),
      given={"tfds_name", "eval_metrics"})
  task = tasks.resolve(mrpc)
  assert task.metrics == ("accuracy",)
  assert task.class_names == ("not_equivalent", "equivalent")
  assert task.hidden_test_labels
  assert not tasks.resolve(
      config_lib.Config(tfds_name="imdb_reviews")).hidden_test_labels
  files = config_lib.Config(train_file="t.tsv", text_column="a, b")
  assert tasks.resolve(files).pairs
  assert not tasks.resolve(config_lib.Config(train_file="t.tsv")).pairs
  with pytest.raises(errors.ConfigError, match="map ids .e.g. 1:0,0:1"):
    checks.validate(
        config_lib.Config(
            tfds_name="glue/rte", label_map="not_entailment:0,entailment:1"))
  # Accuracy is always reported for classes: CoLA may stop on it.
  checks.validate(
      config_lib.complete(
          config_lib.Config(
              tfds_name="glue/cola", early_stopping_metric="eval/accuracy"),
          given={"tfds_name", "early_stopping_metric"}))
  with pytest.raises(errors.ConfigError, match="leave --label_map unset"):
    checks.validate(
        config_lib.Config(num_classes=1, label_map="0:0", eval_metrics=""))


def test_reported_is_what_an_eval_reports_by_kind_of_task():
  assert tasks.reported(("f1", "accuracy"), False) == ("loss", "accuracy", "f1")
  assert tasks.reported(("mcc",), False) == ("loss", "accuracy", "mcc")
  assert tasks.reported(("pearson", "spearman"),
                        True) == ("loss", "pearson", "spearman")
  assert tasks.reported(
      ("accuracy",), False,
      ("validation", "validation_mismatched")) == ("loss", "accuracy",
                                                   "mismatched_loss",
                                                   "mismatched_accuracy")
  assert tasks.metric_key("validation", "f1") == "f1"
  assert tasks.metric_key("validation_mismatched", "f1") == "mismatched_f1"


def test_a_resolved_task_reports_its_validation_splits():
  mnli = tasks.resolve(
      config_lib.Config(
          tfds_name="glue/mnli", num_classes=3, label_names="a,b,c"))
  assert mnli.validation_splits == ("validation", "validation_mismatched")
  assert "mismatched_accuracy" in mnli.reported
  sst2 = tasks.resolve(config_lib.Config(tfds_name="glue/sst2"))
  assert sst2.reported == ("loss", "accuracy")
