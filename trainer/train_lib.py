"""The outer loop: build everything, then train in loops of `steps_per_loop`.

Restore order (one training state, one checkpoint): the newest checkpoint in
`model_dir/checkpoints`, else the pretrained encoder from its handle with a
fresh head. Host work (logging, summaries, checkpoints, eval) happens only
between loops; inside a loop a single tf.function runs `num_steps` replica
steps with `tf.range` around `strategy.run`.
"""

import ctypes
import dataclasses
import json
import math
import os
import signal
import sys
import threading
import time

from absl import logging
import tensorflow as tf

from trainer import bert
from trainer import checkpoints
from trainer import config as config_lib
from trainer import distribute
from trainer import faults
from trainer import input_pipeline
from trainer import model as model_lib
from trainer import optimization
from trainer import preprocessing
from trainer import train_step

_HEAD_ROWS = 2000


class TrainingError(RuntimeError):
  """Training cannot go on (empty data, non-finite loss, ...)."""


class Preempted(TrainingError):
  """SIGTERM/SIGINT arrived; a checkpoint at the current step was saved."""


class StopSignals:
  """Turns SIGTERM and SIGINT into a request checked between loops.

  TPU VMs, GCE and Vertex AI send SIGTERM before preempting; the run then
  finishes its current loop, saves, and exits (see trainer.main).
  """

  def __init__(self):
    self.received = None
    self._previous = {}

  def _handle(self, signum, frame):
    del frame
    self.received = signal.Signals(signum).name

  def __enter__(self):
    if threading.current_thread() is threading.main_thread():
      for sig in (signal.SIGTERM, signal.SIGINT):
        self._previous[sig] = signal.signal(sig, self._handle)
    return self

  def __exit__(self, *exc):
    for sig, handler in self._previous.items():
      signal.signal(sig, handler)


@dataclasses.dataclass(frozen=True)
class Plan:
  """Durations in steps, resolved once from the data and the config."""

  steps_per_epoch: int
  total_steps: int
  warmup_steps: int


def make_plan(c, train_examples):
  steps_per_epoch = train_examples // c.batch_size
  if steps_per_epoch < 1:
    raise TrainingError(
        f"the training split has {train_examples} usable examples, fewer "
        f"than one global batch (--batch_size={c.batch_size}); lower "
        "--batch_size or add data")
  total = c.train_steps or max(1, int(math.ceil(c.epochs * steps_per_epoch)))
  warmup = int(round(c.warmup_fraction * total))
  return Plan(steps_per_epoch, total, warmup)


def _write_json(path, obj):
  # Remove first: TF's ram:// filesystem appends on "w" instead of truncating.
  if tf.io.gfile.exists(path):
    tf.io.gfile.remove(path)
  with tf.io.gfile.GFile(path, "w") as f:
    f.write(json.dumps(obj, indent=2, sort_keys=True) + "\n")


def _read_json(path):
  if not tf.io.gfile.exists(path):
    return None
  with tf.io.gfile.GFile(path) as f:
    text = f.read()
  try:
    return json.loads(text)
  except ValueError:
    # A kill mid-write: these files are caches or rewritten state.
    logging.warning("Ignoring %s: not valid JSON (an interrupted write?)", path)
    return None


def resolve_jit(c, strategy, own_encoder):
  """--jit_compile for the replica step on CPU/GPU (TPUs always compile).

  Unset means on for GPU, off for CPU, and off for SavedModels not saved by
  this project, whose loaded-function gradients XLA recompiles every step.
  """
  if distribute.is_tpu(strategy):
    return False
  if c.jit_compile is not None:
    return c.jit_compile
  return distribute.has_gpu() and own_encoder


# glibc's mallopt parameter: allocations above it get their own mmap.
_M_MMAP_THRESHOLD = -3
_MMAP_THRESHOLD = 32 << 20  # glibc's maximum on 64-bit


