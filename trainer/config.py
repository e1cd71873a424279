"""The run configuration: one frozen dataclass, validated before heavy work.

Field names equal flag names. `validate()` checks everything that can be
checked without loading a model or reading data and raises `ConfigError`
naming the flag, the bad value and what would be valid. Checks that need the
loaded encoder (sequence length vs. positions) live in `train_lib`.
"""

import codecs
import dataclasses
import json
import os
import re

import tensorflow as tf

from trainer import sources

STRATEGIES = ("auto", "one_device", "mirrored", "multi_worker_mirrored")


class ConfigError(ValueError):
  """A flag value is invalid; the message names the flag and what is valid."""


@dataclasses.dataclass(frozen=True)
class Config:
  """Everything a run needs; see trainer/main.py for each field's meaning."""

  model_dir: str = "/tmp/bert_trainer"
  tpu: str = ""
  strategy: str = "auto"
  encoder_handle: str = "demo"
  preprocessor_handle: str = "demo"
  tfds_name: str = ""
  data_dir: str = ""
  text_key: str = ""
  label_key: str = ""
  train_file: str = ""
  eval_file: str = ""
  test_file: str = ""
  file_format: str = "auto"
  text_column: str = "text"
  label_column: str = "label"
  encoding: str = ""
  label_map: str = ""
  num_classes: int = 2
  label_names: str = ""
  max_bad_fraction: float = 0.01
  read_stripes: int = 16
  validation_fraction: float = 0.05
  seq_length: int = 64
  batch_size: int = 32
  eval_batch_size: int = 0
  train_steps: int = 0
  epochs: float = 1.0
  learning_rate: float = 5e-5
  warmup_fraction: float = 0.1
  weight_decay: float = 0.01
  clip_norm: float = 1.0
  dropout_rate: float = 0.1
  steps_per_loop: int = 100
  eval_every: int = 0
  checkpoint_every: int = 1000
  keep_checkpoints: int = 3
  shuffle_buffer: int = 100_000
  seed: int = 42
  jit_compile: bool | None = None
  precision: str = "float32"
  demo_cache_dir: str = ""
  export: bool = True
  checkpoint_dir: str = ""
  summary_dir: str = ""
  export_base_dir: str = ""
  max_nan_recoveries: int = 2
  deterministic: bool = False
  early_stopping_patience: int = 0
  early_stopping_metric: str = "eval/loss"
  profile_steps: str = ""

  def to_json(self):
    return json.dumps(dataclasses.asdict(self), indent=2, sort_keys=True)

  @property
  def source_kind(self):
    if self.train_file:
      return "file"
    if self.tfds_name:
      return "tfds"
    return "demo"

  def profile_window(self):
    """(first, last) step of --profile_steps=FIRST,LAST, or None."""
    if not self.profile_steps:
      return None
    parts = self.profile_steps.split(",")
    try:
      first, last = (int(p) for p in parts)
    except ValueError:
      first = last = 0
    if len(parts) != 2 or not 0 < first <= last:
      _fail("profile_steps", self.profile_steps,
            "give FIRST,LAST steps with 0 < FIRST <= LAST, e.g. 20,30")
    return first, last

  def resolved_label_map(self):
    """The raw-label -> class-id map for this run's data source.

    Sentiment140 (TFDS, or a file in its layout, which `input_pipeline`
    resolves) defaults to 0:0,4:1; anything else to the identity.
    """
    if self.label_map:
      return sources.parse_label_map(self.label_map)
    if self.source_kind == "tfds" and self.tfds_name.startswith("sentiment140"):
      return {0: 0, 4: 1}
    return {i: i for i in range(self.num_classes)}

  def resolved_label_names(self):
    if self.label_names:
      return [n.strip() for n in self.label_names.split(",")]
    if self.num_classes == 2:
      return ["negative", "positive"]
    return [f"class_{i}" for i in range(self.num_classes)]


def locations(c):
  """Where checkpoints, summaries and exports go ('' flags: under model_dir)."""
  return dict(
      checkpoints=c.checkpoint_dir or os.path.join(c.model_dir, "checkpoints"),
      summaries=c.summary_dir or os.path.join(c.model_dir, "summaries"),
      export=c.export_base_dir or os.path.join(c.model_dir, "export"))


# Vertex AI sets these for custom jobs; they are the defaults of the flags.
VERTEX_ENV = dict(
    checkpoint_dir="AIP_CHECKPOINT_DIR",
    summary_dir="AIP_TENSORBOARD_LOG_DIR",
    export_base_dir="AIP_MODEL_DIR")


def _fail(flag, value, valid):
  raise ConfigError(f"--{flag}={value!r} is invalid: {valid}")


def _is_remote(path):
  return bool(re.match(r"^[a-z][a-z0-9+.-]*://", path))


def _check_handle(flag, handle):
  if handle == "demo" or _is_remote(handle):
    return
  if not tf.io.gfile.exists(handle):
    _fail(
        flag, handle, "no such folder; give a local SavedModel folder, a "
        "gs:// path, a https:// TF Hub / Kaggle URL, or 'demo'")
  if not tf.io.gfile.exists(os.path.join(handle, "saved_model.pb")):
    _fail(
        flag, handle, "the folder holds no saved_model.pb; point it at a "
        "TF Hub SavedModel folder")


PRECISIONS = ("float32", "bfloat16")


