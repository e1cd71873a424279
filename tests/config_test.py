"""Config: one source per flag, validation, completion; the step plan."""

import dataclasses
import glob
import math
import os

from absl import flags
import pytest

from conftest import ROOT
from trainer.base import checks
from trainer import cli
from trainer.base import config as config_lib
from trainer.base import errors
from trainer.loop import plan as plan_lib

# Every flag of the trainer before the redesign, with its default.
FLAGS_BEFORE = dict(
    model_dir="/tmp/bert_trainer", tpu="", strategy="auto",
    encoder_handle="demo", preprocessor_handle="demo", tfds_name="",
    data_dir="", text_key="", label_key="", train_file="", eval_file="",
    test_file="", file_format="auto", text_column="text",
    label_column="label", encoding="", label_map="", num_classes=2,
    label_names="", max_bad_fraction=0.01, read_stripes=16,
    validation_fraction=0.05, seq_length=64, batch_size=32,
    eval_batch_size=0, train_steps=0, epochs=1.0, learning_rate=5e-05,
    warmup_fraction=0.1, weight_decay=0.01, clip_norm=1.0, dropout_rate=0.1,
    steps_per_loop=100, eval_every=0, checkpoint_every=1000,
    keep_checkpoints=3, shuffle_buffer=100000, seed=42, jit_compile=None,
    precision="float32", demo_cache_dir="", export=True, checkpoint_dir="",
    summary_dir="", export_base_dir="", max_nan_recoveries=2,
    deterministic=False, early_stopping_patience=0,
    early_stopping_metric="eval/loss", profile_steps="")  # yapf: disable


def _flag_values():
  flag_values = flags.FlagValues()
  cli.define_config_flags(flag_values=flag_values)
  return flag_values


def test_every_flag_of_before_is_a_config_field_with_its_default():
  flag_values = _flag_values()
  for name, default in FLAGS_BEFORE.items():
    assert flag_values[name].default == default, name
    assert getattr(config_lib.Config(), name) == default, name
  assert set(FLAGS_BEFORE) <= set(config_lib.FIELDS)


def test_flags_carry_the_fields_help_and_choices():
  flag_values = _flag_values()
  for name, field in config_lib.FIELDS.items():
    assert flag_values[name].help.endswith(field.metadata["help"])
    if field.metadata["choices"]:
      assert list(flag_values[name].parser.enum_values) == list(
          field.metadata["choices"])
  assert isinstance(flag_values["batch_size"].value, int)
  assert isinstance(flag_values["learning_rate"].value, float)
  assert flag_values["jit_compile"].value is None


@pytest.mark.parametrize(
    "flagfile",
    sorted(glob.glob(os.path.join(ROOT, "flags", "*.flags"))),
    ids=os.path.basename)
def test_flagfiles_parse_against_the_generated_flags(flagfile):
  flag_values = _flag_values()
  flag_values(["trainer.main", f"--flagfile={flagfile}"])
  c = cli.config_from_flags(flag_values)
  local = dict(train_file="", eval_file="", test_file="", tfds_name="")
  local.update(encoder_handle="demo", preprocessor_handle="demo")
  checks.validate(dataclasses.replace(c, **local))  # all but the paths
  given = {n for n in config_lib.FIELDS if flag_values[n].present}
  assert given, "a flagfile that sets nothing"
  for name in given:
    assert getattr(c, name) == flag_values[name].value


def test_complete_applies_demo_defaults_to_unset_fields_only():
  demo = config_lib.complete(config_lib.Config(), given=set())
  assert demo.learning_rate == 1e-3 and demo.seq_length == 32
  kept = config_lib.complete(
      config_lib.Config(seq_length=64), given={"seq_length"})
  assert kept.seq_length == 64 and kept.learning_rate == 1e-3
  # The Python API: a field that differs from its default counts as given.
  api = config_lib.complete(config_lib.Config(seq_length=48))
  assert api.seq_length == 48 and api.epochs == 3.0
  real = config_lib.complete(
      config_lib.Config(train_file="t.csv"), given={"train_file"})
  assert real.learning_rate == 5e-5  # not a demo run


def test_complete_takes_vertex_locations_for_unset_flags():
  env = dict(AIP_MODEL_DIR="gs://b/m", AIP_CHECKPOINT_DIR="gs://b/c")
  c = config_lib.complete(
      config_lib.Config(train_file="t.csv"), given={"train_file"}, environ=env)
  assert (c.export_base_dir, c.checkpoint_dir,
          c.summary_dir) == ("gs://b/m", "gs://b/c", "")
  given = config_lib.complete(
      config_lib.Config(train_file="t.csv", checkpoint_dir="/mine"),
      given={"train_file", "checkpoint_dir"},
      environ=env)
  assert given.checkpoint_dir == "/mine"


