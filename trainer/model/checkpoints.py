"""The one checkpoint layout, the restore order, and checkpoint integrity.

Layout (`layout()`): `model/...` (the classifier: encoder and head),
`optimizer/...` (AdamW's slots and `iterations`, the step), the encoder's
variables again as a list under `encoder_variables` (how a loaded
SavedModel's object graph is checkpointed depends on how it was saved; a
list of variables is saved whatever the handle), and `data_skip`. The
trainer writes it; the export reads it (`for_reading`).

Restore order (`resume_point`): the newest intact checkpoint of the run's
checkpoint folder, else nothing (the pretrained encoder from its handle and
a fresh head). The checkpoint to export (`for_export`): the one asked for,
else the best, else the newest.

Integrity (`repair`): find the newest checkpoint that is whole.

A job killed mid-save, a disk that filled up or a copy gone wrong can leave an
empty or garbled `checkpoint` state file, a data shard without its `.index`,
a truncated data shard, or the `<prefix>_temp` folder of an interrupted
sharded save. `repair` finds the newest checkpoint whose index and every
tensor read back, moves broken ones aside (renamed `broken-...`, never
deleted), removes leftover temporary folders, rewrites the state file, and
reports what it skipped. A run never resumes from a broken checkpoint and
never silently starts from scratch when checkpoints exist.
"""

import dataclasses
import os
import re

from absl import logging
import tensorflow as tf

from trainer.foundation import errors

_STEP = re.compile(r"ckpt-(\d+)(?:\.index|\.data-\d+-of-\d+)$")
CheckpointError = errors.CheckpointError


def layout(model,
           encoder,
           optimizer,
           data_skip=None,
           loss_scale=None,
           bucket_steps=None):
  """The run's tf.train.Checkpoint over `model`, `encoder`'s variables,
  `optimizer` (or a stand-in holding `iterations`), `data_skip`, the steps
  trained per length bucket and, for float16, the `optimization.LossScale`
  (`loss_scale/...`)."""
  objects = dict(
      model=model,
      optimizer=optimizer,
      encoder_variables=list(encoder.variables))
  if data_skip is not None:
    objects["data_skip"] = data_skip
  if loss_scale is not None:
    objects["loss_scale"] = loss_scale
  if bucket_steps is not None:
    objects["bucket_steps"] = bucket_steps
  return tf.train.Checkpoint(**objects)


def holds(path, name):
  """Whether the checkpoint at prefix `path` holds the object `name`
  (loss_scale: float16's; bucket_steps: written since they are kept)."""
  return any(
      key.startswith(f"{name}/") for key, _ in tf.train.list_variables(path))


def has_loss_scale(path):
  """Whether the checkpoint at prefix `path` holds a loss scale (float16)."""
  return holds(path, "loss_scale")


def for_reading(model, encoder):
  """(checkpoint, step variable) restoring the weights of a run's checkpoint
  without its optimizer slots (restore with `expect_partial`)."""
  step = tf.Variable(0, dtype=tf.int64)
  return layout(model, encoder, tf.train.Checkpoint(iterations=step)), step


def misfit(path, model, encoder):
  """Why the checkpoint at `path` cannot hold the weights of `model` (a
  Classifier) and `encoder`, as a phrase, or None when they fit. Read from
  the checkpoint's index before a restore, which on a mismatch fails deep
  in TensorFlow after a warning per variable."""
  shapes = dict(tf.train.list_variables(path))
  wanted = {"model/kernel": model.kernel, "model/bias": model.bias}
  wanted.update(
      (f"encoder_variables/{i}", v) for i, v in enumerate(encoder.variables))
  for key, variable in wanted.items():
    have = shapes.get(f"{key}/.ATTRIBUTES/VARIABLE_VALUE")
    want = variable.shape.as_list()
    if have is None:
      return f"it holds no {key} ({variable.name}, {want})"
    if list(have) != want:
      return f"its {key} ({variable.name}) is {list(have)}, this run's {want}"
  extra = sum(
      1 for k in shapes
      if k.startswith("encoder_variables/") and k.endswith("VARIABLE_VALUE"))
  if extra != len(encoder.variables):
    return (f"it holds {extra} encoder variables, this run's encoder "
            f"{len(encoder.variables)}")
  return None


def load_average(path, model):
  """Puts the moving average of the weights (--ema_decay: AdamW's `ema`,
  one per trainable variable in order) of the checkpoint at `path` into
  `model` (a Classifier): what evals and exports of that run use."""
  reader = tf.train.load_checkpoint(path)
  for i, var in enumerate(model.trainable_variables):
    key = f"optimizer/ema/{i}/.ATTRIBUTES/VARIABLE_VALUE"
    if not reader.has_tensor(key):
      raise errors.CheckpointError(
          f"{path} holds no moving average of the weights (--ema_decay), "
          "though the run's config.json sets it; export another checkpoint "
          "of the run")
    value = reader.get_tensor(key)
    if list(value.shape) != var.shape.as_list():
      raise errors.CheckpointError(
          f"{path}: the moving average of {var.name} is {list(value.shape)}, "
          f"the model's {var.shape.as_list()}")
    var.assign(value)


