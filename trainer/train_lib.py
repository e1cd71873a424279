"""The outer loop: `setup(config) -> Run`, `train(run)`, `finish(run)`.

`setup` resolves everything once (the strategy and this process's role, the
run's locations, the handles and how they compute, the data and its counts,
the step plan, the training state restored from the newest intact
checkpoint) and hands out a `Run`. `train` runs loops of `steps_per_loop`
steps (one tf.function call each, `tf.range` around `strategy.run`) until
the last step, early stopping or a preemption; host work (logs, summaries,
evals, checkpoints, signals) happens only between loops. `finish` saves,
evaluates, restores the best model, tests, writes summary.json and exports.
`fit(config)` is the Python API: exactly what `python -m trainer.main` runs.

Restore order (one training state, one checkpoint): the newest intact
checkpoint in the run's checkpoint folder, else the pretrained encoder from
its handle with a fresh head.
"""

import dataclasses
import time

from absl import logging
import tensorflow as tf

from trainer import actions
from trainer import checkpoints
from trainer import config as config_lib
from trainer import distribute
from trainer import errors
from trainer import export as export_lib
from trainer import faults
from trainer import host
from trainer import input_pipeline
from trainer import model as model_lib
from trainer import optimization
from trainer import plan as plan_lib
from trainer import precision as precision_lib
from trainer import preprocessing
from trainer import run_dir
from trainer import train_state
from trainer import train_step


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
    return train_step.evaluate(self.eval_loop, self.eval_data(name))


@dataclasses.dataclass
class TrainResult:
  """What `train` saw: the last loop's loss, rollbacks, early stop and
  (examples, seconds) per loop."""

  train_loss: float = float("nan")
  recoveries: int = 0
  stopped_early: bool = False
  loop_times: list = dataclasses.field(default_factory=list)


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
  strategy = distribute.build_strategy(c.tpu, c.strategy)
  config_lib.check_replicas(c, strategy.num_replicas_in_sync)
  chief, task_id = distribute.worker_role(strategy)
  shared = run_dir.locations(c)
  out = shared if chief else run_dir.for_worker(c.model_dir, task_id)
  tf.io.gfile.makedirs(out.model_dir)
  return strategy, chief, shared, out


def prepare(c, strategy, encoder):
  """(the encoder prepared for its Route, the Route) of Config `c` on
  `strategy`: precision and XLA as `precision.choose` decides."""
  route = precision_lib.choose(
      c.precision,
      c.jit_compile,
      distribute.device_kind(strategy),
      model_lib.is_own_encoder(encoder),
      cpu_flags=host.cpu_flags(),
      encoder_handle=c.encoder_handle,
      xla_cpu_problem=host.xla_cpu_problem)
  return model_lib.prepare_encoder(encoder, route, strategy), route


def load_model(c, strategy):
  """The handles, checked against each other and the flags, the encoder
  prepared for its route; returns (preprocessor, encoder, route)."""
  preprocessor, encoder = model_lib.load(c.encoder_handle,
                                         c.preprocessor_handle, strategy,
                                         distribute.io_device(strategy),
                                         c.demo_cache_dir)
  model_lib.check_fit(encoder, preprocessor, c.seq_length,
                      c.preprocessor_handle)
  encoder, route = prepare(c, strategy, encoder)
  logging.info("%s", route.note)
  return preprocessor, encoder, route


def _data(c, out):
  """The splits and their row counts (cached in `out`)."""
  splits = input_pipeline.make_splits(c)
  counts = input_pipeline.count_splits(splits, c.max_bad_fraction,
                                       out.data_stats)
  for name in ("train", "validation"):
    if counts[name]["rows_used"] == 0:
      raise errors.TrainingError(
          f"the {name} split has no usable rows ({counts[name]}); check the "
          "data source flags, --label_map and --text_column/--label_column")
  return splits, counts


def _state(c, strategy, encoder, plan, out):
  return train_state.TrainState(
      strategy,
      encoder,
      num_classes=c.num_classes,
      dropout_rate=c.dropout_rate,
      seed=c.seed,
      schedule=optimization.WarmupLinearDecay(c.learning_rate, plan.total_steps,
                                              plan.warmup_steps),
      weight_decay=c.weight_decay,
      clip_norm=c.clip_norm,
      directory=out.checkpoints,
      keep=c.keep_checkpoints,
      io_device=distribute.io_device(strategy))


