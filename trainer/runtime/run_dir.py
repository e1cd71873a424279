"""A run's folder: where everything goes, and its small JSON files.

`Locations` is resolved once from the flags (`--checkpoint_dir`,
`--summary_dir`, `--export_base_dir`, each defaulting under `model_dir`;
Vertex AI's AIP_* variables became those flags' values in
`config.complete`). Non-chief workers of a multi-worker job get a private
folder instead (`for_worker`). JSON state is written to a temporary file
and renamed over the old one, so a reader never sees half a file, on local
disks, gs:// and ram:// alike. `run_lock.Lock` gives the folder to one
command at a time.
"""

import dataclasses
import fcntl
import json
import os
import socket
import uuid

from absl import logging
import tensorflow as tf

from trainer.foundation import errors


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
  def record_copy(self):
    """A copy of config.json beside the checkpoints, written with it: what
    the refusal of a folder that lost its config.json points to
    (`read_record`). No command resumes from it by itself."""
    return os.path.join(self.checkpoints, "run_config.json")

  @property
  def summary_json(self):
    return os.path.join(self.model_dir, "summary.json")

  @property
  def data_stats(self):
    """Row counts per split, cached so a resumed run skips counting."""
    return os.path.join(self.model_dir, "data_stats.json")

  @property
  def length_stats(self):
    """The training rows per packed length (--seq_buckets), cached."""
    return os.path.join(self.model_dir, "length_stats.json")

  @property
  def log_file(self):
    """The run's log lines (every attempt's, appended)."""
    return os.path.join(self.model_dir, "train.log")

  def summary_writer_dir(self, kind):
    """TensorBoard folder of `kind` ("train" or "eval")."""
    return os.path.join(self.summaries, kind)

  def export_dir(self, step):
    return os.path.join(self.export, str(step))


def _under(model_dir, checkpoints="", summaries="", export=""):
  """Locations of a run in `model_dir`; '' folders are its subfolders."""
  return Locations(
      model_dir=model_dir,
      checkpoints=checkpoints or os.path.join(model_dir, "checkpoints"),
      summaries=summaries or os.path.join(model_dir, "summaries"),
      export=export or os.path.join(model_dir, "export"))


def locations(model_dir, checkpoint_dir="", summary_dir="", export_base_dir=""):
  """The Locations of a run in `model_dir`: --checkpoint_dir, --summary_dir,
  --export_base_dir, or ('') their defaults under it."""
  return _under(model_dir, checkpoint_dir, summary_dir, export_base_dir)


def for_worker(model_dir, task_id):
  """A non-chief worker's private folder under `model_dir` (its saves are
  collective, but only the chief's are kept); removed at the end."""
  return _under(os.path.join(model_dir, f".worker-{task_id}-tmp"))


def check_resume(saved, c):
  """Compares a run's saved config (config.json's "config") with Config
  `c` that would resume it from its checkpoints.

  Returns:
    The allowed changes (fields that may change on resume: their metadata
    says so), as "--name: old -> new" strings.

  Raises:
    ConfigError: another field changed (the model's shape, the classes, the
      data or its order); the message names each one.
  """
  allowed, refused = [], []
  for f in dataclasses.fields(c):
    old, new = saved.get(f.name, f.metadata["missing"]), getattr(c, f.name)
    same = f.metadata["same"]
    if old != new and not (same and same(old, new, c)):
      change = f"--{f.name}: {old!r} -> {new!r}"
      (allowed if f.metadata["resume"] else refused).append(change)
  if refused:
    raise errors.ConfigError(
        f"--model_dir={c.model_dir} holds the checkpoints of a run with "
        f"other flags ({'; '.join(refused)}): resuming would not continue "
        "that run. Use a new --model_dir, or that run's flags (its "
        "config.json); nothing was changed")
  return allowed


MISSING = "is missing"


def _parse_record(path):
  """(the run's record at `path` as a dict, '') or (None, why it is none:
  MISSING, not valid JSON, not a training run's record). Logs nothing:
  a refused command leaves train.log as it was."""
  if not tf.io.gfile.exists(path):
    return None, MISSING
  with tf.io.gfile.GFile(path) as f:
    text = f.read()
  try:
    record = json.loads(text)
  except ValueError:
    return None, "is unreadable (not valid JSON)"
  if not (isinstance(record, dict) and isinstance(record.get("config"), dict)):
    return None, ("is unreadable (not a training run's record: no "
                  "\"config\" object)")
  return record, ""


def read_record(where, holds_checkpoints):
  """The record (config.json) of the run in Locations `where`.

  Args:
    where: the run's Locations.
    holds_checkpoints: whether its checkpoint folder holds a checkpoint
      (`checkpoints.exist`).

  Returns:
    (the record, '') or, for a folder without checkpoints, (None, why it
    has none: MISSING, or why it is unreadable).

  Raises:
    ConfigError: the folder holds checkpoints but no readable record. What
      those checkpoints mean (the encoder, the classes, the data and its
      order, the batch) is known only from it, so no command may resume,
      score or export them under flags that cannot be checked. The message
      points to the run's copy (`Locations.record_copy`) when it is
      readable.
  """
  record, why = _parse_record(where.config_json)
  if record is not None or not holds_checkpoints:
    return record, why
  copy, _ = _parse_record(where.record_copy)
  restore = (f"restore it (the run keeps a copy: cp {where.record_copy} "
             f"{where.config_json})"
             if copy is not None else "restore it from a backup")
  raise errors.ConfigError(
      f"--model_dir={where.model_dir} holds a run's checkpoints "
      f"({where.checkpoints}) but its config.json {why}, so this run's flags "
      f"cannot be checked against them; {restore}, or use a new "
      "--model_dir; nothing was changed")


