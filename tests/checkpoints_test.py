"""Checkpoints: the layout, the restore order, the choice to export, and
repair of every way a checkpoint folder breaks."""

import dataclasses
import glob
import os
import shutil

import numpy as np
import pytest
import tensorflow as tf

from trainer.encoders import handles
from trainer.foundation import config as config_lib
from trainer.foundation import errors
from trainer.model import checkpoints
from trainer.model import classifier as model_lib
from trainer.runtime import run_dir
from trainer.training import train_lib


@pytest.fixture(scope="module")
def trained(tmp_path_factory, demo_paths):
  """A run with checkpoints at steps 6 and 12."""
  model_dir = str(tmp_path_factory.mktemp("ckpt_run"))
  c = config_lib.Config(
      model_dir=model_dir,
      demo_cache_dir=demo_paths["root"],
      train_steps=12,
      batch_size=16,
      seq_length=32,
      steps_per_loop=6,
      checkpoint_every=6,
      export=False)
  train_lib.run(c)
  return c


def test_the_checkpoint_layout_and_reading_it_back(trained):
  path = tf.train.latest_checkpoint(
      os.path.join(trained.model_dir, "checkpoints"))
  names = {name for name, _ in tf.train.list_variables(path)}
  for name in ("model/kernel/.ATTRIBUTES/VARIABLE_VALUE",
               "model/bias/.ATTRIBUTES/VARIABLE_VALUE",
               "optimizer/iterations/.ATTRIBUTES/VARIABLE_VALUE",
               "encoder_variables/0/.ATTRIBUTES/VARIABLE_VALUE",
               "data_skip/.ATTRIBUTES/VARIABLE_VALUE"):
    assert name in names
  # The export's view: weights and step, no optimizer slots.
  preprocessor, encoder = handles.load(
      "demo",
      "demo",
      tf.distribute.get_strategy(),
      demo_cache_dir=trained.demo_cache_dir)
  del preprocessor
  model = model_lib.Classifier(encoder, 2, seed=99)
  ckpt, step = checkpoints.for_reading(model, encoder)
  ckpt.restore(path).expect_partial().assert_existing_objects_matched()
  assert int(step.numpy()) == 12
  np.testing.assert_array_equal(
      model.kernel.numpy(),
      tf.train.load_checkpoint(path).get_tensor(
          "model/kernel/.ATTRIBUTES/VARIABLE_VALUE"))


def test_the_checkpoint_to_export(trained, tmp_path):
  where = run_dir.locations(trained.model_dir)
  # The best (by eval loss) of this run is a `best-N` checkpoint.
  assert os.path.basename(
      checkpoints.for_export(where.checkpoints, where.best)).startswith("best-")
  explicit = os.path.join(where.checkpoints, "ckpt-6")
  assert checkpoints.for_export(where.checkpoints, where.best,
                                explicit) == explicit
  assert checkpoints.for_export(where.checkpoints,
                                str(tmp_path)).endswith("ckpt-12")
  with pytest.raises(errors.ExportError, match="no such checkpoint"):
    checkpoints.for_export(where.checkpoints, where.best, explicit + "x")
  with pytest.raises(errors.ExportError, match="no checkpoint to export in"):
    checkpoints.for_export(str(tmp_path), str(tmp_path))
  # A worker reads the chief's state as it is; the chief repairs first.
  assert checkpoints.resume_point(
      where.checkpoints, chief=False).endswith("ckpt-12")
  assert checkpoints.resume_point(str(tmp_path / "none")) is None


def _copy_run(c, tmp_path):
  target = str(tmp_path / "run")
  shutil.copytree(c.model_dir, target)
  return dataclasses.replace(
      c, model_dir=target), os.path.join(target, "checkpoints")


def _data_shard(directory, step):
  return glob.glob(os.path.join(directory, f"ckpt-{step}.data-*"))[0]


CORRUPTIONS = {
    "empty state file":
        lambda d: open(os.path.join(d, "checkpoint"), "w").close(),
    "garbled state file":
        lambda d: open(os.path.join(d, "checkpoint"), "w").write(
            "model_checkpoint_path: \x00\x01 garbage {{{"),
    "missing index":
        lambda d: os.remove(os.path.join(d, "ckpt-12.index")),
    "truncated data shard":
        lambda d: open(_data_shard(d, 12), "r+b").truncate(
            os.path.getsize(_data_shard(d, 12)) // 2),
    "leftover temporary folder":
        lambda d: os.makedirs(os.path.join(d, "ckpt-18_temp", "part-00000")),
}

# Which checkpoint the run must resume from after each corruption.
EXPECTED = {
    "empty state file": 12,
    "garbled state file": 12,
    "missing index": 6,
    "truncated data shard": 6,
    "leftover temporary folder": 12,
}


@pytest.mark.parametrize("case", sorted(CORRUPTIONS))
def test_corrupted_checkpoints_fall_back_to_the_newest_intact(
    trained, tmp_path, case):
  _, directory = _copy_run(trained, tmp_path)
  CORRUPTIONS[case](directory)
  report = checkpoints.repair(directory)
  assert report.intact == os.path.join(directory, f"ckpt-{EXPECTED[case]}")
  if EXPECTED[case] == 6:
    assert [os.path.basename(p) for p, _ in report.skipped] == ["ckpt-12"]
    assert glob.glob(os.path.join(directory, "broken-ckpt-12.*"))
  if "state file" in case:
    assert report.state_file_broken
  if "temporary" in case:
    assert report.removed == ["ckpt-18_temp"]
    assert not os.path.exists(os.path.join(directory, "ckpt-18_temp"))
  # The state file now names the intact checkpoint.
  assert tf.train.latest_checkpoint(directory) == report.intact


def test_resume_after_a_truncated_shard_starts_from_the_older_checkpoint(
    trained, tmp_path):
  c, directory = _copy_run(trained, tmp_path)
  CORRUPTIONS["truncated data shard"](directory)
  summary = train_lib.run(dataclasses.replace(c, train_steps=18))
  assert summary["start_step"] == 6 and summary["final_step"] == 18


def test_no_intact_checkpoint_is_a_clear_error(trained, tmp_path):
  _, directory = _copy_run(trained, tmp_path)
  for step in (6, 12):
    os.remove(os.path.join(directory, f"ckpt-{step}.index"))
  with pytest.raises(
      checkpoints.CheckpointError,
      match=r"holds checkpoints \[12, 6\] but none is intact"):
    checkpoints.repair(directory)
