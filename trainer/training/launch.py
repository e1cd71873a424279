"""Launching a run: `setup(config) -> Job`, everything resolved once.

`setup` resolves, in this order: the strategy and this process's role, the
run's record (`Run`: its config, task, locations, lock and log), whether
the flags may resume what model_dir holds, the handles and how they
compute (`precision.Route`), the data and its counts, the step plan, and
the training state restored from the newest intact checkpoint (the restore
order: `checkpoints.resume_point`, else the pretrained encoder from its
handle with a fresh head). It then builds what runs: the trainer object,
the evaluator, and the between-loop actions, and hands them out as a `Job`
for `controller.train` and `finish.finish`.
"""

import dataclasses
import functools

from absl import logging
import tensorflow as tf

from trainer.data import counts as counts_lib
from trainer.data import input_pipeline
from trainer.foundation import checks
from trainer.foundation import config as config_lib
from trainer.foundation import errors
from trainer.foundation import layout as layout_lib
from trainer.foundation import tasks
from trainer.model import checkpoints
from trainer.model import classifier as model_lib
from trainer.model import optimization
from trainer.model import train_state
from trainer.runtime import distribute
from trainer.runtime import logs
from trainer.runtime import run_dir
from trainer.runtime import run_lock
from trainer.serving import export as export_lib
from trainer.training import actions
from trainer.training import encoder_setup
from trainer.training import faults
from trainer.training import finish as finish_lib
from trainer.training import inputs
from trainer.training import plan as plan_lib
from trainer.training import eval_step
from trainer.training import train_step
from trainer.training import trainer as trainer_lib


@dataclasses.dataclass
class Run:
  """A run's record: its config and task, its strategy, where it writes,
  and what it holds while it runs.

  `out` is where this process writes: the run's Locations for the chief, a
  private folder for other workers of a multi-worker job (their saves are
  collective but discarded); every process resumes from `shared`, the
  run's.
  """

  config: config_lib.Config
  task: tasks.Task
  strategy: tf.distribute.Strategy
  chief: bool
  shared: run_dir.Locations
  out: run_dir.Locations
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


@dataclasses.dataclass
class Job:
  """A run set up: what its loops (`controller.train`) and its end
  (`finish.finish`) use.

  `actions` are the train actions in the order they run after each loop
  (the last one stops on a signal: `stop`); `evaluations` the evals with
  their followers (log, summaries, best checkpoint, early stopping);
  `after_training` what is given back once the loops end (the progress
  bar, the profiler, the summary writers' buffers); `exporter` writes the
  export (None: --export=false, or not the chief).
  """

  run: Run
  data: inputs.RunData
  plan: plan_lib.Plan
  state: train_state.TrainState
  trainer: object
  evaluator: trainer_lib.Evaluator
  evaluations: actions.Evaluations
  best: actions.BestCheckpoint
  actions: list
  stop: actions.StopOnSignal
  after_training: tuple
  facts: finish_lib.RunFacts
  exporter: object = None

  def end_training(self):
    for step in self.after_training:
      step()

  def close(self):
    self.run.close()


def _start(c):
  """Determinism, the strategy, and this process's role and folders."""
  if c.deterministic:
    # Data order (but a run on tf.data's old buffer), splits, the dropouts
    # of the head and the demo encoder are functions of seeds and state
    # already; this makes the kernels deterministic too.
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
  shared = run_dir.locations(c.model_dir, c.checkpoint_dir, c.summary_dir,
                             c.export_base_dir)
  out = shared if chief else run_dir.for_worker(c.model_dir, task_id)
  try:
    tf.io.gfile.makedirs(out.model_dir)
  except (tf.errors.OpError, OSError) as e:
    raise errors.ResourceError(
        f"cannot create --model_dir={c.model_dir}: {errors.first_line(e)}; "
        "give a folder you can write (local, or gs:// with network and "
        "credentials)") from None
  return strategy, chief, shared, out


def _plan(c, train_examples, steps_per_epoch):
  return plan_lib.make_plan(
      train_examples,
      c.batch_size,
      steps_per_epoch=steps_per_epoch,
      epochs=c.epochs,
      train_steps=c.train_steps,
      warmup_fraction=c.warmup_fraction,
      steps_per_loop=c.steps_per_loop,
      eval_every=c.eval_every,
      checkpoint_every=c.checkpoint_every,
      profile=checks.profile_window(c.profile_steps))


def _state(c, strategy, encoder, plan, out, route):
  return train_state.TrainState(
      strategy,
      encoder,
      num_classes=c.num_classes,
      dropout_rate=c.dropout_rate,
      seed=c.seed,
      pooling=model_lib.pooling_of(c),
      schedule=optimization.WarmupLinearDecay(c.learning_rate, plan.total_steps,
                                              plan.warmup_steps),
      weight_decay=c.weight_decay,
      clip_norm=c.clip_norm,
      directory=out.checkpoints,
      keep=c.keep_checkpoints,
      layer_decay=c.layer_decay,
      loss_scaling=route.loss_scaling,
      io_device=distribute.io_device(strategy),
      ema_decay=c.ema_decay)


