"""The run configuration: one frozen dataclass, validated before heavy work.

Each field is a flag of the same name: its default, help text, choices and
simple rule live here, with the field (`trainer.cli` makes the absl flags
from them). `complete()` fills what the user left unset (Vertex AI's output
locations, a known task's classes and metrics, the demo's defaults);
`trainer.checks` validates a Config; `tasks.resolve` derives what the run
learns from it. No TensorFlow at import time, so
`--help` stays fast.
"""

import dataclasses
import math
import os

from absl import logging

from trainer.foundation import buckets
from trainer.foundation import errors
from trainer.foundation import kinds
from trainer.foundation import shared_rows
from trainer.foundation import tasks

DEMO = "demo"
STRATEGIES = ("auto", "one_device", "mirrored", "multi_worker_mirrored")
FILE_FORMATS = ("auto", "sentiment140", "csv", "tsv")
HEADERS = ("auto", "yes", "no")
QUOTINGS = ("csv", "none")
PRECISIONS = ("float32", "bfloat16", "float16", "auto")
POOLINGS = ("cls", "mean")
# Every name some run's evals report (which ones this run's do: checks).
EARLY_STOPPING_METRICS = tuple(f"eval/{m}" for m in tasks.reportable())
ConfigError = errors.ConfigError

# Vertex AI sets these for custom jobs; they are the defaults of the flags.
VERTEX_ENV = dict(
    checkpoint_dir="AIP_CHECKPOINT_DIR",
    summary_dir="AIP_TENSORBOARD_LOG_DIR",
    export_base_dir="AIP_MODEL_DIR")

# Defaults that differ for the embedded demo (a randomly initialised encoder
# needs a far larger learning rate than fine-tuning a pretrained one),
# applied only to fields the user did not set.
DEMO_DEFAULTS = dict(
    learning_rate=1e-3,
    epochs=3.0,
    seq_length=32,
    steps_per_loop=50,
    eval_every=125,
    checkpoint_every=125)


def _flag(
    default,
    help,  # noqa: A002
    choices=None,
    check=None,
    resume=False,
    missing=None,
    same=None,
    former=()):
  """A Config field that is also a flag: `help` and `choices` for absl;
  `check` = (predicate, what is valid) for `validate()`; `resume`: a run
  resumed from its checkpoints may change it (`run_dir.check_resume`);
  `missing`: what a run whose config.json predates the field ran with (its
  default if None); `same(old, new, config)`: whether two spellings mean
  the same (a resume takes either; default ==); `former`: the field's
  earlier defaults (a run begun with one resumes with it when the field is
  left at today's: `run_defaults`)."""
  return dataclasses.field(
      default=default,
      metadata=dict(
          help=help,
          choices=choices,
          check=check,
          resume=resume,
          missing=default if missing is None else missing,
          same=same,
          former=tuple(former)))


def _tunable(*args, **kwargs):
  """A `_flag` that a resumed run may change (each change is logged): it
  alters neither what the checkpoint nor what the data position means."""
  return _flag(*args, **kwargs, resume=True)


def _finite(rule):
  return lambda v: math.isfinite(v) and rule(v)


_POSITIVE = (lambda v: v >= 1, "must be >= 1")
_COUNT = (lambda v: v >= 0, "must be >= 0 (0 = only at the end)")
_UNIT = (_finite(lambda v: 0.0 <= v <= 1.0), "must be in [0, 1]")


def _same_when(parse):
  """A `same`: two values are one choice when `parse(value, config)`
  reads them alike (never when either is invalid)."""

  def same(old, new, c):
    try:
      return parse(old, c) == parse(new, c)
    except errors.ConfigError:
      return False

  return same


# AUTO, " 8 , 16 " and 8,16,<seq_length> are one --seq_buckets choice;
# "AUTO" and " 14 , 16 " one --shared_rows choice.
_same_buckets = _same_when(lambda v, c: buckets.parse(str(v), c.seq_length))
_same_rows = _same_when(lambda v, c: shared_rows.parse(v))