def validate(c):
  """Raises ConfigError for the first invalid field; returns `c` otherwise."""
  if not c.model_dir:
    _fail("model_dir", c.model_dir, "give a folder (local or gs://)")
  if c.strategy not in STRATEGIES:
    _fail("strategy", c.strategy, f"choose one of {', '.join(STRATEGIES)}")
  if c.tpu and c.strategy not in ("auto",):
    _fail("strategy", c.strategy, "with --tpu set leave --strategy=auto")
  _check_handle("encoder_handle", c.encoder_handle)
  _check_handle("preprocessor_handle", c.preprocessor_handle)
  if (c.encoder_handle == "demo") != (c.preprocessor_handle == "demo"):
    _fail(
        "preprocessor_handle", c.preprocessor_handle,
        "the demo encoder and demo preprocessor go together; set both "
        "handles or neither")
  if c.train_file and c.tfds_name:
    _fail("tfds_name", c.tfds_name, "give either --tfds_name or --train_file")
  if c.train_file and not _is_remote(c.train_file) and not tf.io.gfile.exists(
      c.train_file):
    _fail("train_file", c.train_file, "no such file")
  for flag in ("eval_file", "test_file"):
    path = getattr(c, flag)
    if path and not c.train_file:
      _fail(flag, path, "needs --train_file")
    if path and not _is_remote(path) and not tf.io.gfile.exists(path):
      _fail(flag, path, "no such file")
  if c.precision not in PRECISIONS:
    _fail("precision", c.precision, f"choose one of {', '.join(PRECISIONS)}")
  if c.file_format not in ("auto", "sentiment140", "csv", "tsv"):
    _fail("file_format", c.file_format,
          "choose one of auto, sentiment140, csv, tsv")
  if c.encoding:
    try:
      codecs.lookup(c.encoding)
    except LookupError:
      _fail("encoding", c.encoding, "not a codec Python knows (e.g. utf-8, "
            "iso-8859-1)")
  if not 0.0 <= c.max_bad_fraction <= 1.0:
    _fail("max_bad_fraction", c.max_bad_fraction, "must be in [0, 1]")
  if len(c.resolved_label_names()) != c.num_classes:
    _fail("label_names", c.label_names, f"give {c.num_classes} comma-"
          "separated names, one per class")
  if c.num_classes < 2:
    _fail("num_classes", c.num_classes, "must be at least 2")
  try:
    label_map = c.resolved_label_map()
  except ValueError as e:
    _fail("label_map", c.label_map, f"{e}; write it as raw:class pairs, e.g. "
          "0:0,4:1")
  bad = sorted(v for v in label_map.values() if not 0 <= v < c.num_classes)
  if bad:
    _fail("label_map", c.label_map, f"class ids {bad} are outside "
          f"[0, --num_classes={c.num_classes})")
  if not 0.0 < c.validation_fraction < 1.0:
    _fail("validation_fraction", c.validation_fraction, "must be in (0, 1)")
  if not 3 <= c.seq_length <= 8192:
    _fail("seq_length", c.seq_length, "must be in [3, 8192] (room for [CLS], "
          "a token and [SEP])")
  if c.batch_size < 1:
    _fail("batch_size", c.batch_size, "must be a positive global batch size")
  if c.eval_batch_size < 0:
    _fail("eval_batch_size", c.eval_batch_size, "must be >= 0 (0 = "
          "--batch_size)")
  if c.train_steps < 0:
    _fail("train_steps", c.train_steps, "must be >= 0 (0 = derive from "
          "--epochs)")
  if c.train_steps == 0 and not c.epochs > 0:
    _fail("epochs", c.epochs, "must be > 0 when --train_steps=0")
  if not c.learning_rate > 0:
    _fail("learning_rate", c.learning_rate, "must be > 0")
  if not 0.0 <= c.warmup_fraction <= 1.0:
    _fail("warmup_fraction", c.warmup_fraction, "must be in [0, 1]")
  if c.weight_decay < 0:
    _fail("weight_decay", c.weight_decay, "must be >= 0")
  if c.clip_norm < 0:
    _fail("clip_norm", c.clip_norm, "must be >= 0 (0 disables clipping)")
  if not 0.0 <= c.dropout_rate < 1.0:
    _fail("dropout_rate", c.dropout_rate, "must be in [0, 1)")
  for flag in ("steps_per_loop", "keep_checkpoints", "shuffle_buffer",
               "read_stripes"):
    if getattr(c, flag) < 1:
      _fail(flag, getattr(c, flag), "must be >= 1")
  if c.early_stopping_metric not in ("eval/loss", "eval/accuracy"):
    _fail("early_stopping_metric", c.early_stopping_metric,
          "choose eval/loss or eval/accuracy")
  if c.early_stopping_patience and not c.eval_every:
    _fail("early_stopping_patience", c.early_stopping_patience,
          "needs --eval_every > 0 (patience is counted in evals)")
  c.profile_window()
  for flag in ("eval_every", "checkpoint_every", "max_nan_recoveries",
               "early_stopping_patience"):
    if getattr(c, flag) < 0:
      _fail(flag, getattr(c, flag), "must be >= 0 (0 = only at the end)")
  return c


def check_replicas(c, num_replicas):
  """Batch sizes must split evenly over the replicas (static TPU shapes)."""
  for flag in ("batch_size", "eval_batch_size"):
    value = getattr(c, flag)
    if value and value % num_replicas:
      _fail(
          flag, value, f"the global batch must be divisible by the "
          f"{num_replicas} replicas; use a multiple of {num_replicas}")