def keep_malloc_fast():
  """Undoes a side effect of tf.data's generator datasets on glibc malloc.

  The first `from_generator` iterator sets M_TRIM_THRESHOLD to 128 KiB
  ("Memory patch applied" in the log). Setting it also freezes glibc's
  adaptive mmap threshold at 128 KiB, so every activation and gradient
  buffer of a step becomes a fresh mmap: zeroed pages and page faults each
  step. That made a MiniLM step 35% slower on CPU (10.7 vs 16.3 examples/s)
  and raised peak memory. Raising the mmap threshold to 32 MiB restores the
  speed (17.5) and keeps the trim setting. Called before every loop: cheap,
  and immune to when TensorFlow applies its patch. No-op off glibc.
  """
  global _mallopt
  if _mallopt is None:
    try:
      _mallopt = ctypes.CDLL(None).mallopt
    except (AttributeError, OSError):
      _mallopt = False
  if _mallopt:
    _mallopt(_M_MMAP_THRESHOLD, _MMAP_THRESHOLD)


_mallopt = None


def cpu_has_native_bfloat16():
  """Whether this x86 CPU reports AVX512_BF16 or AMX-BF16 (Linux)."""
  return bool(_cpu_flags() & {"avx512_bf16", "amx_bf16"})


def onednn_rewrites_bfloat16():
  """Whether grappler's oneDNN bfloat16 rewrite acts on this CPU.

  TensorFlow skips the pass unless the CPU has AVX512F or AVX-NE-CONVERT
  (`IsBF16SupportedByOneDNNOnThisCPU`); elsewhere the graph stays float32.
  """
  return bool(_cpu_flags() & {"avx512f", "avx_ne_convert"})


def _cpu_flags():
  try:
    with open("/proc/cpuinfo") as f:
      for line in f:
        if line.startswith("flags"):
          return set(line.split(":", 1)[1].split())
  except OSError:
    pass
  return set()


def prepare_encoder(c, strategy, encoder):
  """Sets up --jit_compile and --precision for the loaded `encoder`.

  Returns:
    (encoder to train, jit_compile for the replica step, log line).

  An encoder saved by this project (the demo, `trainer.convert_hf` output)
  is rebuilt in Python from its saved config (`bert.NativeEncoder`) where
  the SavedModel's fixed graphs cannot serve:
  - XLA on CPU/GPU: XLA cannot compile the gradient of a loaded function
    without treating the batch as compile-time constants, i.e. recompiling
    at every step; the rebuilt encoder compiles once, with hashed dropout
    masks (a Philox draw per element is slower than the matmuls in XLA on
    CPU);
  - bfloat16: mixed precision, bfloat16 matmuls, float32 variables,
    softmax, layer norms, loss and logits; any device, with or without XLA.
  Any other SavedModel is an opaque float32 graph: no XLA on CPU/GPU. For
  bfloat16, the TPU's matrix units multiply it in bfloat16 passes already;
  on CPU grappler's oneDNN auto-mixed-precision pass rewrites its matmuls and
  their gradients, on a CPU where TensorFlow runs the pass.
  """
  own = bert.saved_config(encoder) is not None
  jit = resolve_jit(c, strategy, own)
  problem = jit and not distribute.has_gpu() and distribute.xla_cpu_problem()
  if problem:
    raise config_lib.ConfigError(
        f"--jit_compile=true cannot run here: this TensorFlow build has no "
        f"XLA backend for the CPU ({problem}); the tensorflow-tpu build "
        "compiles XLA for TPUs only. Use --jit_compile=false off the TPU")
  if jit and not own:  # only an explicit --jit_compile=true gets here
    raise config_lib.ConfigError(
        f"--jit_compile=true cannot train --encoder_handle={c.encoder_handle}"
        ": XLA recompiles the gradient of a loaded SavedModel at every step "
        "(the batch becomes a compile-time constant), which is many times "
        "slower than no XLA. Only encoders saved by this project (the demo, "
        "trainer.convert_hf output) are rebuilt for XLA; use "
        "--jit_compile=false")
  bfloat16 = c.precision == "bfloat16"
  if own and (jit or bfloat16):
    with strategy.scope():
      encoder = bert.NativeEncoder(
          encoder, "bfloat16" if bfloat16 else "float32", hashed_dropout=jit)
  xla = ("; XLA: the encoder rebuilt from its saved config, hashed dropout "
         "masks" if jit else "")
  if not bfloat16:
    return encoder, jit, "precision: float32" + xla
  speed = ("" if cpu_has_native_bfloat16() or distribute.is_tpu(strategy) or
           distribute.has_gpu() else
           "; this CPU has no AVX512_BF16/AMX: bfloat16 arithmetic is "
           "emulated, expect it slower than float32")
  if own:
    return encoder, jit, (
        "precision: bfloat16 matmuls in the encoder (float32 variables, "
        "softmax, layer norms, loss and logits)" + speed + xla)
  if distribute.is_tpu(strategy):
    return encoder, jit, ("precision: bfloat16 (the TPU's default matmul "
                          "passes; variables float32)")
  where = ("on GPU"
           if distribute.has_gpu() else None if onednn_rewrites_bfloat16() else
           "on this CPU (no AVX512F: TensorFlow skips its oneDNN bfloat16 "
           "rewrite)")
  if where:
    raise config_lib.ConfigError(
        f"--precision=bfloat16 cannot apply to --encoder_handle="
        f"{c.encoder_handle} {where}: it is not an encoder saved by this "
        "project (trainer.convert_hf makes one from a Hugging Face "
        "checkpoint), so only oneDNN's CPU graph rewrite could change it; "
        "use --precision=float32")
  tf.config.optimizer.set_experimental_options(
      {"auto_mixed_precision_onednn_bfloat16": True})
  return encoder, jit, ("precision: bfloat16 via oneDNN auto-mixed-precision "
                        "(float32 variables, loss and logits)" + speed)


