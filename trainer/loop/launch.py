"""Launching a run: `setup(config) -> Run`, everything resolved once.

`setup` resolves the strategy and this process's role, the run's locations
and its lock, whether the flags may resume what model_dir holds, the
handles and how they compute, the data and its counts, the step plan, and
the training state restored from the newest intact checkpoint (the restore
order: `checkpoints.resume_point`, else the pretrained encoder from its
handle with a fresh head), and hands out a `Run` for `train_lib.train` and
`train_lib.finish`.
"""

import dataclasses

from absl import logging
import tensorflow as tf

from trainer.base import checks
from trainer.loop import actions
from trainer.model import checkpoints
from trainer.base import config as config_lib
from trainer.base import distribute
from trainer.base import errors
from trainer.base import host
from trainer.data import input_pipeline
from trainer.base import logs
from trainer.model import classifier as model_lib
from trainer.model import optimization
from trainer.loop import plan as plan_lib
from trainer.model import precision as precision_lib
from trainer.data import preprocessing
from trainer.base import run_dir
from trainer.model import train_state
from trainer.loop import train_step


@dataclasses.dataclass
class Run:
  """Everything `setup` resolved for one run of one process.

  `out` is where this process writes: the run's Locations for the chief, a
  private folder for other workers of a multi-worker job (their saves are
  collective but discarded); every process resumes from `shared`, the
  run's.
  """

  config: config_lib.Config
  strategy: tf.distribute.Strategy
  chief: bool
  shared: run_dir.Locations
  out: run_dir.Locations
  route: precision_lib.Route
  splits: dict
  counts: dict
  packer: object
  plan: plan_lib.Plan
  state: train_state.TrainState
  train_loop: object
  eval_loop: object
  evaluator: actions.Evaluator
  writers: dict
  start_step: int
  lock: object = None
  log: object = None

  def close(self):
    """Stops the run's log file and gives `model_dir` back (the chief's
    lock)."""
    try:
      if self.log:
        logs.close_run_log(self.log)
        self.log = None
    finally:
      if self.lock:
        self.lock.__exit__(None, None, None)
        self.lock = None

  def eval_data(self, name):
    """The distributed eval stream of split `name` (every row once)."""
    ds = input_pipeline.eval_dataset(
        self.splits[name], self.packer, self.config.eval_batch_size or
        self.config.batch_size)
    return self.strategy.experimental_distribute_dataset(ds)

  def train_data(self, position):
    """The distributed training stream from batch `position` on."""
    c = self.config
    ds = input_pipeline.train_dataset(
        self.splits["train"],
        self.packer,
        c.batch_size,
        self.plan.steps_per_epoch,
        start_step=position,
        seed=c.seed,
        shuffle_buffer=c.shuffle_buffer,
        read_stripes=c.read_stripes)
    input_pipeline.check_int_features(ds.element_spec)
    return iter(self.strategy.experimental_distribute_dataset(ds))

  def evaluate(self, name):
    """The metrics of one pass over split `name` (`train_step.evaluate`)."""
    return train_step.evaluate(self.eval_loop, self.eval_data(name),
                               self.config.metrics())

  def evaluate_validation(self):
    """Validation's metrics, and beside them those of each other validation
    split under its prefix (MNLI: `mismatched_accuracy`, ...)."""
    out = self.evaluate("validation")
    for name in self.splits:
      if not name.startswith("validation_"):
        continue
      prefix = name.removeprefix("validation_") + "_"
      extra = self.evaluate(name)
      out.update({
          prefix + k: v
          for k, v in extra.items()
          if isinstance(v, (int, float))
      })
    return out


def _start(c):
  """Determinism, the strategy, and this process's role and folders."""
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
  strategy = distribute.build_strategy(c.tpu, c.strategy, c.cluster_timeout)
  checks.check_replicas(c, strategy.num_replicas_in_sync)
  chief, task_id = distribute.worker_role(strategy)
  shared = run_dir.locations(c)
  out = shared if chief else run_dir.for_worker(c.model_dir, task_id)
  try:
    tf.io.gfile.makedirs(out.model_dir)
  except (tf.errors.OpError, OSError) as e:
    raise errors.ResourceError(
        f"cannot create --model_dir={c.model_dir}: {errors.first_line(e)}; "
        "give a folder you can write (local, or gs:// with network and "
        "credentials)") from None
  return strategy, chief, shared, out


def prepare(c, strategy, encoder):
  """(the encoder prepared for its Route, the Route) of Config `c` on
  `strategy`: precision and XLA as `precision.choose` decides."""
  device = distribute.device_kind(strategy)
  facts = dict(
      jit_compile=c.jit_compile,
      device=device,
      own_encoder=model_lib.is_own_encoder(encoder),
      cpu_flags=host.cpu_flags(),
      encoder_handle=c.encoder_handle,
      xla_cpu_problem=host.xla_cpu_problem)
  if c.precision == "auto":
    route = precision_lib.choose_auto(
        gpu_capability=distribute.gpu_capability() if device == "gpu" else None,
        **facts)
  else:
    route = precision_lib.choose(c.precision, **facts)
  return model_lib.prepare_encoder(encoder, route, strategy), route