def _write_config(run, plan, strategy, route, layer_rates, data):
  run_dir.write_json(
      run.out.config_json,
      dict(
          config=dataclasses.asdict(run.config),
          task=run.task.to_json(),
          data=counts_lib.fingerprint(data.counts),
          **data.layout.record(),
          shuffle=data.shuffle,
          plan=plan.durations(),
          replicas=strategy.num_replicas_in_sync,
          jit_compile=route.jit_compile,
          precision=route.precision,
          precision_note=route.note,
          layer_rates=layer_rates,
          tensorflow=tf.__version__))
  run_dir.copy_record(run.out)


def _log_layer_rates(table):
  """--layer_decay's learning-rate factors, once, as a table."""
  if table:
    logging.info(
        "Layer-wise learning rates (factor of --learning_rate):\n%s", "\n".join(
            f"  {name:<12} {factor:.4g}" for name, factor in table.items()))


def run_record(shared):
  """The record (config.json) of the run whose checkpoints model_dir holds,
  None for a new run. Checkpoints without a readable record are refused
  (`run_dir.read_record`): `setup` reads it before the run's log opens, so
  the refusal leaves train.log as it was; `trainer.doctor` reads it too."""
  held = checkpoints.exist(shared.checkpoints)
  record, why = run_dir.read_record(shared, held)
  if why and why != run_dir.MISSING:
    logging.warning("Ignoring %s, which %s: no checkpoint to resume",
                    shared.config_json, why)
  return record if held else None


def _resumed(c, shared, saved):
  """Before anything is written: (`saved`, the record of the run whose
  checkpoints model_dir holds (`run_record`), None for a fresh run; the Config
  to run; how its epochs are shuffled, `inputs.shuffle`).
  A field left at a default that changed since the run began takes the
  run's value (`config.run_defaults`); the run is resumed only with flags
  that continue it (`check_resume`)."""
  if saved is None:
    return None, c, input_pipeline.SHUFFLE
  recorded = layout_lib.recorded_config(saved)
  c, kept = config_lib.run_defaults(c, recorded)
  changes = run_dir.check_resume(recorded, c)
  shuffle = inputs.shuffle(saved, c.model_dir)
  # Logged once the resume is allowed: a refused one leaves train.log as it
  # was.
  for name in kept:
    logging.info(
        "Resuming with the run's --%s=%s (config.json; the default "
        "is now %s)", name, getattr(c, name), config_lib.default(name))
  for change in changes:
    logging.info("Resuming with %s", change)
  if shuffle == input_pipeline.LEGACY_SHUFFLE:
    logging.info("Resuming with the run's shuffle, tf.data's buffer (its "
                 "order continues if --deterministic is as the run began)")
  return saved, c, shuffle


def _trainer(c, strategy, state, route, data, plan, run):
  """The trainer object: the compiled train loop over the run's `data`
  (with NaNs injected where a drill asks, and the profiler around its
  window)."""

  def dataset(position):
    ds = input_pipeline.train_groups(
        data.splits["train"],
        data.encode,
        data.layout,
        plan.steps_per_epoch,
        start_step=position,
        seed=c.seed,
        shuffle_buffer=c.shuffle_buffer,
        read_stripes=c.read_stripes,
        shuffle=data.shuffle)
    input_pipeline.check_int_features(ds.element_spec)
    return iter(strategy.experimental_distribute_dataset(ds))

  def meta(group):
    first, count = strategy.experimental_local_results(group["meta"])[0][0]
    return int(first), int(count)

  loop = train_step.make_train_loop(
      strategy,
      train_step.make_train_step(
          state.model,
          state.optimizer,
          c.batch_size,
          seed=c.seed,
          jit_compile=route.jit_compile,
          accumulation_steps=c.grad_accumulation_steps,
          loss_scale=state.loss_scale,
          per_token=run.task.tagging))
  trainer = faults.wrap(
      trainer_lib.Trainer(state, loop, dataset, meta, data.layout))
  if plan.profile and run.chief:  # a worker's trace would be its own host's
    trainer = trainer_lib.Profiled(trainer, plan.profile,
                                   run.out.summary_writer_dir("train"))
  return trainer