def _same_group(old, new, c):
  """--bucket_group_batches orders nothing at fixed shapes (one bucket)."""
  del old, new
  try:
    return buckets.parse(c.seq_buckets, c.seq_length) == (c.seq_length,)
  except errors.ConfigError:
    return False


@dataclasses.dataclass(frozen=True)
class Config:
  """Everything a run needs; each field is the flag of the same name."""

  model_dir: str = _tunable(
      "/tmp/bert_trainer", "Checkpoints, summaries, config.json, "
      "summary.json (local, gs:// or ram://). A run on a folder with a "
      "checkpoint resumes from it.", None, (bool, "give a folder (local or "
                                            "gs://)"))
  tpu: str = _tunable(
      "", "'' for no TPU, 'local' on a Cloud TPU VM, or a TPU name / grpc:// "
      "address.")
  strategy: str = _tunable(
      "auto", "auto: TPU if --tpu, MirroredStrategy over all GPUs, else "
      "the default strategy on the CPU.", STRATEGIES)
  cluster_timeout: int = _tunable(
      600, "--strategy=multi_worker_mirrored: seconds to wait for every task "
      "of TF_CONFIG to start before stopping with an error naming the "
      "missing ones.", None, _POSITIVE)
  encoder_handle: str = _flag(
      DEMO, "TF Hub BERT encoder: URL, gs:// path, local SavedModel folder, "
      "or 'demo' (built offline).")
  preprocessor_handle: str = _flag(DEMO, "Matching preprocessor, or 'demo'.")
  task: str = _flag(
      tasks.CLASSIFICATION, "What the run learns: classification (a class "
      "per text or sentence pair; --num_classes=1: a score) or tagging (a "
      "tag per word, e.g. named entities, from CoNLL or JSON-lines files or "
      "TFDS conll2003; docs/tagging.md).", tasks.KINDS)
  tag_column: int = _flag(
      -1, "Tagging: the CoNLL column (0-based) that holds the tags (-1 = "
      "the last).")
  tfds_name: str = _flag(
      "", "TFDS dataset, e.g. sentiment140. With neither this nor "
      "--train_file, the built-in demo text set is used.")
  data_dir: str = _tunable("", "TFDS data_dir (gs:// works).")
  text_key: str = _flag(
      "", "TFDS text feature, or two comma-separated for sentence pairs ('' "
      "= the task's, e.g. sentence1,sentence2 for glue/mrpc, else text).")
  label_key: str = _flag(
      "", "TFDS label feature ('' = polarity for sentiment140, else label).")
  train_file: str = _flag("", "CSV/TSV with a header row (or --tfds_name).")
  eval_file: str = _flag(
      "", "Validation CSV/TSV; without it one is carved from --train_file.")
  test_file: str = _flag(
      "", "Test CSV/TSV, evaluated at the end (the Sentiment140 zip "
      "supplies its own).")
  file_format: str = _flag(
      "auto", "sentiment140: six columns, no header, quoted, ISO-8859-1 (a "
      "header copy is detected too); csv/tsv: a header row. auto detects, "
      "and logs what it found.", FILE_FORMATS)
  text_column: str = _flag(
      "text", "Text column (name or 0-based index), or two comma-separated "
      "for sentence pairs (e.g. question,sentence).")
  label_column: str = _flag("label", "Label column (name or 0-based index).")
  encoding: str = _flag(
      "", "File encoding ('' = utf-8 if the start decodes, else "
      "iso-8859-1).")
  header: str = _flag(
      "auto", "Whether the file starts with a header row (auto: detected "
      "for Sentiment140's layout, yes for CSV/TSV; no: columns by index, as "
      "GLUE's CoLA).", HEADERS)
  quoting: str = _flag(
      "csv", "csv: double quotes enclose fields; none: they are plain "
      "characters (GLUE's TSVs).", QUOTINGS)
  label_map: str = _flag(
      "", "raw:class pairs, e.g. 0:0,4:1 or not_entailment:0,entailment:1 ("
      "'' = 0:0,4:1 for sentiment140, else identity). Other labels are "
      "excluded and counted.")
  num_classes: int = _flag(
      2, "Number of classes; 1 = regression (float labels, mean squared "
      "error, e.g. STS-B).", None, (lambda v: v >= 1, "must be at least 1 "
                                    "(1 = regression)"))
  label_names: str = _tunable(
      "", "Comma-separated class names, saved with the model ('' = "
      "negative,positive for 2 classes).")
  max_bad_fraction: float = _tunable(
      0.01, "Stop when more than this share of a split's rows is malformed "
      "(labels outside --label_map do not count).", None, _UNIT)
  read_stripes: int = _flag(
      16, "A training file is read at this many places at once so a "
      "label-sorted file gives mixed batches.", None, _POSITIVE)
  validation_fraction: float = _flag(
      0.05, "Share of train carved (seeded) into validation when the data "
      "has no validation split.", None,
      (_finite(lambda v: 0.0 < v < 1.0), "must be in (0, 1)"))
  validation_fold: int = _flag(
      0, "Which share of train is carved into validation: fold k holds the "
      "rows whose seeded hash falls in [k, k+1) x --validation_fraction, so "
      "folds 0..K-1 of one --seed are disjoint (K-fold estimates).", None,
      (lambda v: v >= 0, "must be >= 0"))
  seq_length: int = _flag(
      64, "Tokens per example incl. [CLS]/[SEP].", None,
      (lambda v: 3 <= v <= 8192, "must be in [3, 8192] (room for [CLS], a "
       "token and [SEP])"))
  seq_buckets: str = _flag(
      "none", "Length buckets: each example is packed to the smallest that "
      "holds it, one static shape (one compiled program) per bucket; "
      "comma-separated lengths (e.g. 16,32,64; --seq_length is the last), "
      "auto (a few, chosen from the training data's lengths) or none (every "
      "example at --seq_length: the default, as buckets cost Sentiment140 "
      "accuracy; docs/buckets.md).",
      missing="none",
      same=_same_buckets,
      former=("auto",))
  shared_rows: str = _flag(
      "auto", "Several examples per row of --seq_length tokens: a step "
      "trains the same --batch_size examples as fixed shapes, each as if "
      "in a row of its own, in a few static row counts (each compiled "
      "once). auto (the default: row counts chosen from the training "
      "data's lengths; one example a row for an encoder that cannot take "
      "shared rows or beside --seq_buckets, said in the log), ascending "
      "row counts per batch (e.g. 14,16; multiples of the replicas x "
      "--grad_accumulation_steps, not beside --seq_buckets; a batch that "
      "fits none runs one example a row) or none (fixed shapes). "
      "docs/shared_rows.md.",
      missing="none",
      same=_same_rows,
      former=("none",))
  bucket_group_batches: int = _flag(
      buckets.GROUP_BATCHES,
      "With several --seq_buckets: how many batches "
      "of one bucket train one after another. Groups fill as an epoch's "
      "shuffled rows arrive, so small groups spread every bucket over the "
      "epoch; 1 changes length at nearly every step. It fixes which batches "
      "an epoch makes, so a resume keeps it.",
      None,
      _POSITIVE,
      same=_same_group,
      # Before the flag a run's group was min(--steps_per_loop, 5).
      former=(1, 2, 3, 4))
  batch_size: int = _flag(
      32, "Global batch size (divisible by the replica count).", None,
      (lambda v: v >= 1, "must be a positive global batch size"))
  eval_batch_size: int = _tunable(
      0, "Global eval batch size (0 = --batch_size).", None,
      (lambda v: v >= 0, "must be >= 0 (0 = --batch_size)"))
  train_steps: int = _tunable(
      0, "Total steps (0 = derive from --epochs).", None,
      (lambda v: v >= 0, "must be >= 0 (0 = derive from --epochs)"))
  epochs: float = _tunable(1.0, "Epochs when --train_steps=0.")
  learning_rate: float = _tunable(5e-5, "Peak learning rate.", None,
                                  (_finite(lambda v: v > 0), "must be > 0"))
  warmup_fraction: float = _tunable(
      0.1, "Share of total steps spent in linear warmup.", None, _UNIT)
  weight_decay: float = _tunable(
      0.01, "AdamW decoupled weight decay (not on LayerNorm/bias).", None,
      (_finite(lambda v: v >= 0), "must be >= 0"))
  layer_decay: float = _tunable(
      1.0, "Layer-wise rate decay: top encoder layer x this, each lower one "
      "more (1 = off).", None, (_finite(lambda v: 0 < v <= 1), "must be in "
                                "(0, 1]"))
  grad_accumulation_steps: int = _tunable(
      1, "K micro-batches of --batch_size / K per update (--batch_size "
      "stays the examples per update).", None, _POSITIVE)
  clip_norm: float = _tunable(
      1.0, "Global-norm gradient clipping (0 = off).", None,
      (_finite(lambda v: v >= 0), "must be >= 0 (0 disables clipping)"))
  dropout_rate: float = _tunable(
      0.1, "Classifier head dropout.", None,
      (_finite(lambda v: 0.0 <= v < 1.0), "must be in [0, 1)"))
  ema_decay: float = _flag(
      0.0, "Exponential moving average of the weights with this decay (e.g. "
      "0.999; 0 = off): evals, the best checkpoint's metric and exports use "
      "the average, training the raw weights; both are checkpointed.", None,
      (_finite(lambda v: 0.0 <= v < 1.0), "must be in [0, 1) (0 = off)"))
  pooling: str = _flag(
      "cls", "The head's input: cls = the encoder's pooled_output; mean = "
      "the mean of sequence_output over real tokens (sentence-transformers).",
      POOLINGS)
  steps_per_loop: int = _tunable(
      100, "Steps per tf.function call (host work "
      "in between).", None, _POSITIVE)
  eval_every: int = _tunable(0, "Evaluate every N steps (0 = only at the end).",
                             None, _COUNT)
  checkpoint_every: int = _tunable(
      1000, "Checkpoint every N steps (0 = only at the end).", None, _COUNT)
  keep_checkpoints: int = _tunable(3, "Rolling checkpoints kept.", None,
                                   _POSITIVE)
  shuffle_buffer: int = _flag(
      100_000, "Rows per shuffle window: each epoch permutes each window of "
      "this many consecutive rows, seeded by --seed (up to three windows in "
      "memory).", None, _POSITIVE)
  seed: int = _flag(42, "Seed for data order, splits, head.")
  jit_compile: bool | None = _tunable(
      None, "XLA-compile the replica step on CPU/GPU (unset: on for GPU, "
      "off for CPU; TPUs always use XLA). Only for encoders saved by this "
      "project (demo, convert_hf), which are rebuilt for XLA: XLA recompiles "
      "a loaded SavedModel's gradient at every step.")
  precision: str = _tunable(
      "float32", "bfloat16/float16: mixed precision, matmuls in it with "
      "float32 variables, loss and logits; float16 with dynamic loss scaling"
      " (GPUs without bfloat16). auto: bfloat16 on TPUs, GPUs >= 8.0, AMX/"
      "AVX512_BF16 CPUs; float16 on older GPUs; else float32. See "
      "docs/precision.md.", PRECISIONS)
  demo_cache_dir: str = _tunable(
      "", "Where the demo model and data are built ('' = "
      "~/.cache/bert_tpu_trainer or $BERT_TRAINER_CACHE).")
  export: bool = _tunable(
      True, "At the end, export a SavedModel serving raw strings to "
      "model_dir/export/<step>/ (see trainer.export).")
  checkpoint_dir: str = _flag(
      "", "Checkpoints ('' = $AIP_CHECKPOINT_DIR on Vertex AI, else "
      "model_dir/checkpoints).")
  summary_dir: str = _tunable(
      "", "TensorBoard summaries ('' = $AIP_TENSORBOARD_LOG_DIR, else "
      "model_dir/summaries).")
  export_base_dir: str = _tunable(
      "", "Exports go to <export_base_dir>/<step> ('' = $AIP_MODEL_DIR, else "
      "model_dir/export).")
  max_nan_recoveries: int = _tunable(
      2, "On a non-finite loss or gradient norm, roll back to the newest "
      "checkpoint and skip the bad batches at most this many times.", None,
      _COUNT)
  deterministic: bool = _tunable(
      False, "TF op determinism and fixed seeds: the same flags give "
      "bit-identical weights on CPU, also across kills and resumes. Slower "
      "on GPU.")
  early_stopping_patience: int = _tunable(
      0, "Stop after this many evals without a better "
      "--early_stopping_metric (0 = never).", None, _COUNT)
  eval_metrics: str = _tunable(
      "", "What evals report beside loss: accuracy, f1 (of class 1), mcc, "
      "pearson, spearman ('' = the task's: f1,accuracy for glue/mrpc and "
      "qqp, mcc for glue/cola, pearson,spearman for regression, else "
      "accuracy).")
  early_stopping_metric: str = _flag(
      "eval/loss", "Metric that picks the best checkpoint (kept in "
      "checkpoints/best and restored at the end): eval/loss or one that "
      "evals report (--eval_metrics).", EARLY_STOPPING_METRICS)
  profile_steps: str = _tunable(
      "", "FIRST,LAST: record a TensorBoard profile (trace viewer, op "
      "statistics) of training steps FIRST..LAST into the train summaries "
      "(plugins/profile); benchmarks/profile_ops.py tabulates it.")

  def to_json(self):
    import json  # pylint: disable=g-import-not-at-top
    return json.dumps(dataclasses.asdict(self), indent=2, sort_keys=True)