def _io_device(c):
  """A remote TPU's workers can't see local paths: the host does the I/O."""
  return "/job:localhost" if distribute.is_remote_tpu(c.tpu) else None


def load_handles(c, strategy):
  """Loads the preprocessor (host) and the encoder (under `strategy`)."""
  from trainer import demo  # pylint: disable=g-import-not-at-top
  encoder_handle, preprocessor_handle = c.encoder_handle, c.preprocessor_handle
  if encoder_handle == demo.SENTINEL:
    paths = demo.ensure_assets(c.demo_cache_dir or None)
    encoder_handle = paths["encoder"]
    preprocessor_handle = paths["preprocessor"]
  with tf.device("/cpu:0"):
    preprocessor = model_lib.load_handle(preprocessor_handle,
                                         "preprocessor_handle")
  with strategy.scope():
    encoder = model_lib.load_handle(
        encoder_handle, "encoder_handle", io_device=_io_device(c))
  return preprocessor, encoder


def load_models(c, strategy):
  """Loads both handles and checks that they fit each other and the flags."""
  preprocessor, encoder = load_handles(c, strategy)
  positions = model_lib.max_positions(encoder)
  if positions is not None and c.seq_length > positions:
    raise config_lib.ConfigError(
        f"--seq_length={c.seq_length} is invalid: the encoder has "
        f"{positions} position embeddings; use at most {positions}")
  rows = model_lib.word_embedding_rows(encoder)
  vocab = preprocessing.vocab_size(preprocessor)
  if rows is not None and vocab is not None and vocab > rows:
    raise config_lib.ConfigError(
        f"--preprocessor_handle={c.preprocessor_handle} is invalid: its "
        f"vocabulary has {vocab} tokens but the encoder's embedding table has "
        f"{rows} rows; use the preprocessor that matches the encoder")
  return preprocessor, encoder


def count_splits(c, splits):
  """Row counts per split, cached in model_dir (a resumed run skips them)."""
  path = input_pipeline.stats_path(c.model_dir)
  key = repr(sorted((name, repr(s)) for name, s in splits.items()))
  cached = _read_json(path)
  if cached and cached.get("key") == key:
    return cached["counts"]
  for name, split in splits.items():
    # Fail fast on a wrong layout before reading millions of rows.
    head = input_pipeline.count(split, limit=_HEAD_ROWS)
    input_pipeline.check_bad_fraction(split, head, c.max_bad_fraction)
  counts = {}
  for name, split in splits.items():
    counts[name] = input_pipeline.count(split)
    input_pipeline.check_bad_fraction(split, counts[name], c.max_bad_fraction)
    logging.info("Split %s: %d rows read, %d used, rejected %s", name,
                 counts[name]["rows_read"], counts[name]["rows_used"],
                 counts[name]["rejected"] or "none")
  _write_json(path, dict(key=key, counts=counts))
  return counts