def load_model(c, strategy):
  """The handles, checked against each other and the flags, the encoder
  prepared for its route; returns (preprocessor, encoder, route)."""
  preprocessor, encoder = model_lib.load_checked(c, strategy,
                                                 distribute.io_device(strategy))
  encoder, route = prepare(c, strategy, encoder)
  logging.info("%s", route.note)
  return preprocessor, encoder, route


def _data(c, out):
  """The splits and their row counts (cached in `out`)."""
  splits = input_pipeline.make_splits(c)
  counts = input_pipeline.count_splits(splits, c.max_bad_fraction,
                                       out.data_stats, c.num_classes)
  input_pipeline.check_counts(splits, counts, c.validation_fraction)
  return splits, counts


def _state(c, strategy, encoder, plan, out, route):
  return train_state.TrainState(
      strategy,
      encoder,
      num_classes=c.num_classes,
      dropout_rate=c.dropout_rate,
      seed=c.seed,
      pooling=c.pooling,
      schedule=optimization.WarmupLinearDecay(c.learning_rate, plan.total_steps,
                                              plan.warmup_steps),
      weight_decay=c.weight_decay,
      clip_norm=c.clip_norm,
      directory=out.checkpoints,
      keep=c.keep_checkpoints,
      layer_decay=c.layer_decay,
      loss_scaling=route.loss_scaling,
      io_device=distribute.io_device(strategy))


def _write_config(c, out, plan, strategy, route, layer_rates):
  run_dir.write_json(
      out.config_json,
      dict(
          config=dataclasses.asdict(c),
          plan=plan.durations(),
          replicas=strategy.num_replicas_in_sync,
          jit_compile=route.jit_compile,
          precision=route.precision,
          precision_note=route.note,
          layer_rates=layer_rates,
          tensorflow=tf.__version__))


def _log_layer_rates(table):
  """--layer_decay's learning-rate factors, once, as a table."""
  if table:
    logging.info(
        "Layer-wise learning rates (factor of --learning_rate):\n%s", "\n".join(
            f"  {name:<12} {factor:.4g}" for name, factor in table.items()))


def _check_resume(c, shared, out):
  """Before anything is written: a model_dir holding a run's checkpoints
  is resumed only with flags that continue that run (`check_resume`)."""
  saved = run_dir.read_json(out.config_json)
  if saved and checkpoints.exist(shared.checkpoints):
    for change in run_dir.check_resume(saved.get("config", {}), c):
      logging.info("Resuming with %s", change)


def _build(c, strategy, chief, shared, out):
  """The rest of `setup`, once the run's folder is this process's."""
  if chief:
    _check_resume(c, shared, out)
  preprocessor, encoder, route = load_model(c, strategy)
  splits, counts = _data(c, out)
  plan = plan_lib.make_plan(c, counts["train"]["rows_used"])
  logging.info(
      "Replicas: %d, jit_compile: %s, steps: %d (%d per epoch), warmup: %d",
      strategy.num_replicas_in_sync, route.jit_compile, plan.total_steps,
      plan.steps_per_epoch, plan.warmup_steps)
  state = _state(c, strategy, encoder, plan, out, route)
  state.resume(shared.checkpoints, chief)
  _log_layer_rates(state.layer_rates)
  _write_config(c, out, plan, strategy, route, state.layer_rates)
  writers = {
      kind: tf.summary.create_file_writer(out.summary_writer_dir(kind))
      for kind in ("train", "eval")
  }
  run = Run(
      config=c,
      strategy=strategy,
      chief=chief,
      shared=shared,
      out=out,
      route=route,
      splits=splits,
      counts=counts,
      packer=preprocessing.make_packer(preprocessor, c.seq_length),
      plan=plan,
      state=state,
      train_loop=train_step.make_train_loop(
          strategy,
          train_step.make_train_step(
              state.model,
              state.optimizer,
              c.batch_size,
              seed=c.seed,
              jit_compile=route.jit_compile,
              accumulation_steps=c.grad_accumulation_steps,
              loss_scale=state.loss_scale)),
      eval_loop=train_step.make_eval_loop(
          strategy, train_step.make_eval_step(state.model, c.num_classes),
          c.num_classes),
      evaluator=None,
      writers=writers,
      start_step=state.step)
  best = actions.BestKeeper(out.best, state.checkpoint, state.options,
                            c.early_stopping_metric, c.early_stopping_patience)
  run.evaluator = actions.Evaluator(run.evaluate_validation, writers["eval"],
                                    best, c.class_names())
  return run


def setup(c, command="trainer.main"):
  """Resolves and builds everything for a run of Config `c` (validated).

  The chief holds `model_dir` for the run (`run_dir.Lock`, named after
  `command`) and appends the run's log lines to model_dir/train.log: call
  `Run.close()` (as `run` does) to give both back.
  """
  strategy, chief, shared, out = _start(c)
  lock = log = None
  if chief:
    lock = run_dir.Lock(c.model_dir, command).__enter__()
  try:
    log = logs.open_run_log(out.log_file) if chief else None
    run = _build(c, strategy, chief, shared, out)
  except BaseException:
    if log:
      logs.close_run_log(log)
    if lock:
      lock.__exit__(None, None, None)
    raise
  run.lock, run.log = lock, log
  return run
