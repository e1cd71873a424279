"""The command line: one flag per Config field (default, help, choices),
flagfiles, flags written once, the boundary."""

import dataclasses
import glob
import os
import re

from absl import flags
import pytest

from conftest import ROOT
from trainer.commands import cli
from trainer.foundation import checks
from trainer.foundation import config as config_lib


def _flag_values():
  flag_values = flags.FlagValues()
  cli.define_config_flags(flag_values=flag_values)
  return flag_values


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


def test_every_flag_of_before_is_a_config_field_with_its_default():
  flag_values = _flag_values()
  for name, default in FLAGS_BEFORE.items():
    assert flag_values[name].default == default, name
    assert getattr(config_lib.Config(), name) == default, name
  assert set(FLAGS_BEFORE) <= set(config_lib.FIELDS)


def test_docs_flags_has_a_row_per_field_with_its_resume_rule():
  """docs/flags.md: one table row per Config field, whose last column says
  what `run_dir.check_resume` does with a change (yes = allowed)."""
  with open(os.path.join(ROOT, "docs", "flags.md")) as f:
    # trainer.main's tables; the other commands' come after, with no
    # resume column.
    text = f.read().split("## The other commands")[0]
    rows = {
        m.group(1): m.group(2)
        for m in re.finditer(r"^\| `--(\w+)` \|.*\| ([^|]+) \|$", text, re.M)
    }
  for name, field in config_lib.FIELDS.items():
    assert name in rows, f"docs/flags.md has no row for --{name}"
    said = rows[name].strip().startswith("yes")
    assert said == field.metadata["resume"], f"--{name}: {rows[name]}"
