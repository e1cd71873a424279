"""A run's folder: where everything goes, and its small JSON files.

`Locations` is resolved once from the Config (`--checkpoint_dir`,
`--summary_dir`, `--export_base_dir`, each defaulting under `model_dir`;
Vertex AI's AIP_* variables became those flags' values in
`config.complete`). Non-chief workers of a multi-worker job get a private
folder instead (`for_worker`). JSON state is written to a temporary file
and renamed over the old one, so a reader never sees half a file, on local
disks, gs:// and ram:// alike.
"""

import dataclasses
import json
import os
import uuid

from absl import logging
import tensorflow as tf


@dataclasses.dataclass(frozen=True)
class Locations:
  """The folders and files of one run (local, gs:// or ram://)."""

  model_dir: str
  checkpoints: str
  summaries: str
  export: str

  @property
  def best(self):
    """The best checkpoint by the early-stopping metric, and best.json."""
    return os.path.join(self.checkpoints, "best")

  @property
  def config_json(self):
    return os.path.join(self.model_dir, "config.json")

  @property
  def summary_json(self):
    return os.path.join(self.model_dir, "summary.json")

  @property
  def data_stats(self):
    """Row counts per split, cached so a resumed run skips counting."""
    return os.path.join(self.model_dir, "data_stats.json")

  def summary_writer_dir(self, kind):
    """TensorBoard folder of `kind` ("train" or "eval")."""
    return os.path.join(self.summaries, kind)

  def export_dir(self, step):
    return os.path.join(self.export, str(step))


def locations(c):
  """The Locations of Config `c` ('' flags: under model_dir)."""
  return Locations(
      model_dir=c.model_dir,
      checkpoints=c.checkpoint_dir or os.path.join(c.model_dir, "checkpoints"),
      summaries=c.summary_dir or os.path.join(c.model_dir, "summaries"),
      export=c.export_base_dir or os.path.join(c.model_dir, "export"))


def for_worker(model_dir, task_id):
  """A non-chief worker's private folder under `model_dir` (its saves are
  collective, but only the chief's are kept); removed at the end."""
  tmp = os.path.join(model_dir, f".worker-{task_id}-tmp")
  return Locations(
      model_dir=tmp,
      checkpoints=os.path.join(tmp, "checkpoints"),
      summaries=os.path.join(tmp, "summaries"),
      export=os.path.join(tmp, "export"))


def write_json(path, obj):
  """Writes `obj` as JSON to `path` atomically (temp file, then rename)."""
  tmp = f"{path}.tmp-{uuid.uuid4().hex[:8]}"
  with tf.io.gfile.GFile(tmp, "w") as f:
    f.write(json.dumps(obj, indent=2, sort_keys=True) + "\n")
  tf.io.gfile.rename(tmp, path, overwrite=True)


def read_json(path):
  """The JSON at `path`, or None when it is missing or not valid JSON (a
  file of an older version, written in place and cut by a kill)."""
  if not tf.io.gfile.exists(path):
    return None
  with tf.io.gfile.GFile(path) as f:
    text = f.read()
  try:
    return json.loads(text)
  except ValueError:
    logging.warning("Ignoring %s: not valid JSON", path)
    return None