def exist(directory):
  """Whether `directory` holds any checkpoint file (intact or not)."""
  return bool(tf.io.gfile.glob(os.path.join(directory, "ckpt-*")))


def resume_point(directory, chief=True):
  """The checkpoint a run resumes from, or None to start from the handle.

  The chief repairs the folder first (`repair`); other workers of a
  multi-worker job read the chief's state as it is.
  """
  if chief:
    return repair(directory).intact
  return tf.train.latest_checkpoint(directory)


def for_export(checkpoints, best, explicit=""):
  """`explicit`, else the newest in `best`, else the newest in
  `checkpoints` (the run's folders)."""
  if explicit:
    if not tf.io.gfile.exists(explicit + ".index"):
      raise errors.ExportError(f"--checkpoint={explicit}: no such checkpoint "
                               "(give the path without .index)")
    return explicit
  for folder in (best, checkpoints):
    latest = tf.train.latest_checkpoint(folder)
    if latest:
      return latest
  raise errors.ExportError(f"no checkpoint to export in {checkpoints}")


@dataclasses.dataclass
class Report:
  intact: str | None = None
  skipped: list = dataclasses.field(default_factory=list)  # (prefix, why)
  removed: list = dataclasses.field(default_factory=list)  # temp folders
  state_file_broken: bool = False


def _problem(prefix):
  """Why the checkpoint at `prefix` cannot be restored, or None."""
  if not tf.io.gfile.exists(prefix + ".index"):
    return "missing .index"
  try:
    reader = tf.train.load_checkpoint(prefix)
    for name in reader.get_variable_to_shape_map():
      reader.get_tensor(name)
  except (tf.errors.OpError, ValueError, IndexError) as e:
    # A truncated shard shows up as IndexError ("Read less bytes than
    # requested") from the reader, a garbled one as an OpError.
    return f"unreadable ({errors.first_line(e, 200)})"
  return None


def _state_file_ok(directory):
  path = os.path.join(directory, "checkpoint")
  if not tf.io.gfile.exists(path):
    return True
  try:
    state = tf.train.get_checkpoint_state(directory)
  except Exception:  # pylint: disable=broad-except  (text_format errors)
    return False
  return state is not None and bool(state.model_checkpoint_path)


def _write_state(directory, latest, kept):
  """The `checkpoint` state file, as CheckpointManager writes it."""
  lines = [f'model_checkpoint_path: "{os.path.basename(latest)}"']
  lines += [
      f'all_model_checkpoint_paths: "{os.path.basename(p)}"' for p in kept
  ]
  with tf.io.gfile.GFile(os.path.join(directory, "checkpoint"), "w") as f:
    f.write("\n".join(lines) + "\n")


def repair(directory):
  """Makes `directory` safe to resume from; returns a Report.

  Raises:
    CheckpointError: checkpoints exist but none is intact.
  """
  report = Report()
  if not tf.io.gfile.isdir(directory):
    return report
  names = tf.io.gfile.listdir(directory)
  for name in names:
    if name.rstrip("/").endswith("_temp") or "_temp_" in name:
      tf.io.gfile.rmtree(os.path.join(directory, name.rstrip("/")))
      report.removed.append(name.rstrip("/"))
  steps = sorted({int(m.group(1)) for m in map(_STEP.match, names) if m},
                 reverse=True)
  report.state_file_broken = not _state_file_ok(directory)
  for step in steps:
    prefix = os.path.join(directory, f"ckpt-{step}")
    why = _problem(prefix)
    if why is None:
      report.intact = prefix
      break
    report.skipped.append((prefix, why))
    for name in tf.io.gfile.glob(prefix + ".*"):
      tf.io.gfile.rename(
          name,
          os.path.join(directory, "broken-" + os.path.basename(name)),
          overwrite=True)
  if steps and report.intact is None:
    raise CheckpointError(
        f"{directory} holds checkpoints {steps} but none is intact (" +
        "; ".join(f"{os.path.basename(p)}: {w}" for p, w in report.skipped) +
        "). Restore them from a backup, or point --model_dir/"
        "--checkpoint_dir at an empty folder to start from scratch.")
  if report.skipped or report.state_file_broken:
    state = os.path.join(directory, "checkpoint")
    if tf.io.gfile.exists(state):
      tf.io.gfile.remove(state)
    if report.intact:
      prefixes = [os.path.join(directory, f"ckpt-{s}") for s in sorted(steps)]
      kept = [p for p in prefixes if tf.io.gfile.exists(p + ".index")]
      _write_state(directory, report.intact, kept)
  for prefix, why in report.skipped:
    logging.warning(
        "Skipped broken checkpoint %s (%s); moved aside as "
        "broken-*", prefix, why)
  for name in report.removed:
    logging.warning("Removed %s, left by an interrupted save", name)
  if report.state_file_broken:
    logging.warning(
        "The checkpoint state file in %s was empty or garbled; "
        "rewritten", directory)
  return report
