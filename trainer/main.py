r"""Fine-tunes a TF Hub BERT encoder for text classification.

  python -m trainer.main                       # offline demo (built-in model)
  python -m trainer.main --flagfile=flags/sentiment140_expertbert_tpu.flags

The only module that defines flags: flags -> Config -> train_lib.run.
"""

import dataclasses
import os
import sys

from absl import app
from absl import flags
from absl import logging

from trainer import config as config_lib

_D = config_lib.Config()

flags.DEFINE_string(
    "model_dir", _D.model_dir,
    "Checkpoints, summaries, config.json, summary.json "
    "(local, gs:// or ram://). A run on a folder with a "
    "checkpoint resumes from it.")
flags.DEFINE_string(
    "tpu", _D.tpu, "'' for no TPU, 'local' on a Cloud TPU VM, "
    "or a TPU name / grpc:// address.")
flags.DEFINE_enum(
    "strategy", _D.strategy, config_lib.STRATEGIES,
    "auto: TPU if --tpu, MirroredStrategy over all GPUs, else "
    "the default strategy on the CPU.")
flags.DEFINE_string(
    "encoder_handle", _D.encoder_handle,
    "TF Hub BERT encoder: URL, gs:// path, local SavedModel "
    "folder, or 'demo' (built offline).")
flags.DEFINE_string(
    "preprocessor_handle", _D.preprocessor_handle,
    "Matching preprocessor (tokenize + bert_pack_inputs), or "
    "'demo'.")
flags.DEFINE_string(
    "tfds_name", _D.tfds_name,
    "TFDS dataset, e.g. sentiment140. With neither this nor "
    "--train_file, the built-in demo text set is used.")
flags.DEFINE_string("data_dir", _D.data_dir, "TFDS data_dir (gs:// works).")
flags.DEFINE_string("text_key", _D.text_key, "TFDS text feature ('' = text).")
flags.DEFINE_string(
    "label_key", _D.label_key,
    "TFDS label feature ('' = polarity for sentiment140, "
    "else label).")
flags.DEFINE_string("train_file", _D.train_file,
                    "CSV/TSV with a header row (instead of --tfds_name).")
flags.DEFINE_string(
    "eval_file", _D.eval_file,
    "Validation CSV/TSV; without it one is carved from "
    "--train_file.")
flags.DEFINE_string(
    "text_column", _D.text_column, "Text column (name or "
    "0-based index) of --train_file/--eval_file.")
flags.DEFINE_string("label_column", _D.label_column, "Label column (name or "
                    "0-based index).")
flags.DEFINE_string(
    "test_file", _D.test_file,
    "Test CSV/TSV, evaluated at the end (the Sentiment140 zip "
    "supplies its own).")
flags.DEFINE_enum(
    "file_format", _D.file_format, ["auto", "sentiment140", "csv", "tsv"],
    "sentiment140: six columns, no header, quoted, ISO-8859-1 "
    "(a header copy is detected too); csv/tsv: a header row. "
    "auto detects, and logs what it found.")
flags.DEFINE_string(
    "encoding", _D.encoding,
    "File encoding ('' = utf-8 if the start decodes, else "
    "iso-8859-1).")
flags.DEFINE_string(
    "label_names", _D.label_names,
    "Comma-separated class names, saved with the model ('' = "
    "negative,positive for 2 classes).")
flags.DEFINE_float(
    "max_bad_fraction", _D.max_bad_fraction,
    "Stop when more than this share of a split's rows is "
    "malformed (labels outside --label_map do not count).")
flags.DEFINE_integer(
    "read_stripes", _D.read_stripes,
    "A training file is read at this many places at once "
    "so a label-sorted file gives mixed batches.")
flags.DEFINE_string(
    "label_map", _D.label_map,
    "raw:class pairs, e.g. 0:0,4:1 ('' = 0:0,4:1 for "
    "sentiment140, else identity). Other labels are excluded "
    "and counted.")
flags.DEFINE_integer("num_classes", _D.num_classes, "Number of classes.")
flags.DEFINE_float(
    "validation_fraction", _D.validation_fraction,
    "Share of train carved (seeded) into validation when the "
    "data has no validation split.")
flags.DEFINE_integer("seq_length", _D.seq_length,
                     "Tokens per example incl. [CLS]/[SEP].")
flags.DEFINE_integer("batch_size", _D.batch_size,
                     "Global batch size (divisible by the replica count).")
flags.DEFINE_integer("eval_batch_size", _D.eval_batch_size,
                     "Global eval batch size (0 = --batch_size).")
flags.DEFINE_integer("train_steps", _D.train_steps,
                     "Total steps (0 = derive from --epochs).")
flags.DEFINE_float("epochs", _D.epochs, "Epochs when --train_steps=0.")
flags.DEFINE_float("learning_rate", _D.learning_rate, "Peak learning rate.")
flags.DEFINE_float("warmup_fraction", _D.warmup_fraction,
                   "Share of total steps spent in linear warmup.")
flags.DEFINE_float("weight_decay", _D.weight_decay,
                   "AdamW decoupled weight decay (not on LayerNorm/bias).")
flags.DEFINE_float("clip_norm", _D.clip_norm,
                   "Global-norm gradient clipping (0 = off).")
flags.DEFINE_float("dropout_rate", _D.dropout_rate, "Classifier head dropout.")
flags.DEFINE_integer("steps_per_loop", _D.steps_per_loop,
                     "Steps per tf.function call (host work in between).")
flags.DEFINE_integer("eval_every", _D.eval_every,
                     "Evaluate every N steps (0 = only at the end).")
flags.DEFINE_integer("checkpoint_every", _D.checkpoint_every,
                     "Checkpoint every N steps (0 = only at the end).")