def _flat_counts(counts):
  flat = {}
  for split, c in counts.items():
    flat[f"data.{split}.rows_read"] = c["rows_read"]
    flat[f"data.{split}.rows_used"] = c["rows_used"]
    for reason, n in c["rejected"].items():
      flat[f"data.{split}.rejected.{reason}"] = n
  return flat


class Trainer:
  """Holds the replicated state and the compiled loops of one run."""

  def __init__(self, c, strategy, encoder, plan, jit_compile):
    self.c, self.strategy, self.plan = c, strategy, plan
    with strategy.scope():
      self.model = model_lib.Classifier(
          encoder, c.num_classes, dropout_rate=c.dropout_rate, seed=c.seed)
      schedule = optimization.WarmupLinearDecay(c.learning_rate,
                                                plan.total_steps,
                                                plan.warmup_steps)
      self.optimizer = optimization.AdamW(
          self.model.trainable_variables,
          schedule,
          weight_decay=c.weight_decay,
          clip_norm=c.clip_norm)
      # Batches skipped after non-finite losses: the data position is
      # step + data_skip, saved with the weights.
      self.data_skip = tf.Variable(
          0,
          dtype=tf.int64,
          trainable=False,
          name="data_skip",
          aggregation=tf.VariableAggregation.ONLY_FIRST_REPLICA)
    # The encoder's variables are also listed explicitly: how a loaded
    # SavedModel's object graph is checkpointed depends on how it was saved,
    # and a list of variables is saved whatever the handle.
    self.checkpoint = tf.train.Checkpoint(
        model=self.model,
        optimizer=self.optimizer,
        encoder_variables=list(encoder.variables),
        data_skip=self.data_skip)
    self.checkpoint_options = tf.train.CheckpointOptions(
        experimental_io_device=_io_device(c))
    self.manager = tf.train.CheckpointManager(
        self.checkpoint,
        config_lib.locations(c)["checkpoints"],
        max_to_keep=c.keep_checkpoints,
        step_counter=self.optimizer.iterations)
    self._train_step = train_step.make_train_step(
        self.model,
        self.optimizer,
        c.batch_size,
        seed=c.seed,
        jit_compile=jit_compile)
    self._eval_step = train_step.make_eval_step(self.model)

  def save(self, step):
    return self.manager.save(
        checkpoint_number=step, options=self.checkpoint_options)

  @property
  def data_position(self):
    """Batches consumed from the training stream (steps + skipped)."""
    return self.step + int(self.data_skip.numpy())

  def save_unless_saved(self):
    """Saves at the current step unless the newest checkpoint is for it."""
    latest = self.manager.latest_checkpoint
    if latest is None or not latest.endswith(f"-{self.step}"):
      self.save(self.step)

  @property
  def step(self):
    return int(self.optimizer.iterations.numpy())

  def restore(self, latest):
    """Restores the checkpoint at prefix `latest` (None: nothing to do)."""
    if latest:
      self.checkpoint.restore(
          latest,
          options=self.checkpoint_options).assert_existing_objects_matched()
      logging.info("Resumed from %s at step %d", latest, self.step)
    return latest

  @tf.function
  def train_loop(self, iterator, num_steps):
    """Runs `num_steps` steps; returns mean loss and mean grad norm."""
    strategy = self.strategy
    loss_sum = tf.constant(0.0)
    norm_sum = tf.constant(0.0)
    for _ in tf.range(num_steps):
      out = strategy.run(self._train_step, args=(next(iterator),))
      loss_sum += strategy.reduce(
          tf.distribute.ReduceOp.SUM, out["loss"], axis=None)
      norm_sum += strategy.reduce(
          tf.distribute.ReduceOp.MEAN, out["grad_norm"], axis=None)
    n = tf.cast(num_steps, tf.float32)
    return loss_sum / n, norm_sum / n

  @tf.function
  def eval_loop(self, dataset):
    strategy = self.strategy
    keys = ("loss_sum", "correct_sum", "weight_sum")
    totals = tf.zeros([3])
    for batch in dataset:
      out = strategy.run(self._eval_step, args=(batch,))
      totals += tf.stack([
          strategy.reduce(tf.distribute.ReduceOp.SUM, out[k], axis=None)
          for k in keys
      ])
    return dict(zip(keys, tf.unstack(totals)))

  def evaluate(self, dataset):
    totals = {k: float(v) for k, v in self.eval_loop(dataset).items()}
    n = max(totals["weight_sum"], 1.0)
    return dict(
        loss=totals["loss_sum"] / n,
        accuracy=totals["correct_sum"] / n,
        examples=int(round(totals["weight_sum"])))