@pytest.mark.parametrize("field,value,message", [
    ("learning_rate", math.inf, "must be > 0"),
    ("learning_rate", math.nan, "must be > 0"),
    ("weight_decay", math.nan, "must be >= 0"),
    ("warmup_fraction", math.nan, "must be in [0, 1]"),
    ("clip_norm", -1.0, "must be >= 0 (0 disables clipping)"),
    ("epochs", math.inf, "must be > 0 when --train_steps=0"),
    ("strategy", "ps", "choose one of auto, one_device, mirrored, "
     "multi_worker_mirrored"),
    ("early_stopping_metric", "eval/f2",
     "choose one of eval/loss, eval/accuracy, eval/f1, eval/mcc, "
     "eval/pearson, eval/spearman, eval/mismatched_accuracy"),
    ("early_stopping_metric", "eval/f1",
     "evals report eval/loss, eval/accuracy (--eval_metrics)"),
    ("eval_metrics", "pearson", "pearson is not a classification metric; "
     "choose from accuracy, f1, mcc"),
    ("num_classes", 0, "must be at least 1 (1 = regression)"),
    ("header", "maybe", "choose one of auto, yes, no"),
    ("text_column", "a,b,c", "give one field, or two for a sentence pair"),
    ("quoting", "double", "choose one of csv, none"),
    ("model_dir", "", "give a folder (local or gs://)"),
    ("layer_decay", 0.0, "must be in (0, 1]"),
    ("layer_decay", 1.5, "must be in (0, 1]"),
    ("grad_accumulation_steps", 0, "must be >= 1"),
])
def test_validation_table(field, value, message):
  c = config_lib.Config(**{field: value})
  with pytest.raises(errors.ConfigError) as info:
    checks.validate(c)
  assert str(info.value) == f"--{field}={value!r} is invalid: {message}"


def test_label_map_defaults():
  assert config_lib.Config().label_map_for() == {"0": 0, "1": 1}
  assert config_lib.Config(num_classes=3).label_map_for() == {
      "0": 0,
      "1": 1,
      "2": 2
  }
  assert config_lib.Config(tfds_name="sentiment140").label_map_for() == {
      "0": 0,
      "4": 1
  }
  assert config_lib.Config().label_map_for(sentiment140=True) == {
      "0": 0,
      "4": 1
  }
  assert config_lib.Config(label_map="2:0,07:1").label_map_for(
      sentiment140=True) == {
          "2": 0,
          "7": 1
      }
  # Words (GLUE's RTE), and no map at all for a regression.
  assert config_lib.Config(
      label_map="not_entailment:0, entailment:1").label_map_for() == {
          "not_entailment": 0,
          "entailment": 1
      }
  assert config_lib.Config(num_classes=1).label_map_for() == {}


def test_known_tfds_tasks_fill_what_the_user_left_unset():
  mnli = config_lib.complete(
      config_lib.Config(tfds_name="glue/mnli"), given={"tfds_name"})
  assert (mnli.num_classes, mnli.label_names, mnli.metrics(),
          mnli.pairs) == (3, "entailment,neutral,contradiction", ("accuracy",),
                          True)
  assert mnli.tfds_defaults() == ("premise,hypothesis", "label")
  stsb = config_lib.complete(
      config_lib.Config(tfds_name="glue/stsb"), given={"tfds_name"})
  assert (stsb.num_classes, stsb.regression, stsb.class_names(),
          stsb.metrics()) == (1, True, ["score"], ("pearson", "spearman"))
  mrpc = config_lib.complete(
      config_lib.Config(tfds_name="glue/mrpc", eval_metrics="accuracy"),
      given={"tfds_name", "eval_metrics"})
  assert mrpc.metrics() == ("accuracy",)
  assert mrpc.class_names() == ["not_equivalent", "equivalent"]
  assert mrpc.hidden_test_labels()
  assert not config_lib.Config(tfds_name="imdb_reviews").hidden_test_labels()
  files = config_lib.Config(train_file="t.tsv", text_column="a, b")
  assert files.pairs and not config_lib.Config(train_file="t.tsv").pairs
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


def _plan(**kwargs):
  values = dict(steps_per_epoch=100, total_steps=100, warmup_steps=10)
  values.update(kwargs)
  return plan_lib.Plan(**values)


def test_loop_boundaries_fall_on_evals_checkpoints_and_the_profile():
  plan = _plan(steps_per_loop=30, eval_every=25, checkpoint_every=40)
  stops, step = [], 0
  while step < plan.total_steps:
    step = plan.next_stop(step)
    stops.append(step)
  assert stops == [25, 40, 50, 75, 80, 100]
  assert [s for s in stops if plan.eval_due(s)] == [25, 50, 75]
  assert [s for s in stops if plan.checkpoint_due(s)] == [40, 80]
  profiled = _plan(steps_per_loop=30, profile=(7, 9))
  assert [profiled.next_stop(s) for s in (0, 6, 9)] == [6, 9, 39]


def test_make_plan_in_steps():
  c = config_lib.Config(batch_size=32, epochs=2.5, warmup_fraction=0.1)
  plan = plan_lib.make_plan(c, train_examples=1000)
  assert plan.durations() == dict(
      steps_per_epoch=31, total_steps=78, warmup_steps=8)
  fixed = plan_lib.make_plan(dataclasses.replace(c, train_steps=5), 1000)
  assert fixed.total_steps == 5 and fixed.warmup_steps == 0
  with pytest.raises(
      errors.TrainingError,
      match=r"the training split has 10 usable examples, fewer than one "
      r"global batch \(--batch_size=32\)"):
    plan_lib.make_plan(c, train_examples=10)


def test_micro_batches_must_split_the_batch_evenly():
  c = config_lib.Config(batch_size=32, grad_accumulation_steps=3)
  with pytest.raises(errors.ConfigError) as info:
    checks.check_replicas(c, 2)
  assert str(info.value) == (
      "--batch_size=32 is invalid: the global batch must be divisible by "
      "the 2 replicas x 3 micro-batches; use a multiple of 6")
  checks.check_replicas(
      config_lib.Config(batch_size=32, grad_accumulation_steps=4), 2)
