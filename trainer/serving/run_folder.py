"""A training run's folder read back: its flags, its batch layout, and its
classifier restored from a checkpoint, on this host.

`read_run_config(model_dir)` is the Config the run wrote to config.json
(refused, in one line, when its checkpoints lost that record:
`run_dir.read_record`), with its locations those of the folder as it is
now; `read_layout` its `Layout`; `load_classifier` rebuilds its classifier
(the encoder rebuilt as the run trained it) and restores a checkpoint.
What `trainer.export`, `trainer.evaluate --model_dir` and the Hugging Face
export read.
"""

import os

from absl import logging
import tensorflow as tf

from trainer.encoders import handles
from trainer.encoders import native
from trainer.foundation import config as config_lib
from trainer.foundation import errors
from trainer.foundation import layout as layout_lib
from trainer.foundation import tasks
from trainer.model import checkpoints
from trainer.model import classifier as model_lib
from trainer.runtime import run_dir

ExportError = errors.ExportError


def read_layout(c):
  """The `Layout` the run of Config `c` recorded in its config.json (the
  one --seq_length of a run from before buckets)."""
  record = run_dir.read_json(os.path.join(c.model_dir, "config.json"))
  return layout_lib.Layout.from_record(record, c)


def read_run_config(model_dir, checkpoint_dir=""):
  """The Config a training run wrote to model_dir/config.json, with its
  locations those of `model_dir` as it is now (a run folder copied to
  another bucket or a laptop reads and writes where it now is). A key this
  version does not know is dropped with a warning (a field since removed);
  one it lacks takes its default (a field added since). A folder whose
  checkpoints (in `checkpoint_dir`, default model_dir/checkpoints) lost
  their config.json is a ConfigError (`run_dir.read_record`)."""
  where = run_dir.locations(model_dir, checkpoint_dir)
  record, why = run_dir.read_record(where, checkpoints.exist(where.checkpoints))
  path = where.config_json
  if why == run_dir.MISSING:
    raise ExportError(f"--model_dir={model_dir} has no config.json; is it "
                      "the model_dir of a training run?")
  if record is None:
    raise ExportError(f"{path} is not a training run's config.json: it "
                      f"{why}")
  saved = record["config"]
  unknown = sorted(set(saved) - set(config_lib.FIELDS))
  if unknown:
    logging.warning("%s: ignoring %s (not a flag of this version)", path,
                    ", ".join(unknown))
  known = {k: v for k, v in saved.items() if k in config_lib.FIELDS}
  moved = {k: v for k, v in known.items() if k in _LOCATIONS and v}
  if moved:
    logging.info(
        "%s names %s; this reads and writes under --model_dir=%s instead "
        "(give those flags to use them)", path,
        ", ".join(f"--{k}={v}" for k, v in sorted(moved.items())), model_dir)
  return config_lib.Config(
      **dict(known, model_dir=model_dir, **dict.fromkeys(_LOCATIONS, "")))


# The output locations a config.json may name: never used as saved.
_LOCATIONS = ("checkpoint_dir", "summary_dir", "export_base_dir")


def load_classifier(c, checkpoint="", io_device=None):
  """Rebuilds the classifier of the run of Config `c` (`read_run_config`)
  on the host and restores a checkpoint: `checkpoint`, else the best, else
  the newest (`io_device`: where files are read; a TPU's host).

  Returns:
    (preprocessor, model, checkpoint path, step).
  """
  where = run_dir.locations(c.model_dir, c.checkpoint_dir, c.summary_dir,
                            c.export_base_dir)
  path = checkpoints.for_export(where.checkpoints, where.best, checkpoint)
  preprocessor, encoder = handles.load_checked(
      c.encoder_handle,
      c.preprocessor_handle,
      tf.distribute.get_strategy(),
      seq_length=c.seq_length,
      pairs=tasks.resolve(c).pairs,
      io_device=io_device,
      demo_cache_dir=c.demo_cache_dir)
  if read_layout(c).rebuilt or native.saved_config(encoder) is not None:
    # The run trained the encoder rebuilt (this project's always; a Model
    # Garden BERT's for shared rows, `inputs.rows_encoder`, whose checkpoint
    # its loaded graph cannot read): export it as the live export does.
    encoder = handles.rebuilt(encoder, c.encoder_handle) or encoder
  model = model_lib.Classifier(encoder, c.num_classes, c.dropout_rate, c.seed,
                               model_lib.pooling_of(c))
  problem = checkpoints.misfit(path, model, encoder)
  if problem:
    raise errors.CheckpointError(
        f"{path} does not fit the run in --model_dir={c.model_dir}: "
        f"{problem}. Give a checkpoint of that run (--checkpoint), or that "
        "checkpoint's own --model_dir")
  ckpt, step = checkpoints.for_reading(model, encoder)
  options = tf.train.CheckpointOptions(experimental_io_device=io_device)
  ckpt.restore(
      path, options=options).expect_partial().assert_existing_objects_matched()
  if c.ema_decay:
    checkpoints.load_average(path, model)
  return preprocessor, model, path, int(step.numpy())