def copy_record(where):
  """Copies the run's config.json to `Locations.record_copy` (atomically,
  as every JSON file here), beside the checkpoints it describes."""
  with tf.io.gfile.GFile(where.config_json) as f:
    text = f.read()
  tf.io.gfile.makedirs(where.checkpoints)
  _write_text(where.record_copy, text)


def check_output_file(flag, path):
  """An output file's folder must exist (the command would fail at its
  end otherwise, after all the work)."""
  folder = os.path.dirname(path)
  if folder and not tf.io.gfile.isdir(folder):
    raise errors.ConfigError(
        f"--{flag}={path} is invalid: the folder {folder} does not exist; "
        "create it or write elsewhere")
  if tf.io.gfile.isdir(path):
    raise errors.ConfigError(f"--{flag}={path} is a folder; give a file")


def write_json(path, obj):
  """Writes `obj` as JSON to `path` atomically (`_write_text`)."""
  _write_text(path, json.dumps(obj, indent=2, sort_keys=True) + "\n")


def _write_text(path, text):
  """Writes `text` to `path` atomically (temp file, then rename)."""
  tmp = f"{path}.tmp-{uuid.uuid4().hex[:8]}"
  with tf.io.gfile.GFile(tmp, "w") as f:
    f.write(text)
  tf.io.gfile.rename(tmp, path, overwrite=True)


def remove_quietly(path):
  """Removes the folder `path` if it is there."""
  try:
    tf.io.gfile.rmtree(path)
  except tf.errors.NotFoundError:
    pass  # Never created, or an object store with no folder to remove.


def publish_folder(write, final, last):
  """Writes a folder through `write(tmp)` into a temporary sibling of
  `final`, then moves it to `final`, so no reader ever sees a half-written
  folder under that name: a complete one has its file `last` (written last
  by `write`). On a local disk that is one atomic rename. Elsewhere (gs://,
  ram://, other object stores) a folder's rename moves its objects one by
  one, in name order, so the files are copied instead, `last` last. A
  `final` without `last` (the remains of an interrupted copy) is replaced;
  one with `last` (written meanwhile by another process) is an ExportError
  and stays as it is. Temporary folders of writers that were killed are
  removed first (`_remove_abandoned`). Returns final."""
  final = final.rstrip("/")
  parent = os.path.dirname(final) or "."
  tf.io.gfile.makedirs(parent)
  prefix = f".tmp-{os.path.basename(final)}-"
  _remove_abandoned(parent, prefix)
  tmp = os.path.join(
      parent, f"{prefix}{socket.gethostname()}-{os.getpid()}-"
      f"{uuid.uuid4().hex[:8]}")
  local = "://" not in final or final.startswith("file://")
  writer = _hold_writer(tmp) if local else None
  try:
    write(tmp)
    if tf.io.gfile.exists(os.path.join(final, last)):
      raise errors.ExportError(f"{final} was written by another process "
                               "meanwhile; remove it to write it again")
    if tf.io.gfile.exists(final):
      remove_quietly(final)
    if local:
      tf.io.gfile.rename(tmp, final)
      os.remove(os.path.join(final, _WRITER))  # still held: moved with it
      return final
    files = []
    for folder, _, names in tf.io.gfile.walk(tmp):
      files += [os.path.join(folder, n) for n in names]
    files.sort(key=lambda p: os.path.basename(p) == last)
    for src in files:
      dst = os.path.join(final, os.path.relpath(src, tmp))
      tf.io.gfile.makedirs(os.path.dirname(dst))
      tf.io.gfile.copy(src, dst, overwrite=True)
  finally:
    remove_quietly(tmp)
    if writer:
      writer.close()
  return final


# A local temporary folder holds this file, flock()ed by its writer while
# it writes: the kernel drops the lock when the writer dies (SIGKILL too),
# whatever its pid namespace or host name.
_WRITER = ".writer.lock"


def _hold_writer(tmp):
  os.makedirs(tmp)
  f = open(os.path.join(tmp, _WRITER), "w", encoding="utf-8")
  fcntl.flock(f, fcntl.LOCK_EX)
  return f


def _writer_gone(folder):
  """Whether the writer of the local temporary `folder` is gone: its lock
  file can be locked (None: the folder has none)."""
  try:
    f = open(os.path.join(folder, _WRITER), encoding="utf-8")
  except OSError:
    return None
  with f:
    try:
      fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
      return False
    return True


def _remove_abandoned(parent, prefix):
  """Removes the temporary folders `prefix`<host>-<pid>-<id> in `parent`
  that a killed writer left: a killed export's 30-90 MB would otherwise
  stay forever. Locally the writer's lock file tells (`_WRITER`); on an
  object store, a writer of this host whose process is gone (another
  host's are left: whether it still writes cannot be told from here)."""
  try:
    names = tf.io.gfile.listdir(parent)
  except tf.errors.OpError:
    return
  host, local = socket.gethostname(), "://" not in parent
  for name in names:
    name = name.rstrip("/")
    parts = name[len(prefix):].rsplit("-", 2)
    if not name.startswith(prefix) or len(parts) != 3:
      continue
    folder = os.path.join(parent, name)
    gone = _writer_gone(folder) if local else None
    if gone is None and parts[0] == host and parts[1].isdigit():
      try:
        os.kill(int(parts[1]), 0)
        gone = False
      except ProcessLookupError:
        gone = True
      except (PermissionError, OverflowError):
        gone = False  # alive (another user's), or not a pid
    if gone:
      logging.info("Removing %s, left by a killed export", folder)
      remove_quietly(folder)


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