def _write_config(c, out, plan, strategy, route):
  run_dir.write_json(
      out.config_json,
      dict(
          config=dataclasses.asdict(c),
          plan=plan.durations(),
          replicas=strategy.num_replicas_in_sync,
          jit_compile=route.jit_compile,
          tensorflow=tf.__version__))


def setup(c):
  """Resolves and builds everything for a run of Config `c` (validated)."""
  strategy, chief, shared, out = _start(c)
  preprocessor, encoder, route = load_model(c, strategy)
  splits, counts = _data(c, out)
  plan = plan_lib.make_plan(c, counts["train"]["rows_used"])
  logging.info(
      "Replicas: %d, jit_compile: %s, steps: %d (%d per epoch), warmup: %d",
      strategy.num_replicas_in_sync, route.jit_compile, plan.total_steps,
      plan.steps_per_epoch, plan.warmup_steps)
  _write_config(c, out, plan, strategy, route)
  state = _state(c, strategy, encoder, plan, out)
  latest = checkpoints.resume_point(shared.checkpoints, chief)
  if latest:
    state.restore(latest)
    logging.info("Resumed from %s at step %d", latest, state.step)
  writers = {
      kind: tf.summary.create_file_writer(out.summary_writer_dir(kind))
      for kind in ("train", "eval")
  }
  best = actions.BestKeeper(out.best, state.checkpoint, state.options,
                            c.early_stopping_metric, c.early_stopping_patience)
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
              jit_compile=route.jit_compile)),
      eval_loop=train_step.make_eval_loop(
          strategy, train_step.make_eval_step(state.model)),
      evaluator=None,
      writers=writers,
      start_step=state.step)
  run.evaluator = actions.Evaluator(lambda: run.evaluate("validation"),
                                    writers["eval"], best)
  return run


def _roll_back(run, step, stop, position, loss, grad_norm, recoveries):
  """After a non-finite loss or gradient norm in steps step..stop: back to
  the newest checkpoint, past the bad loop's batches; returns the new data
  iterator. No checkpoint was written for the bad steps (detection is
  before the loop boundary's save)."""
  c, state = run.config, run.state
  end = position + stop - step
  where = (f"non-finite loss {loss} / grad norm {grad_norm} in steps "
           f"{step}..{stop} (batches {position}..{end})")
  latest = tf.train.latest_checkpoint(state.manager.directory)
  if recoveries > c.max_nan_recoveries or latest is None:
    reason = (f"gave up after {recoveries - 1} rollback(s) "
              f"(--max_nan_recoveries={c.max_nan_recoveries})"
              if latest else "no checkpoint to roll back to")
    raise errors.TrainingError(
        f"{where}; no checkpoint was written for them; {reason}. Lower "
        "--learning_rate or check the data.")
  state.restore(latest)
  state.skip_to(end)
  logging.warning(
      "%s: rolled back to %s and skipping to batch %d (recovery %d of %d)",
      where, latest, end, recoveries, c.max_nan_recoveries)
  return run.train_data(state.data_position)


def _between_loops(run, progress, signals, stop, loss, grad_norm, speed):
  """Log, summaries, eval, checkpoint, signals after the loop that ended at
  `stop`; returns True when early stopping ends the run."""
  c, state = run.config, run.state
  lr = float(state.optimizer.schedule(stop - 1))  # the loop's last update
  progress.update(stop, loss, lr, speed)
  actions.write_scalars(
      run.writers["train"], stop, {
          "train/loss": loss,
          "train/learning_rate": lr,
          "train/grad_norm": grad_norm,
          "train/examples_per_second": speed
      })
  if run.plan.eval_due(stop) and run.evaluator(stop)[1]:
    logging.info("Early stopping at step %d: no better %s in %d evals", stop,
                 c.early_stopping_metric, c.early_stopping_patience)
    state.save_unless_saved()
    return True
  if run.plan.checkpoint_due(stop):
    state.save(stop)
  signals.check(state, stop)
  return False


