r"""Check a configuration without training: one line per check.

    python -m trainer.doctor [the same flags as trainer.main]

Checks the TensorFlow stack (one distribution, tensorflow-text and tf-keras
of its minor version, a supported version, libtpu on a TPU build), that the
strategy resolves (and how many replicas it has), the handles load and agree
(vocabulary vs. embedding table, --seq_length vs. position embeddings), the
data is readable (the first --doctor_rows rows of each split by outcome),
model_dir is writable and the train step compiles with XLA. Exits 1 when a
check fails.
"""

import dataclasses
import os
import sys
import uuid

from absl import app
from absl import flags
import tensorflow as tf

from trainer import config as config_lib
from trainer import stack
from trainer import main as trainer_main  # the trainer's flags

FLAGS = flags.FLAGS


@dataclasses.dataclass
class Check:
  name: str
  ok: bool
  detail: str
  fix: str = ""

  def line(self):
    if self.ok:
      return f"[ok]   {self.name}: {self.detail}"
    return f"[FAIL] {self.name}: {self.detail} -> {self.fix}"


def _short(e):
  lines = str(e).strip().splitlines()
  return (lines[0] if lines else type(e).__name__)[:300]


def check_stack(found=None):
  """The TensorFlow distribution, its companions' versions and the range.

  One line; a TPU build also names its libtpu (notes, such as a libtpu off
  its tested version, follow the versions).
  """
  found = stack.installed() if found is None else found
  problems = stack.problems(found)
  detail = (f"{stack.describe(found)} (supported TensorFlow: "
            f"{stack.SUPPORTED[0]}-{stack.SUPPORTED[-1]})")
  notes = stack.notes(found)
  if notes:
    detail += "; note: " + "; ".join(notes)
  if problems:
    return Check("stack", False, f"{stack.describe(found)}: {problems[0]}",
                 "see install/ (README, \"Installing\")")
  return Check("stack", True, detail)


def check_model_dir(c):
  probe = os.path.join(c.model_dir, f".doctor-{uuid.uuid4().hex[:8]}")
  try:
    tf.io.gfile.makedirs(c.model_dir)
    with tf.io.gfile.GFile(probe, "w") as f:
      f.write("ok")
    tf.io.gfile.remove(probe)
  except (tf.errors.OpError, OSError) as e:
    return Check(
        "model_dir", False, f"{c.model_dir} is not writable "
        f"({_short(e)})", "give a folder you can write (local or "
        "gs:// with write access)")
  return Check("model_dir", True, f"{c.model_dir} is writable")