flags.DEFINE_integer("keep_checkpoints", _D.keep_checkpoints,
                     "Rolling checkpoints kept.")
flags.DEFINE_integer("shuffle_buffer", _D.shuffle_buffer,
                     "Examples in the seeded shuffle buffer.")
flags.DEFINE_integer("seed", _D.seed, "Seed for data order, splits, head.")
flags.DEFINE_bool(
    "jit_compile", _D.jit_compile,
    "XLA-compile the replica step on CPU/GPU (unset: on for GPU, off for "
    "CPU; TPUs always use XLA). Only for encoders saved by this project "
    "(demo, convert_hf), which are rebuilt for XLA: XLA recompiles a loaded "
    "SavedModel's gradient at every step.")
flags.DEFINE_enum(
    "precision", _D.precision, ["float32", "bfloat16"],
    "bfloat16: mixed precision, bfloat16 matmuls with float32 variables, "
    "loss and logits. Encoders saved by this project (demo, convert_hf) are "
    "rebuilt with bfloat16 matmuls on any device; other SavedModels get "
    "oneDNN's rewrite on AVX512 CPUs (no XLA) or the TPU's default passes. "
    "Faster only where the hardware has bfloat16 units. See README.")
flags.DEFINE_string(
    "demo_cache_dir", _D.demo_cache_dir,
    "Where the demo model and data are built ('' = "
    "~/.cache/bert_tpu_trainer or $BERT_TRAINER_CACHE).")

flags.DEFINE_bool(
    "export", _D.export,
    "At the end, export a SavedModel serving raw strings to "
    "model_dir/export/<step>/ (see trainer.export).")

flags.DEFINE_string(
    "checkpoint_dir", _D.checkpoint_dir,
    "Checkpoints ('' = $AIP_CHECKPOINT_DIR on Vertex AI, "
    "else model_dir/checkpoints).")
flags.DEFINE_string(
    "summary_dir", _D.summary_dir,
    "TensorBoard summaries ('' = $AIP_TENSORBOARD_LOG_DIR, "
    "else model_dir/summaries).")
flags.DEFINE_string(
    "export_base_dir", _D.export_base_dir,
    "Exports go to <export_base_dir>/<step> ('' = $AIP_MODEL_DIR, "
    "else model_dir/export).")

flags.DEFINE_integer(
    "max_nan_recoveries", _D.max_nan_recoveries,
    "On a non-finite loss or gradient norm, roll back to the newest "
    "checkpoint and skip the bad batches at most this many times.")

flags.DEFINE_integer(
    "early_stopping_patience", _D.early_stopping_patience,
    "Stop after this many evals without a better --early_stopping_metric "
    "(0 = never).")
flags.DEFINE_enum(
    "early_stopping_metric", _D.early_stopping_metric,
    ["eval/loss", "eval/accuracy"],
    "Metric that picks the best checkpoint (kept in "
    "checkpoints/best and restored at the end).")

flags.DEFINE_bool(
    "deterministic", _D.deterministic,
    "TF op determinism and fixed seeds: the same flags give bit-identical "
    "weights on CPU, also across kills and resumes. Slower on GPU.")

flags.DEFINE_string(
    "profile_steps", _D.profile_steps,
    "FIRST,LAST: record a TensorBoard profile (trace viewer, op statistics) "
    "of training steps FIRST..LAST into the train summaries "
    "(plugins/profile); benchmarks/profile_ops.py tabulates it.")

FLAGS = flags.FLAGS
EXIT_BAD_INPUT = 2
# SIGTERM/SIGINT: checkpoint saved, rerun to resume (EX_TEMPFAIL in
# sysexits.h: "temporary failure, try again").
EXIT_PREEMPTED = 75


def config_from_flags():
  """Flags -> Config; the demo's own defaults fill flags not given."""
  values = {
      f.name: FLAGS[f.name].value for f in dataclasses.fields(config_lib.Config)
  }
  for name, env in config_lib.VERTEX_ENV.items():
    if not FLAGS[name].present and os.environ.get(env):
      values[name] = os.environ[env]
      logging.info("--%s from Vertex AI's %s: %s", name, env, values[name])
  demo_run = (
      values["encoder_handle"] == "demo" and not values["tfds_name"] and
      not values["train_file"])
  if demo_run:
    from trainer import demo  # pylint: disable=g-import-not-at-top
    applied = {
        k: v for k, v in demo.DEMO_DEFAULTS.items() if not FLAGS[k].present
    }
    values.update(applied)
    logging.info(
        "Embedded demo: built-in encoder and text set, offline; "
        "demo defaults %s", applied)
  return config_lib.Config(**values)


def main(argv):
  if len(argv) > 1:
    raise app.UsageError(f"unexpected arguments: {argv[1:]}")
  from trainer import stack  # pylint: disable=g-import-not-at-top
  if not os.environ.get("BERT_TRAINER_SKIP_STACK_CHECK"):
    for problem in stack.problems():  # The first one is enough to act on.
      print(
          f"error: {problem} (BERT_TRAINER_SKIP_STACK_CHECK=1 skips this "
          "check)",
          file=sys.stderr)
      sys.exit(EXIT_BAD_INPUT)
  # Heavy imports after flag parsing so --help stays fast.
  from trainer import errors  # pylint: disable=g-import-not-at-top
  from trainer import train_lib  # pylint: disable=g-import-not-at-top
  try:
    c = config_lib.validate(config_from_flags())
    train_lib.run(c)
  except train_lib.Preempted as e:
    print(f"preempted: {e}", file=sys.stderr)
    sys.exit(EXIT_PREEMPTED)
  except errors.USER_ERRORS as e:
    print(f"error: {e}", file=sys.stderr)
    sys.exit(EXIT_BAD_INPUT)


if __name__ == "__main__":
  app.run(main)
