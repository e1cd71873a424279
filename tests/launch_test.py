"""Set-up: everything resolved once, the resume, the handles checked."""

import dataclasses
import os
import shutil

import pytest
import tensorflow as tf

import testing

from trainer.encoders import native
from trainer.foundation import config as config_lib
from trainer.foundation import errors
from trainer.foundation import tasks
from trainer.training import encoder_setup


def test_seq_length_above_encoder_positions(demo_paths):
  c = config_lib.Config(seq_length=129, demo_cache_dir=demo_paths["root"])
  with pytest.raises(
      config_lib.ConfigError,
      match=r"--seq_length=129 is invalid: the encoder has 128"):
    encoder_setup.load_model(c, tasks.resolve(c), tf.distribute.get_strategy())


def test_shared_rows_need_an_encoder_that_takes_them(demo_paths, opaque_encoder,
                                                     caplog, info_logging):
  """The demo's encoder and a Model Garden BERT are rebuilt to take shared
  rows; an opaque SavedModel trains one example a row under auto, with one
  log line saying why, and is one error line when rows were asked for."""
  strategy = tf.distribute.get_strategy()
  garden = os.path.join(os.path.dirname(__file__), "data", "model_garden_bert")
  for encoder, preprocessor in (("demo", "demo"),
                                (os.path.join(garden, "encoder"),
                                 os.path.join(garden, "preprocessor"))):
    c = config_lib.Config(
        encoder_handle=encoder,
        preprocessor_handle=preprocessor,
        seq_length=32,
        shared_rows="auto",
        demo_cache_dir=demo_paths["root"])
    _, model, route, rows = encoder_setup.load_model(c, tasks.resolve(c),
                                                     strategy)
    assert rows and isinstance(model, native.NativeEncoder), encoder
    assert route.note == "precision: float32"
  c = config_lib.Config(
      encoder_handle=opaque_encoder,
      preprocessor_handle=demo_paths["preprocessor"],
      seq_length=32,
      shared_rows="auto",
      demo_cache_dir=demo_paths["root"])
  _, model, _, rows = encoder_setup.load_model(c, tasks.resolve(c), strategy)
  assert not rows and not isinstance(model, native.NativeEncoder)
  said = [r.getMessage() for r in caplog.records if "Shared rows" in r.message]
  assert said == [
      f"Shared rows: off, one example a row (--encoder_handle="
      f"{opaque_encoder} is a SavedModel this trainer cannot rebuild "
      "(neither its own encoder nor a Model Garden BERT), whose graph takes "
      "one example a row)"
  ]
  with pytest.raises(
      config_lib.ConfigError,
      match=r"^--shared_rows=4 cannot apply: --encoder_handle=.* is a "
      r"SavedModel this trainer cannot rebuild .*; use --shared_rows=none "
      r"\(or auto, which falls back by itself\)$"):
    encoder_setup.load_model(
        dataclasses.replace(c, shared_rows="4"), tasks.resolve(c), strategy)


def test_a_resume_keeps_the_encoder_its_checkpoint_holds(
    demo_paths, opaque_encoder, caplog, info_logging):
  """A resumed run keeps the encoder it began with, whose variables its
  checkpoint holds (config.json `shared_rows`): null, a Model Garden BERT
  stays as loaded, one example a row, even where it could be rebuilt; a
  list (maybe empty), the encoder is rebuilt, and where it cannot be (a
  rebuild check failing on other hardware) the start is one error line
  naming the folder and the record. A record from before the key decides
  nothing."""
  strategy = tf.distribute.get_strategy()
  garden = os.path.join(os.path.dirname(__file__), "data", "model_garden_bert")
  c = config_lib.Config(
      model_dir="/runs/a",
      encoder_handle=os.path.join(garden, "encoder"),
      preprocessor_handle=os.path.join(garden, "preprocessor"),
      seq_length=32)
  for saved, rebuilt in ((dict(shared_rows=None),
                          False), ({}, True), (dict(shared_rows=[]), True),
                         (dict(shared_rows=[15, 16]), True)):
    _, model, _, rows = encoder_setup.load_model(c, tasks.resolve(c), strategy,
                                                 saved)
    assert rows == rebuilt, saved
    assert isinstance(model, native.NativeEncoder) == rebuilt, saved
  said = [r.getMessage() for r in caplog.records if "Shared rows" in r.message]
  assert said == [
      "Shared rows: off, one example a row, as the run began (config.json "
      "shared_rows null)"
  ]
  c = dataclasses.replace(
      c,
      encoder_handle=opaque_encoder,
      preprocessor_handle=demo_paths["preprocessor"],
      demo_cache_dir=demo_paths["root"])
  with pytest.raises(errors.ConfigError) as e:
    encoder_setup.load_model(c, tasks.resolve(c), strategy,
                             dict(shared_rows=[15, 16]))
  assert str(e.value) == (
      "/runs/a began with the encoder rebuilt for shared rows (config.json "
      "shared_rows=[15, 16]), and its checkpoint holds that encoder's "
      f"variables, but here --encoder_handle={opaque_encoder} is a "
      "SavedModel this trainer cannot rebuild (neither its own encoder nor a "
      "Model Garden BERT), whose graph takes one example a row; resume where "
      "the run began (the same device kind and TensorFlow) or start a new "
      "--model_dir")