def run_checks(c, rows=1000):
  """Returns the list of Checks; stops early only where later checks need
  what failed (no strategy: no handles; no handles: no compile)."""
  from trainer import distribute  # pylint: disable=g-import-not-at-top
  from trainer import input_pipeline  # pylint: disable=g-import-not-at-top
  from trainer import model as model_lib  # pylint: disable=g-import-not-at-top
  from trainer import preprocessing  # pylint: disable=g-import-not-at-top
  from trainer import train_lib  # pylint: disable=g-import-not-at-top
  checks = [check_stack()]
  try:
    config_lib.validate(c)
    checks.append(Check("flags", True, "all flags valid"))
  except config_lib.ConfigError as e:
    checks.append(Check("flags", False, str(e), "fix the flag"))
    return checks
  try:
    strategy = distribute.build_strategy(c.tpu, c.strategy)
    config_lib.check_replicas(c, strategy.num_replicas_in_sync)
    checks.append(
        Check(
            "strategy", True, f"{type(strategy).__name__} with "
            f"{strategy.num_replicas_in_sync} replica(s)"))
  except (distribute.StrategyError, config_lib.ConfigError) as e:
    checks.append(
        Check("strategy", False, _short(e),
              "see the message; --tpu/--strategy/--batch_size"))
    return checks
  checks.append(check_model_dir(c))
  encoder = preprocessor = None
  try:
    preprocessor, encoder = train_lib.load_handles(c, strategy)
    checks.append(Check("handles", True, "encoder and preprocessor load"))
  except model_lib.HandleError as e:
    checks.append(Check("handles", False, _short(e), "fix the handle"))
  if encoder is not None:
    vocab = preprocessing.vocab_size(preprocessor)
    rows_ = model_lib.word_embedding_rows(encoder)
    checks.append(
        Check(
            "vocabulary", None in (rows_, vocab) or vocab <= rows_,
            f"preprocessor vocabulary {vocab}, encoder embedding table "
            f"{rows_}", "use the preprocessor that matches the encoder"))
    positions = model_lib.max_positions(encoder)
    checks.append(
        Check("seq_length", positions is None or c.seq_length <= positions,
              f"--seq_length={c.seq_length}, encoder positions {positions}",
              f"use --seq_length <= {positions}"))
  try:
    splits = input_pipeline.make_splits(c)
    for name, split in splits.items():
      counts = input_pipeline.count(split, limit=rows)
      checks.append(
          Check(
              f"data.{name}", counts["rows_used"] > 0,
              f"{split.describe()}: first {counts['rows_read']} rows: "
              f"{counts['rows_used']} used, rejected "
              f"{counts['rejected'] or 'none'}",
              "check --file_format, --text_column/--label_column, "
              "--label_map"))
  except (input_pipeline.sources.DataError, OSError, tf.errors.OpError) as e:
    checks.append(
        Check("data", False, _short(e), "fix the data flags or the file"))
  if encoder is not None and all(ch.ok for ch in checks):
    checks.append(check_xla(c, strategy, encoder))
  return checks


def check_xla(c, strategy, encoder):
  """Compiles one replica train step with XLA on a dummy int32 batch."""
  from trainer import model as model_lib  # pylint: disable=g-import-not-at-top
  from trainer import optimization  # pylint: disable=g-import-not-at-top
  from trainer import train_step  # pylint: disable=g-import-not-at-top
  from trainer import distribute  # pylint: disable=g-import-not-at-top
  if distribute.is_tpu(strategy):
    return Check("xla", True, "TPU: the step is compiled at the first loop")
  problem = not distribute.has_gpu() and distribute.xla_cpu_problem()
  if problem:
    return Check(
        "xla", True, "not checked: this TensorFlow build has no XLA for the "
        f"CPU ({problem[:80]}...); training here runs without XLA "
        "(--jit_compile=true would stop), a TPU compiles the step itself")
  try:
    model = model_lib.Classifier(encoder, c.num_classes, c.dropout_rate)
    opt = optimization.AdamW(model.trainable_variables,
                             optimization.WarmupLinearDecay(1e-9, 10, 1))
    step = tf.function(
        train_step.make_train_step(model, opt, 2), jit_compile=True)
    zeros = tf.zeros([2, c.seq_length], tf.int32)
    batch = dict(
        input_word_ids=zeros,
        input_mask=tf.ones_like(zeros),
        input_type_ids=zeros,
        label=tf.zeros([2], tf.int32))
    step.get_concrete_function(batch)  # trace
    step(batch)  # compile and run once
  except (tf.errors.OpError, ValueError, TypeError) as e:
    return Check("xla", False, f"the train step does not compile: "
                 f"{_short(e)}", "the encoder uses ops XLA/TPU cannot run")
  return Check("xla", True, "the train step compiles with XLA")


def define_flags():
  flags.DEFINE_integer("doctor_rows", 1000, "Rows of each split to read.")


def main(argv):
  del argv
  checks = run_checks(trainer_main.config_from_flags(), FLAGS.doctor_rows)
  for check in checks:
    print(check.line())
  failed = [ch.name for ch in checks if not ch.ok]
  print(f"{len(checks) - len(failed)} passed, {len(failed)} failed" +
        (f": {', '.join(failed)}" if failed else ""))
  sys.exit(1 if failed else 0)


if __name__ == "__main__":
  define_flags()
  app.run(main)
