r"""Check a configuration without training: one line per check.

`run_checks(config)` returns them; `python -m trainer.doctor [the same
flags as trainer.main]` prints them.

Checks the TensorFlow stack (one distribution, tensorflow-text and tf-keras
of its minor version, a supported version, libtpu on a TPU build), that the
strategy resolves (and how many replicas it has), the handles load and agree
(vocabulary vs. embedding table, --seq_length vs. position embeddings), the
data is readable (the first --doctor_rows rows of each split by outcome),
model_dir is writable, and what training would do about XLA (the decision
training takes; where it compiles the step, the step is compiled once
here). Exits 1 when a check fails.
"""

import dataclasses
import os
import uuid

import tensorflow as tf

from trainer.data import counts as counts_lib
from trainer.data import splits as splits_lib
from trainer.encoders import handles
from trainer.foundation import checks as config_checks
from trainer.foundation import errors
from trainer.foundation import tasks
from trainer.model import classifier as model_lib
from trainer.model import optimization
from trainer.runtime import distribute
from trainer.runtime import stack
from trainer.training import inputs
from trainer.training import encoder_setup
from trainer.training import train_step


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
        f"({errors.first_line(e)})", "give a folder you can write (local or "
        "gs:// with write access)")
  return Check("model_dir", True, f"{c.model_dir} is writable")


def _check_data(c, rows):
  checks = []
  try:
    task = tasks.resolve(c)
    named = splits_lib.make_splits(task, inputs.data_spec(c, task))
    for name, split in named.items():
      counts = counts_lib.count(split, limit=rows)
      checks.append(
          Check(
              f"data.{name}", counts["rows_used"] > 0,
              f"{split.describe()}: first {counts['rows_read']} rows: "
              f"{counts['rows_used']} used, rejected "
              f"{counts['rejected'] or 'none'}",
              "check --file_format, --text_column/--label_column, "
              "--label_map"))
  except (errors.DataError, OSError, tf.errors.OpError) as e:
    checks.append(
        Check("data", False, errors.first_line(e),
              "fix the data flags or the file"))
  return checks


def _check_model(c, strategy):
  """Handles, their fit, and the encoder (None when they do not load)."""
  try:
    preprocessor, encoder = handles.load(c.encoder_handle,
                                         c.preprocessor_handle, strategy,
                                         distribute.io_device(strategy),
                                         c.demo_cache_dir)
  except errors.HandleError as e:
    failed = Check("handles", False, errors.first_line(e), "fix the handle")
    return [failed], None
  checks = [Check("handles", True, "encoder and preprocessor load")]
  for fit in handles.fit_checks(encoder, preprocessor, c.seq_length,
                                c.preprocessor_handle):
    checks.append(Check(fit.name, fit.ok, fit.detail, fit.error))
  return checks, encoder


def run_checks(c, rows=1000):
  """Returns the list of Checks; stops early only where later checks need
  what failed (no strategy: no handles; no handles: no compile)."""
  checks = [check_stack()]
  try:
    config_checks.validate(c)
    checks.append(Check("flags", True, "all flags valid"))
  except errors.ConfigError as e:
    checks.append(Check("flags", False, str(e), "fix the flag"))
    return checks
  try:
    strategy = distribute.build_strategy(c.tpu, c.strategy, c.cluster_timeout)
    config_checks.check_replicas(c, strategy.num_replicas_in_sync)
    checks.append(
        Check(
            "strategy", True, f"{type(strategy).__name__} with "
            f"{strategy.num_replicas_in_sync} replica(s)"))
  except (errors.StrategyError, errors.ConfigError) as e:
    checks.append(
        Check("strategy", False, errors.first_line(e),
              "see the message; --tpu/--strategy/--batch_size"))
    return checks
  checks.append(check_model_dir(c))
  model_checks, encoder = _check_model(c, strategy)
  checks += model_checks + _check_data(c, rows)
  if encoder is not None and all(ch.ok for ch in checks):
    checks.append(check_xla(c, strategy, encoder))
  return checks


def _without_xla(c, own_encoder):
  """Why a run of `c` trains the step without XLA."""
  if c.jit_compile is False:
    return "--jit_compile=false"
  if not own_encoder:
    return ("--jit_compile unset: off for a SavedModel not saved by this "
            "project, whose gradient XLA would recompile at every step; "
            "--jit_compile=true is refused")
  return "--jit_compile unset: off on the CPU; --jit_compile=true turns it on"


def check_xla(c, strategy, encoder):
  """What training would do about XLA (`encoder_setup.prepare`, the same
  decision), and with XLA on, whether one replica train step compiles."""
  if distribute.is_tpu(strategy):
    return Check("xla", True, "TPU: the step is compiled at the first loop")
  try:
    prepared, route = encoder_setup.prepare(
        strategy,
        encoder,
        precision=c.precision,
        jit_compile=c.jit_compile,
        encoder_handle=c.encoder_handle)
  except errors.ConfigError as e:
    return Check("xla", False, str(e), "see the message")
  if not route.jit_compile:
    return Check(
        "xla", True, "training runs the step without XLA (" +
        _without_xla(c, handles.is_own_encoder(encoder)) + ")")
  try:
    model = model_lib.Classifier(
        prepared, c.num_classes, c.dropout_rate, pooling=c.pooling)
    opt = optimization.AdamW(model.trainable_variables,
                             optimization.WarmupLinearDecay(1e-9, 10, 1))
    k = c.grad_accumulation_steps  # the while_loop training compiles too
    step = tf.function(
        train_step.make_train_step(
            model, opt, 2 * k, jit_compile=True, accumulation_steps=k),
        autograph=False)
    zeros = tf.zeros([2 * k, c.seq_length], tf.int32)
    batch = dict(
        input_word_ids=zeros,
        input_mask=tf.ones_like(zeros),
        input_type_ids=zeros,
        label=tf.zeros([2 * k], tf.int32))
    step(batch)  # trace, compile and run once
  except (tf.errors.OpError, ValueError, TypeError) as e:
    return Check("xla", False, f"the train step does not compile: "
                 f"{errors.first_line(e)}",
                 "the encoder uses ops XLA/TPU cannot run")
  return Check("xla", True,
               "training compiles the step with XLA (compiled here once)")
