"""Checks of a Config: everything that can be checked without loading a
model or reading data, each failure a `ConfigError` naming the flag, the bad
value and what would be valid (`validate`), and the batch against the
replica count (`check_replicas`). Checks that need the loaded encoder live
in `trainer.model`. No TensorFlow at import time.
"""

import codecs
import math
import os
import re

from trainer.foundation import config as config_lib
from trainer.foundation import errors
from trainer.foundation import kinds
from trainer.foundation import layout
from trainer.foundation import shared_rows
from trainer.foundation import tasks

FIELDS = config_lib.FIELDS


def profile_window(spec):
  """--profile_steps=FIRST,LAST -> (first, last), or None for ''."""
  if not spec:
    return None
  parts = spec.split(",")
  try:
    first, last = (int(p) for p in parts)
  except ValueError:
    first = last = 0
  if len(parts) != 2 or not 0 < first <= last:
    _fail("profile_steps", spec,
          "give FIRST,LAST steps with 0 < FIRST <= LAST, e.g. 20,30")
  return first, last


def _fail(flag, value, valid):
  raise errors.ConfigError(f"--{flag}={value!r} is invalid: {valid}")


def _is_remote(path):
  return bool(re.match(r"^[a-z][a-z0-9+.-]*://", path))


def _exists(path):
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  return tf.io.gfile.exists(path)


def _isdir(path):
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  return tf.io.gfile.isdir(path)


def path_kind(flag, path):
  """"dir", "file" or None (nothing there) for `path`, local or remote; a
  ResourceError naming --flag and the path when its storage cannot be
  reached (gs:// without network or credentials), where TensorFlow's own
  error names neither."""
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  try:
    if not tf.io.gfile.exists(path):
      return None
    return "dir" if tf.io.gfile.isdir(path) else "file"
  except tf.errors.OpError as e:
    raise errors.ResourceError(
        f"--{flag}={path}: cannot reach it ({errors.first_line(e, 160)}); "
        "check the path, the network and credentials") from None


def _check_fields(c):
  """Each field's kind, own choices and rule (the metadata above)."""
  kinds.check_kinds(c)
  for name, f in FIELDS.items():
    value = getattr(c, name)
    choices = f.metadata["choices"]
    if choices and value not in choices:
      _fail(name, value, f"choose one of {', '.join(choices)}")
    check = f.metadata["check"]
    if check and not check[0](value):
      _fail(name, value, check[1])


def _check_handle(flag, handle):
  if handle == config_lib.DEMO or handle.startswith(("http://", "https://")):
    return  # a URL: TF Hub resolves it when the model loads
  kind = path_kind(flag, handle)
  if kind == "file":
    _fail(flag, handle, _a_file(handle))
  if _is_remote(handle):
    if kind != "dir":
      _fail(flag, handle, "no such folder; give a TF Hub SavedModel folder")
    return
  if not kind:
    _fail(
        flag, handle, "no such folder; give a local SavedModel folder, a "
        "gs:// path, a https:// TF Hub / Kaggle URL, or 'demo'")
  if not _exists(os.path.join(handle, "saved_model.pb")):
    _fail(
        flag, handle, "the folder holds no saved_model.pb; point it at a TF "
        "Hub SavedModel folder")


def _a_file(handle):
  """What to say of a handle that is a file: a handle is the SavedModel's
  folder (its saved_model.pb beside variables/ and assets/)."""
  if os.path.basename(handle) == "saved_model.pb":
    return ("it is the SavedModel's graph file; give its folder, "
            f"{os.path.dirname(handle) or '.'}")
  return ("it is a file, not a folder; give a TF Hub SavedModel folder (the "
          "one holding saved_model.pb)")


def _check_sources(c):
  """Handles and data files: they exist and go together."""
  if c.tpu and c.strategy != "auto":
    _fail("strategy", c.strategy, "with --tpu set leave --strategy=auto")
  _check_handle("encoder_handle", c.encoder_handle)
  _check_handle("preprocessor_handle", c.preprocessor_handle)
  if (c.encoder_handle == config_lib.DEMO) != (
      c.preprocessor_handle == config_lib.DEMO):
    _fail(
        "preprocessor_handle", c.preprocessor_handle,
        "the demo encoder and demo preprocessor go together; set both "
        "handles or neither")
  if c.train_file and c.tfds_name:
    _fail("tfds_name", c.tfds_name, "give either --tfds_name or --train_file")
  for flag in ("train_file", "eval_file", "test_file"):
    path = getattr(c, flag)
    if path and flag != "train_file" and not c.train_file:
      _fail(flag, path, "needs --train_file")
    kind = path_kind(flag, path) if path else "file"
    if kind is None:
      _fail(flag, path, "no such file")
    if kind == "dir":
      _fail(flag, path, "is a folder; give a CSV/TSV file (plain, .gz or "
            ".zip)")
  if not _is_remote(c.model_dir) and _exists(
      c.model_dir) and not _isdir(c.model_dir):
    _fail("model_dir", c.model_dir, "is a file; give a folder")


