r"""Check a configuration without training: one line per check.

`run_checks(config)` returns them; `python -m trainer.doctor [the same
flags as trainer.main]` prints them.

Checks the TensorFlow stack (one distribution, tensorflow-text and tf-keras
of its minor version, a supported version, libtpu on a TPU build), that the
strategy resolves (and how many replicas it has), the handles load and agree
(vocabulary vs. embedding table, --seq_length vs. position embeddings), the
data is readable (the first --doctor_rows rows of each split by outcome),
model_dir is writable (and a run's checkpoints there have their record),
how training lays its batches out (--shared_rows) and what training would
do about XLA (the decisions training takes, by its own functions; where
it compiles the step, the step is compiled once here). Exits 1 when a
check fails.
"""

import contextlib
import dataclasses
import logging as std_logging
import os
import tempfile
import uuid

import tensorflow as tf

from trainer.data import counts as counts_lib
from trainer.data import input_pipeline
from trainer.data import preprocessing
from trainer.data import splits as splits_lib
from trainer.data import word_pieces
from trainer.encoders import handles
from trainer.foundation import checks as config_checks
from trainer.foundation import errors
from trainer.foundation import shared_rows
from trainer.foundation import tasks
from trainer.model import classifier as model_lib
from trainer.model import optimization
from trainer.runtime import distribute
from trainer.runtime import run_dir
from trainer.runtime import stack
from trainer.training import encoder_setup
from trainer.training import inputs
from trainer.training import launch
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
  """(the Check, the record of the run whose checkpoints model_dir holds, as
  training reads it: `launch.run_record`): writable, and checkpoints there
  have their record, which training refuses to go on without."""
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
        "gs:// with write access)"), None
  try:
    record = launch.run_record(
        run_dir.locations(c.model_dir, c.checkpoint_dir, c.summary_dir,
                          c.export_base_dir))
  except errors.ConfigError as e:
    return Check("model_dir", False, str(e),
                 "training stops with this line"), None
  held = " and holds a run to resume" if record else ""
  return Check("model_dir", True, f"{c.model_dir} is writable{held}"), record


def _check_data(c, rows, record=None):
  """(a Check per split, the splits; None when they cannot be read). A
  tagging run's tag set is resolved as training resolves it (read from the
  training data, or the run's record)."""
  checks, named = [], None
  try:
    c, task = inputs.resolve_tags(c, tasks.resolve(c), record)
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
  return checks, named


def _check_model(c, strategy):
  """Handles, their fit, and (preprocessor, encoder) (None when they do not
  load)."""
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
  return checks, (preprocessor, encoder)


@dataclasses.dataclass(frozen=True)
class FirstRows:
  """The first `rows` rows of Split `split`, as a Split: the sample whose
  lengths the doctor measures (training measures the whole split)."""

  split: splits_lib.Split
  rows: int

  @property
  def source(self):
    return self.split.source

  def chunks(self, stripes=1):
    return self.split.chunks(stripes).unbatch().take(self.rows).batch(512)


class _Said(std_logging.Handler):
  """Keeps the messages logged through absl while it is attached."""

  def __init__(self):
    super().__init__(std_logging.INFO)
    self.lines = []

  def emit(self, record):
    self.lines.append(record.getMessage())


@contextlib.contextmanager
def _training_says():
  """The lines training's own functions log meanwhile (as far as absl's
  verbosity lets them through: INFO under the command), so a check reports
  training's words rather than a copy of its reasons."""
  said = _Said()
  logger = std_logging.getLogger("absl")
  logger.addHandler(said)
  try:
    yield said.lines
  finally:
    logger.removeHandler(said)


def check_shared_rows(c,
                      strategy,
                      preprocessor,
                      encoder,
                      train,
                      rows=1000,
                      record=None):
  """How training lays its batches out (--shared_rows), decided by the
  functions training calls: whether the encoder takes shared rows
  (`inputs.rows_encoder`: an explicit list with an encoder it cannot
  rebuild fails with training's line), and the row counts
  (`inputs.resolve_layout`, the run's `Layout`: a list against the batch,
  the replicas and --grad_accumulation_steps; auto's choice), measured on
  the first `rows` rows of the Split `train`. `record`: the run's, for a
  resume.

  Returns:
    (the Check, the encoder as training would run it: rebuilt for shared
    rows, or as loaded; None when the check fails).
  """
  sample = FirstRows(train, rows)
  if c.task == tasks.TAGGING:
    encode = word_pieces.tagged(preprocessor, c.seq_length)
  else:
    encode = input_pipeline.labelled(
        preprocessing.make_packer(preprocessor, c.seq_length))
  # Training caches its length pass in the run's folder; the doctor's goes
  # to a folder of its own, removed after.
  with tempfile.TemporaryDirectory() as tmp, _training_says() as said:
    out = run_dir.locations(tmp)
    try:
      encoder, takes_rows = inputs.rows_encoder(c, encoder, strategy, record)
      layout = inputs.resolve_layout(c, sample, encode, rows, out, record,
                                     strategy.num_replicas_in_sync, takes_rows)
    except errors.ConfigError as e:
      return Check("shared_rows", False, str(e),
                   "training stops with this line"), None
    detail = "; ".join(said)
    if layout.rows:
      detail = detail or shared_rows.describe(
          inputs.length_histogram(c, sample, encode, out), layout.ladder,
          c.batch_size)
      detail += f" (measured on the first {rows} training rows)"
  if not detail:
    detail = (f"--shared_rows={c.shared_rows}: one example a row" +
              (", the encoder rebuilt" if takes_rows else ""))
  return Check("shared_rows", True, detail), encoder


def run_checks(c, rows=1000):
  """Returns the list of Checks; stops early only where later checks need
  what failed (no strategy: no handles; no handles or data: no layout; a
  failure before: no compile)."""
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
  model_dir, record = check_model_dir(c)
  model_checks, loaded = _check_model(c, strategy)
  data_checks, named = _check_data(c, rows, record)
  checks += [model_dir] + model_checks + data_checks
  if loaded and named and all(ch.ok for ch in checks):
    layout, encoder = check_shared_rows(c, strategy, *loaded, named["train"],
                                        rows, record)
    checks.append(layout)
    if encoder is not None:  # training's: rebuilt for shared rows, or not
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
    tagging = c.task == tasks.TAGGING
    model = model_lib.Classifier(
        prepared,
        max(c.num_classes, 2),
        c.dropout_rate,
        pooling=model_lib.pooling_of(c))
    opt = optimization.AdamW(model.trainable_variables,
                             optimization.WarmupLinearDecay(1e-9, 10, 1))
    k = c.grad_accumulation_steps  # the while_loop training compiles too
    step = tf.function(
        train_step.make_train_step(
            model,
            opt,
            2 * k,
            jit_compile=True,
            accumulation_steps=k,
            per_token=tagging),
        autograph=False)
    zeros = tf.zeros([2 * k, c.seq_length], tf.int32)
    batch = dict(
        input_word_ids=zeros,
        input_mask=tf.ones_like(zeros),
        input_type_ids=zeros,
        label=zeros if tagging else tf.zeros([2 * k], tf.int32))
    if tagging:
      batch["weight"] = tf.ones_like(zeros, tf.float32)
    step(batch)  # trace, compile and run once
  except (tf.errors.OpError, ValueError, TypeError) as e:
    return Check("xla", False, f"the train step does not compile: "
                 f"{errors.first_line(e)}",
                 "the encoder uses ops XLA/TPU cannot run")
  return Check("xla", True,
               "training compiles the step with XLA (compiled here once)")