def _evaluator(c, strategy, state, task, data):

  def dataset(split):
    # Built at the first eval and iterated afresh at each (the pipeline's
    # maps are traced and the strategy's rewrite made once a run).
    return functools.cache(lambda: strategy.experimental_distribute_dataset(
        input_pipeline.eval_groups(split, data.eval_encode, data.layout)))

  step = eval_step.make_eval_step(state.model, c.num_classes, task.tagging)
  return trainer_lib.Evaluator(
      eval_step.make_eval_loop(strategy, step, c.num_classes, task.tagging), {
          name: dataset(split)
          for name, split in data.splits.items()
          if name.startswith("validation") or name == "test"
      },
      task.metrics,
      weights=state.averaged,
      class_names=task.class_names)


def _actions(c, task, run, plan, state, evaluator, signals):
  """(train actions, evaluations, best checkpoint, signal stop, what
  closes when the loops end: the progress bar, the writers' buffers)."""
  writers = {
      kind: tf.summary.create_file_writer(run.out.summary_writer_dir(kind))
      for kind in ("train", "eval")
  }
  best = actions.BestCheckpoint(run.out.best, state.checkpoint, state.options,
                                c.early_stopping_metric)
  evaluations = actions.Evaluations(evaluator.evaluate, [
      actions.log_eval,
      actions.EvalSummaries(writers["eval"], task.class_names), best,
      actions.EarlyStopping(best, c.early_stopping_patience)
  ])
  stop = actions.StopOnSignal(signals or actions.StopSignals(), state)
  progress = actions.Progress(
      plan.total_steps,
      c.batch_size,
      start=state.step,
      tty=None if run.chief else False)
  train_actions = [
      progress,
      actions.TrainSummaries(writers["train"]),
      actions.EvalEvery(plan.eval_due, evaluations),
      actions.SaveCheckpoints(plan.checkpoint_due, state.save), stop
  ]
  closing = (progress.close,) + tuple(w.flush for w in writers.values())
  return train_actions, evaluations, best, stop, closing


def _build(run, strategy, signals, saved):
  """The rest of `setup`, once the run's folder is this process's and its
  record (`run_record`) read."""
  run.config, run.task = inputs.resolve_tags(run.config, run.task, saved)
  saved, run.config, shuffle = _resumed(run.config, run.shared, saved)
  c, task = run.config, run.task
  preprocessor, encoder, route, rebuilt = encoder_setup.load_model(
      c, task, strategy, saved)
  data = inputs.resolve_data(c, run.task, run.out, saved, preprocessor, shuffle,
                             strategy.num_replicas_in_sync, rebuilt)
  plan = _plan(c, data.counts["train"]["rows_used"],
               data.layout.steps_per_epoch)
  logging.info(
      "Replicas: %d, jit_compile: %s, steps: %d (%d per epoch), warmup: %d; "
      "%s", strategy.num_replicas_in_sync, route.jit_compile, plan.total_steps,
      plan.steps_per_epoch, plan.warmup_steps, data.layout.describe())
  state = _state(c, strategy, encoder, plan, run.out, route)
  state.resume(run.shared.checkpoints, run.chief)
  _log_layer_rates(state.layer_rates)
  _write_config(run, plan, strategy, route, state.layer_rates, data)
  evaluator = _evaluator(c, strategy, state, task, data)
  train_actions, evaluations, best, stop, closing = _actions(
      c, task, run, plan, state, evaluator, signals)
  trainer = _trainer(c, strategy, state, route, data, plan, run)
  exporter = None
  if c.export and run.chief:
    exporter = export_lib.RunExporter(state, preprocessor, c, task, data.layout,
                                      run.out, strategy)
  return Job(
      run=run,
      data=data,
      plan=plan,
      state=state,
      trainer=trainer,
      evaluator=evaluator,
      evaluations=evaluations,
      best=best,
      actions=train_actions,
      stop=stop,
      after_training=closing + (trainer.close,),
      facts=finish_lib.RunFacts(
          start_step=state.step,
          total_steps=plan.total_steps,
          replicas=strategy.num_replicas_in_sync,
          route=route,
          layout=data.layout,
          counts=data.counts),
      exporter=exporter)


def setup(c, command="trainer.main", signals=None):
  """Resolves and builds everything for a run of Config `c` (validated).

  The chief holds `model_dir` for the run (`run_lock.Lock`, named after
  `command`) and appends the run's log lines to model_dir/train.log: call
  `Job.close()` (as `run` does) to give both back. `signals` (an entered
  `actions.StopSignals`) is what the loop's stop on a signal checks.
  """
  strategy, chief, shared, out = _start(c)
  run = Run(c, tasks.resolve(c), strategy, chief, shared, out)
  if chief:
    run.lock = run_lock.Lock(c.model_dir, command).__enter__()
  try:
    saved = run_record(shared)
    run.log = logs.open_run_log(out.log_file) if chief else None
    return _build(run, strategy, signals, saved)
  except BaseException:
    run.close()
    raise