def _next_boundary(step, c, total, window=None):
  """End of the loop starting at `step`; `window`: --profile_steps parsed.

  Every worker cuts at the profile window (only the chief profiles), so
  all run the same loops, as the collective ops require.
  """
  stop = min(total, step + c.steps_per_loop)
  for every in (c.eval_every, c.checkpoint_every):
    if every:
      stop = min(stop, (step // every + 1) * every)
  if window:
    # Loops end where the profile starts and stops: it covers whole steps.
    for edge in (window[0] - 1, window[1]):
      if step < edge < stop:
        stop = edge
  return stop


class _Profile:
  """--profile_steps: a TensorBoard profile of training steps FIRST..LAST.

  Started before the loop that runs step FIRST and stopped after the loop
  that runs step LAST (`_next_boundary` cuts loops there), so the trace holds
  exactly those steps, written under `logdir`/plugins/profile/.
  """

  def __init__(self, c, logdir):
    self.window = c.profile_window()
    self.logdir = logdir
    self.active = False

  def before_loop(self, step):
    """`step`: steps done before the loop; its first is step + 1."""
    if self.window and not self.active and (self.window[0] - 1 <= step <
                                            self.window[1]):
      tf.profiler.experimental.start(self.logdir)
      self.active = True
      logging.info("Profiling steps %d..%d into %s/plugins/profile", step + 1,
                   self.window[1], self.logdir)

  def after_loop(self, stop):
    if self.active and stop >= self.window[1]:
      self.close()

  def close(self):
    if self.active:
      tf.profiler.experimental.stop()
      self.active = False


class _Progress:
  """Log lines with loss, speed and ETA; a bar on an interactive terminal."""

  def __init__(self, total):
    self.total = total
    self.tty = sys.stderr.isatty()

  def update(self, step, loss, lr, examples_per_second, eta_seconds):
    eta = time.strftime("%H:%M:%S", time.gmtime(max(eta_seconds, 0)))
    line = (f"step {step}/{self.total} loss {loss:.4f} lr {lr:.3g} "
            f"{examples_per_second:.1f} examples/s ETA {eta}")
    if self.tty:
      done = int(30 * step / self.total)
      sys.stderr.write(f"\r[{'#' * done}{'.' * (30 - done)}] {line}   ")
      sys.stderr.flush()
      if step >= self.total:
        sys.stderr.write("\n")
    logging.info(line)


def run(c):
  """Trains and evaluates per `c`; returns the summary dict (also written to
  model_dir/summary.json)."""
  config_lib.validate(c)
  if c.deterministic:
    # Data order, splits, the head's dropout and the demo encoder's dropout
    # are functions of seeds and checkpointed state already; this makes the
    # kernels deterministic too.
    tf.config.experimental.enable_op_determinism()
    tf.random.set_seed(c.seed)
  distribute.check_paths_for_tpu(
      c.tpu,
      dict(
          train_file=c.train_file,
          eval_file=c.eval_file,
          test_file=c.test_file,
          data_dir=c.data_dir))
  strategy = distribute.build_strategy(c.tpu, c.strategy)
  config_lib.check_replicas(c, strategy.num_replicas_in_sync)
  chief, task_id = distribute.worker_role(strategy)
  # Non-chief workers of a multi-worker job save (the save is collective)
  # into a private folder that is removed at the end; the chief writes all
  # that a user sees. Everybody resumes from the chief's checkpoints.
  out = c if chief else _worker_config(c, task_id)
  tf.io.gfile.makedirs(out.model_dir)
  preprocessor, encoder = load_models(c, strategy)
  encoder, jit, note = prepare_encoder(c, strategy, encoder)
  logging.info("%s", note)
  splits = input_pipeline.make_splits(c)
  counts = count_splits(out, splits)
  for name in ("train", "validation"):
    if counts[name]["rows_used"] == 0:
      raise TrainingError(
          f"the {name} split has no usable rows ({counts[name]}); check the "
          "data source flags, --label_map and --text_column/--label_column")
  plan = make_plan(c, counts["train"]["rows_used"])
  logging.info(
      "Replicas: %d, jit_compile: %s, steps: %d (%d per epoch), warmup: %d",
      strategy.num_replicas_in_sync, jit, plan.total_steps,
      plan.steps_per_epoch, plan.warmup_steps)
  _write_json(
      os.path.join(out.model_dir, "config.json"),
      dict(
          config=dataclasses.asdict(c),
          plan=dataclasses.asdict(plan),
          replicas=strategy.num_replicas_in_sync,
          jit_compile=jit,
          tensorflow=tf.__version__))

  checkpoint_dir = config_lib.locations(c)["checkpoints"]
  if chief:
    latest = checkpoints.repair(checkpoint_dir).intact
  else:
    latest = tf.train.latest_checkpoint(checkpoint_dir)
  trainer = Trainer(out, strategy, encoder, plan, jit)
  trainer.restore(latest)
  packer = preprocessing.make_packer(preprocessor, c.seq_length)
  eval_batch = c.eval_batch_size or c.batch_size

  def eval_data(name):
    ds = input_pipeline.eval_dataset(splits[name], packer, eval_batch)
    return strategy.experimental_distribute_dataset(ds)

  def data_at(position):
    """The distributed training stream from batch `position` on."""
    ds = input_pipeline.train_dataset(
        splits["train"],
        packer,
        c.batch_size,
        plan.steps_per_epoch,
        start_step=position,
        seed=c.seed,
        shuffle_buffer=c.shuffle_buffer,
        read_stripes=c.read_stripes)
    input_pipeline.check_int_features(ds.element_spec)
    return iter(strategy.experimental_distribute_dataset(ds))

  summaries = config_lib.locations(out)["summaries"]
  train_writer = tf.summary.create_file_writer(os.path.join(summaries, "train"))
  eval_writer = tf.summary.create_file_writer(os.path.join(summaries, "eval"))
  progress = _Progress(plan.total_steps)

  loop_times = []  # (examples, seconds); the first loop also traces.
  start_step = trainer.step

  best = BestKeeper(
      os.path.join(config_lib.locations(out)["checkpoints"], "best"), trainer,
      c.early_stopping_metric, c.early_stopping_patience)

  evaluated = {}  # step -> (metrics, stop): the same step is never redone

  def evaluate(step):
    """Evaluates; returns (metrics, whether early stopping says stop)."""
    if step not in evaluated:
      metrics = _evaluate(trainer, eval_data("validation"), eval_writer, step)
      evaluated[step] = (metrics, best.update(metrics, step))
    return evaluated[step]

  # The chief profiles (--profile_steps); a worker's trace is its own host's.
  profile = _Profile(
      c if chief else dataclasses.replace(c, profile_steps=""),
      os.path.join(summaries, "train"))
  with StopSignals() as signals:
    try:
      train_loss, recoveries, stopped_early = _train(c, trainer, plan, data_at,
                                                     progress, train_writer,
                                                     evaluate, loop_times,
                                                     signals, profile)
    finally:
      profile.close()

  trainer.save_unless_saved()
  final_step = trainer.step
  eval_metrics, _ = evaluate(final_step)
  if best.state["step"] not in (None, final_step):
    # The model the run hands over (and exports) is the best one.
    trainer.restore(best.manager.latest_checkpoint)
    eval_metrics = trainer.evaluate(eval_data("validation"))
  summary = dict(
      final_step=final_step,
      best_step=best.state["step"],
      best_metric={c.early_stopping_metric: best.state["value"]},
      stopped_early=stopped_early,
      start_step=start_step,
      train_loss=train_loss,
      eval_accuracy=eval_metrics["accuracy"],
      eval_loss=eval_metrics["loss"],
      eval_examples=eval_metrics["examples"],
      examples_per_second=_throughput(loop_times),
      examples={name: counts[name]["rows_used"] for name in counts},
      nan_recoveries=recoveries,
      replicas=strategy.num_replicas_in_sync,
      total_steps=plan.total_steps)
  if counts.get("test", {}).get("rows_used"):
    test = trainer.evaluate(eval_data("test"))
    summary.update(test_accuracy=test["accuracy"], test_loss=test["loss"])
  summary.update(_flat_counts(counts))
  train_writer.flush()
  eval_writer.flush()
  _write_json(os.path.join(out.model_dir, "summary.json"), summary)
  if out.export:
    summary["export_dir"] = _export(out, strategy, trainer.step)
    _write_json(os.path.join(out.model_dir, "summary.json"), summary)
  if not chief:
    tf.io.gfile.rmtree(out.model_dir)
  logging.info("Done at step %d: eval accuracy %.4f, eval loss %.4f",
               trainer.step, summary["eval_accuracy"], summary["eval_loss"])
  return summary


def _train(c, trainer, plan, data_at, progress, train_writer, evaluate,
           loop_times, signals, profile):
  """The loops until the last step; returns the last loop's mean loss.

  A non-finite loss or gradient norm is caught at the loop boundary, before
  any save: the run rolls back to the newest checkpoint, skips the batches of
  the bad loop, and goes on, at most --max_nan_recoveries times.
  """
  train_loss = float("nan")
  recoveries = 0
  iterator = data_at(trainer.data_position)
  window = c.profile_window()
  while trainer.step < plan.total_steps:
    step, position = trainer.step, trainer.data_position
    stop = _next_boundary(step, c, plan.total_steps, window)
    # Logged at `stop`: the rate of the loop's last update (update t = stop).
    lr = float(trainer.optimizer.schedule(stop - 1))
    keep_malloc_fast()
    profile.before_loop(step)
    started = time.perf_counter()
    loss, grad_norm = trainer.train_loop(iterator, tf.constant(stop - step))
    train_loss, grad_norm = float(loss), float(grad_norm)
    profile.after_loop(stop)
    if faults.nan_in(position, position + stop - step):
      train_loss = float("nan")
    seconds = time.perf_counter() - started
    if not math.isfinite(train_loss) or not math.isfinite(grad_norm):
      recoveries += 1
      where = (
          f"non-finite loss {train_loss} / grad norm {grad_norm} in "
          f"steps {step}..{stop} (batches {position}..{position + stop - step})"
      )
      latest = tf.train.latest_checkpoint(trainer.manager.directory)
      if recoveries > c.max_nan_recoveries or latest is None:
        reason = (f"gave up after {recoveries - 1} rollback(s) "
                  f"(--max_nan_recoveries={c.max_nan_recoveries})"
                  if latest else "no checkpoint to roll back to")
        raise TrainingError(
            f"{where}; no checkpoint was written for them; {reason}. Lower "
            "--learning_rate or check the data.")
      skip_to = position + stop - step
      trainer.restore(latest)
      trainer.data_skip.assign(skip_to - trainer.step)
      logging.warning(
          "%s: rolled back to %s and skipping to batch %d "
          "(recovery %d of %d)", where, latest, skip_to, recoveries,
          c.max_nan_recoveries)
      iterator = data_at(trainer.data_position)
      continue
    examples = (stop - step) * c.batch_size
    loop_times.append((examples, seconds))
    speed = examples / seconds
    progress.update(stop, train_loss, lr, speed,
                    (plan.total_steps - stop) * c.batch_size / speed)
    with train_writer.as_default(step=stop):
      tf.summary.scalar("train/loss", train_loss)
      tf.summary.scalar("train/learning_rate", lr)
      tf.summary.scalar("train/grad_norm", grad_norm)
      tf.summary.scalar("train/examples_per_second", speed)
    if c.eval_every and stop % c.eval_every == 0 and stop < plan.total_steps:
      if evaluate(stop)[1]:
        logging.info("Early stopping at step %d: no better %s in %d evals",
                     stop, c.early_stopping_metric, c.early_stopping_patience)
        trainer.save_unless_saved()
        return train_loss, recoveries, True
    if c.checkpoint_every and stop % c.checkpoint_every == 0:
      trainer.save(stop)
    if signals.received:
      trainer.save_unless_saved()
      raise Preempted(
          f"{signals.received} received: stopped after step {stop} with a "
          f"checkpoint in {trainer.manager.directory}; run the same command "
          "again to resume")
  return train_loss, recoveries, False


def _worker_config(c, task_id):
  tmp = os.path.join(c.model_dir, f".worker-{task_id}-tmp")
  return dataclasses.replace(
      c,
      model_dir=tmp,
      checkpoint_dir=os.path.join(tmp, "checkpoints"),
      summary_dir=os.path.join(tmp, "summaries"),
      export=False)


def _export(c, strategy, step):
  from trainer import export  # pylint: disable=g-import-not-at-top
  target = os.path.join(config_lib.locations(c)["export"], str(step))
  if export.is_complete(target):
    logging.info("Export for step %d exists already: %s", step, target)
    return target
  # Rebuilt on the host from the checkpoint just written, so nothing of the
  # accelerator's state is saved; TPU hosts still write through localhost.
  io_device = "/job:localhost" if distribute.is_tpu(strategy) else None
  return export.export(c.model_dir, io_device=io_device)


def _throughput(loop_times):
  """Examples per second over the loops after the first (which traces)."""
  timed = loop_times[1:] or loop_times
  seconds = sum(s for _, s in timed)
  return sum(e for e, _ in timed) / seconds if seconds else None


class BestKeeper:
  """Keeps the best checkpoint by an eval metric apart from the rolling ones,
  and counts evals without improvement for early stopping.

  State (best value and step, evals since) lives in <dir>/best.json, so a
  resumed run keeps counting where it stopped.
  """

  def __init__(self, directory, trainer, metric, patience):
    self.directory, self.trainer = directory, trainer
    self.key = metric.split("/", 1)[-1]  # "eval/loss" -> "loss"
    self.lower_is_better = self.key == "loss"
    self.patience = patience
    self.manager = tf.train.CheckpointManager(
        trainer.checkpoint, directory, max_to_keep=1, checkpoint_name="best")
    self.state = _read_json(os.path.join(directory, "best.json")) or dict(
        value=None, step=None, evals_since_best=0)

  def update(self, metrics, step):
    """Records an eval; returns True when early stopping should stop."""
    value = metrics[self.key]
    best = self.state["value"]
    better = best is None or (value < best
                              if self.lower_is_better else value > best)
    if better:
      self.manager.save(
          checkpoint_number=step, options=self.trainer.checkpoint_options)
      self.state = dict(value=value, step=step, evals_since_best=0)
    else:
      self.state["evals_since_best"] += 1
    _write_json(os.path.join(self.directory, "best.json"), self.state)
    return bool(self.patience and
                self.state["evals_since_best"] >= self.patience)


def _evaluate(trainer, dataset, writer, step):
  metrics = trainer.evaluate(dataset)
  logging.info("eval at step %d: accuracy %.4f loss %.4f over %d examples",
               step, metrics["accuracy"], metrics["loss"], metrics["examples"])
  with writer.as_default(step=step):
    tf.summary.scalar("eval/accuracy", metrics["accuracy"])
    tf.summary.scalar("eval/loss", metrics["loss"])
  return metrics