def _lose_record(demo_run, folder, how):
  """A copy of the demo run at `folder` whose config.json is gone
  ("missing") or cut by a kill mid-write ("truncated")."""
  shutil.copytree(demo_run["model_dir"], folder)
  record = os.path.join(folder, "config.json")
  if how == "missing":
    os.remove(record)
  else:
    with open(record, "w") as f:
      f.write('{"model_dir": ')
  return str(folder)


# The commands that read a run's folder, each with flags other than the
# run's (it trained at batch 16, seed 42) where it takes them.
_ON_A_RUN = {
    "main": ("--batch_size=8", "--seed=7", "--train_steps=24"),
    "evaluate": ("--split=validation",),
    "export": (),
}


@pytest.mark.parametrize("how", ["missing", "truncated"])
@pytest.mark.parametrize("name", sorted(_ON_A_RUN))
def test_checkpoints_without_their_record_are_refused(demo_run, demo_paths,
                                                      tmp_path, command, name,
                                                      how):
  """A folder holding checkpoints whose config.json is missing or
  unreadable: trainer.main, evaluate and export each stop with one line
  (exit 2) naming the folder, the record, and the fix (the run's copy of
  its record beside the checkpoints), and leave every file as it was:
  none written, none changed (no config.json rewritten, no train.log
  line, no checkpoint)."""
  model_dir = _lose_record(demo_run, tmp_path / "run", how)
  before = testing.tree_digest(model_dir)
  result = command(name, f"--model_dir={model_dir}",
                   f"--demo_cache_dir={demo_paths['root']}", *_ON_A_RUN[name])
  why = ("is missing" if how == "missing" else "is unreadable (not valid JSON)")
  assert result.returncode == 2, result.stderr[-2000:]
  assert [s for s in result.stderr.splitlines() if s.startswith("error")] == [
      f"error: --model_dir={model_dir} holds a run's checkpoints "
      f"({model_dir}/checkpoints) but its config.json {why}, so this run's "
      "flags cannot be checked against them; restore it (the run keeps a "
      f"copy: cp {model_dir}/checkpoints/run_config.json "
      f"{model_dir}/config.json), or use a new --model_dir; nothing was "
      "changed"
  ]
  assert "Traceback" not in result.stderr
  assert testing.tree_digest(model_dir) == before


def test_the_record_copy_restores_the_run(demo_run, tmp_path, command):
  """Without the copy the line says to restore config.json from a backup;
  the copy put back is the record, and the run's flags check against it
  again (other flags: the usual refusal)."""
  model_dir = _lose_record(demo_run, tmp_path / "run", "missing")
  copy = os.path.join(model_dir, "checkpoints", "run_config.json")
  with open(copy, "rb") as f:
    record = f.read()
  os.remove(copy)
  before = testing.tree_digest(model_dir)
  result = command("export", f"--model_dir={model_dir}")
  assert result.returncode == 2
  assert result.stderr.strip().splitlines()[-1].endswith(
      "cannot be checked against them; restore it from a backup, or use a "
      "new --model_dir; nothing was changed")
  assert testing.tree_digest(model_dir) == before
  with open(os.path.join(model_dir, "config.json"), "wb") as f:
    f.write(record)
  other = command("main", f"--model_dir={model_dir}", "--batch_size=8",
                  "--train_steps=24")
  assert other.returncode == 2
  assert ("holds the checkpoints of a run with other flags (--batch_size: "
          "16 -> 8") in other.stderr