def train(run):
  """The loops until the last step; returns a TrainResult.

  A non-finite loss or gradient norm is caught at the loop boundary, before
  any save: the run rolls back to the newest checkpoint, skips the batches
  of the bad loop, and goes on, at most --max_nan_recoveries times.
  """
  state, plan, result = run.state, run.plan, TrainResult()
  progress = actions.Progress(plan.total_steps, run.config.batch_size)
  # The chief profiles; a worker's trace would be its own host's.
  profiler = actions.Profiler(plan.profile if run.chief else None,
                              run.out.summary_writer_dir("train"))
  iterator = run.train_data(state.data_position)
  with actions.StopSignals() as signals:
    try:
      while state.step < plan.total_steps:
        step, position = state.step, state.data_position
        stop = plan.next_stop(step)
        host.keep_malloc_fast()
        profiler.before_loop(step)
        started = time.perf_counter()
        loss, grad_norm = run.train_loop(iterator, tf.constant(stop - step))
        loss, grad_norm = float(loss), float(grad_norm)
        seconds = time.perf_counter() - started
        profiler.after_loop(stop)
        if faults.nan_in(position, position + stop - step):
          loss = float("nan")
        if not actions.finite(loss, grad_norm):
          result.recoveries += 1
          iterator = _roll_back(run, step, stop, position, loss, grad_norm,
                                result.recoveries)
          continue
        result.train_loss = loss
        examples = (stop - step) * run.config.batch_size
        result.loop_times.append((examples, seconds))
        if _between_loops(run, progress, signals, stop, loss, grad_norm,
                          examples / seconds):
          result.stopped_early = True
          break
    finally:
      profiler.close()
  return result


def _summary(run, result, metrics, final_step):
  c, counts = run.config, run.counts
  best = run.evaluator.best.state
  summary = dict(
      final_step=final_step,
      best_step=best["step"],
      best_metric={c.early_stopping_metric: best["value"]},
      stopped_early=result.stopped_early,
      start_step=run.start_step,
      train_loss=result.train_loss,
      eval_accuracy=metrics["accuracy"],
      eval_loss=metrics["loss"],
      eval_examples=metrics["examples"],
      examples_per_second=actions.throughput(result.loop_times),
      examples={name: counts[name]["rows_used"] for name in counts},
      nan_recoveries=result.recoveries,
      replicas=run.strategy.num_replicas_in_sync,
      total_steps=run.plan.total_steps)
  if counts.get("test", {}).get("rows_used"):
    test = run.evaluate("test")
    summary.update(test_accuracy=test["accuracy"], test_loss=test["loss"])
  summary.update(input_pipeline.flat_counts(counts))
  return summary


def _export(run):
  """The export of the model the run hands over (step `run.state.step`)."""
  target = run.out.export_dir(run.state.step)
  if export_lib.is_complete(target):
    logging.info("Export for step %d exists already: %s", run.state.step,
                 target)
    return target
  # Rebuilt on the host from the checkpoint just written, so nothing of the
  # accelerator's state is saved; TPU hosts write through localhost.
  return export_lib.export(
      run.out.model_dir, io_device=distribute.io_device(run.strategy))


def finish(run, result):
  """Saves, evaluates, restores the best model, tests, writes summary.json
  and exports; returns the summary (the dict written to summary.json)."""
  state, best = run.state, run.evaluator.best
  state.save_unless_saved()
  final_step = state.step
  metrics, _ = run.evaluator(final_step)
  if best.state["step"] not in (None, final_step):
    # The model the run hands over (and exports) is the best one.
    state.restore(best.manager.latest_checkpoint)
    logging.info("Restored the best checkpoint %s (step %d)",
                 best.manager.latest_checkpoint, state.step)
    metrics = run.evaluate("validation")
  summary = _summary(run, result, metrics, final_step)
  for writer in run.writers.values():
    writer.flush()
  run_dir.write_json(run.out.summary_json, summary)
  if run.config.export and run.chief:
    summary["export_dir"] = _export(run)
    run_dir.write_json(run.out.summary_json, summary)
  if not run.chief:
    tf.io.gfile.rmtree(run.out.model_dir)
  logging.info("Done at step %d: eval accuracy %.4f, eval loss %.4f",
               state.step, summary["eval_accuracy"], summary["eval_loss"])
  return summary


def run(c):
  """Validates Config `c` (completed: `config.complete`), trains,
  evaluates, exports; returns the summary (also model_dir/summary.json)."""
  config_lib.validate(c)
  the_run = setup(c)
  return finish(the_run, train(the_run))


def fit(config):
  """Trains as `python -m trainer.main` would with the fields of `config`
  as its flags; returns the summary dict written to summary.json.

  Fields left at their defaults are completed as unset flags are (the
  demo's defaults for a demo run, Vertex AI's output locations). Raises the
  same `trainer.errors.UserError`s, with the same messages, as the command
  prints; `Preempted` when SIGTERM/SIGINT stopped it (rerun to resume).
  """
  if logging.get_verbosity() < logging.INFO:
    logging.set_verbosity(logging.INFO)  # absl's default outside app.run
  return run(config_lib.complete(config))