def _check_labels(c):
  if c.encoding:
    try:
      codecs.lookup(c.encoding)
    except LookupError:
      _fail("encoding", c.encoding, "not a codec Python knows (e.g. utf-8, "
            "iso-8859-1)")
  if c.task == tasks.TAGGING:
    _check_tags(c)
    return
  names = tasks.class_names(c.label_names, c.num_classes)
  if len(names) != c.num_classes:
    _fail("label_names", c.label_names, f"give {c.num_classes} comma-"
          "separated names, one per class")
  if len(set(names)) != len(names) or not all(names):
    _fail(
        "label_names", c.label_names, "each class needs a name of its own "
        "(predictions and exports key the classes by name)")
  try:
    label_map = tasks.label_map(c.label_map, c.num_classes)
  except ValueError as e:
    _fail("label_map", c.label_map, f"{e}; write it as raw:class pairs, e.g. "
          "0:0,4:1")
  if c.num_classes == 1 and c.label_map:
    _fail(
        "label_map", c.label_map, "a regression (--num_classes=1) reads "
        "its labels as numbers; leave --label_map unset")
  bad = sorted(v for v in label_map.values() if not 0 <= v < c.num_classes)
  if bad:
    _fail("label_map", c.label_map, f"class ids {bad} are outside "
          f"[0, --num_classes={c.num_classes})")
  if tasks.source_kind(c) == "tfds" and any(
      not re.fullmatch(r"[+-]?\d+", k) for k in label_map):
    _fail("label_map", c.label_map, "TFDS labels are class ids; map ids "
          "(e.g. 1:0,0:1), not names")


def _check_tags(c):
  """Tagging: words and tags come from the file (no label map, no pairs);
  --label_names, if given, are the tag set (IOB2 names: the data's tags
  are checked against it as they are read)."""
  if c.label_map:
    _fail(
        "label_map", c.label_map, "tagging reads its tags by name; leave "
        "--label_map unset (--label_names gives the tag set)")
  for flag in ("text_column", "text_key"):
    if len(getattr(c, flag).split(",")) > 1:
      _fail(flag, getattr(c, flag), "tagging takes one sentence of words, "
            "not a pair")
  names = [n.strip() for n in c.label_names.split(",") if n.strip()]
  if names and len(set(names)) != len(names):
    _fail("label_names", c.label_names, "each tag once")
  if c.tag_column < -1:
    _fail("tag_column", c.tag_column, "give a 0-based column, or -1 for "
          "the last")


def _check_task(c):
  """Text fields (one or a pair) and what evals report."""
  for flag in ("text_column", "text_key"):
    if len(getattr(c, flag).split(",")) > 2:
      _fail(flag, getattr(c, flag), "give one field, or two for a sentence "
            "pair")
  try:
    reported = tasks.resolve(c).reported
  except ValueError as e:
    _fail("eval_metrics", c.eval_metrics, str(e))
  if c.early_stopping_metric.split("/")[-1] not in reported:
    _fail(
        "early_stopping_metric", c.early_stopping_metric, "evals report "
        f"{', '.join('eval/' + m for m in reported)} (--eval_metrics)")


def _check_buckets(c):
  """--seq_buckets and --shared_rows parse; a row count list fits the
  batch and is not asked for beside length buckets (each replaces the
  other's way of cutting padding)."""
  request = layout.requested(c)
  rows = request.rows
  if rows in (shared_rows.AUTO, shared_rows.NONE):
    return
  shared_rows.check_ladder(rows, c.batch_size, 1)
  if request.bucketed:
    _fail(
        "shared_rows", c.shared_rows, "shared rows and length buckets "
        f"(--seq_buckets={c.seq_buckets}) are two ways to skip padding; "
        "give one (--seq_buckets=none, or --shared_rows=none)")


def _check_fold(c):
  # Float rounding must not refuse the last fold of an exact partition.
  if (c.validation_fold + 1) * c.validation_fraction > 1 + 1e-9:
    last = math.floor(1 / c.validation_fraction + 1e-9) - 1
    _fail(
        "validation_fold", c.validation_fold, f"--validation_fraction="
        f"{c.validation_fraction} leaves folds 0..{last}")


def _check_schedule(c):
  if c.train_steps == 0 and not (math.isfinite(c.epochs) and c.epochs > 0):
    _fail("epochs", c.epochs, "must be > 0 when --train_steps=0")
  if c.early_stopping_patience and not c.eval_every:
    _fail("early_stopping_patience", c.early_stopping_patience,
          "needs --eval_every > 0 (patience is counted in evals)")
  profile_window(c.profile_steps)


def validate(c):
  """Raises ConfigError for the first invalid field; returns `c` otherwise."""
  _check_fields(c)
  _check_sources(c)
  _check_labels(c)
  _check_task(c)
  _check_buckets(c)
  _check_fold(c)
  _check_schedule(c)
  return c


def check_replicas(c, num_replicas):
  """Batch sizes must split evenly over the replicas (static TPU shapes),
  the training batch also into --grad_accumulation_steps micro-batches."""
  k = c.grad_accumulation_steps
  for flag, n in (("batch_size", num_replicas * k), ("eval_batch_size",
                                                     num_replicas)):
    value = getattr(c, flag)
    micro = f" x {k} micro-batches" if flag == "batch_size" and k > 1 else ""
    if value and value % n:
      _fail(
          flag, value, f"the global batch must be divisible by the "
          f"{num_replicas} replicas{micro}; use a multiple of {n}")