def default(name):
  """The default of Config field `name`: the one place a data-reading
  default is written (DataSpec, FileSource, files.detect_layout and predict
  take theirs from here)."""
  return Config.__dataclass_fields__[name].default  # pylint: disable=no-member


def run_defaults(c, saved):
  """(Config `c` for resuming the run whose config.json holds `saved`,
  [field names taken from the run]): a field that `c` leaves at today's
  default while the run ran with one of its former defaults keeps the
  run's value, so a new default never stops a run begun under the old one
  (it could not change on a resume anyway)."""
  kept = {}
  for f in dataclasses.fields(c):
    old = saved.get(f.name, f.metadata["missing"])
    if (getattr(c, f.name) == f.default and old != f.default and
        old in f.metadata["former"]):
      kept[f.name] = old
  return dataclasses.replace(c, **kept), list(kept)


def is_demo(c):
  """The embedded demo: the demo encoder and the demo text set."""
  return c.encoder_handle == DEMO and tasks.source_kind(c) == "demo"


FIELDS = {f.name: f for f in dataclasses.fields(Config)}


def changed_fields(c):
  """Names of the fields whose value differs from the default."""
  return {name for name, f in FIELDS.items() if getattr(c, name) != f.default}


def complete(c, given=None, environ=None):
  """Fills the fields the user did not set, as `python -m trainer.main` does.

  Args:
    c: a Config.
    given: names of the fields the user set (the flags given); None means
      those that differ from their default (the Python API).
    environ: the environment (default os.environ), for Vertex AI's AIP_*
      output locations.

  Returns:
    The completed Config: Vertex AI's locations for unset location flags,
    and the demo's defaults for unset fields of a demo run.
  """
  kinds.check_kinds(c)
  given = changed_fields(c) if given is None else set(given)
  environ = os.environ if environ is None else environ
  values = {}
  for name, env in VERTEX_ENV.items():
    if name not in given and environ.get(env):
      values[name] = environ[env]
      logging.info("--%s from Vertex AI's %s: %s", name, env, values[name])
  task = tasks.tfds_task(
      c.tfds_name) if tasks.source_kind(c) == "tfds" else None
  if task:
    known = dict(task=task.kind, eval_metrics=task.metrics)
    values.update({
        k: known.get(k, getattr(task, k, None))
        for k in tasks.TASK_FIELDS
        if k not in given
    })
  if is_demo(c):
    applied = {k: v for k, v in DEMO_DEFAULTS.items() if k not in given}
    values.update(applied)
    logging.info(
        "Embedded demo: built-in encoder and text set, offline; demo "
        "defaults %s", applied)
  return dataclasses.replace(c, **values)
