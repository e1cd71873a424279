"""The outer loop: `train(run)` and `finish(run)`; `run(config)`, `fit(config)`.

A run is launched by `setup(config) -> Run` (`trainer.launch`: everything
resolved once). `train` runs loops of `steps_per_loop` steps (one
tf.function call each, `tf.range` around `strategy.run`) until the last
step, early stopping or a preemption; host work (logs, summaries, evals,
checkpoints, signals) happens only between loops. `finish` saves,
evaluates, restores the best model, tests, writes summary.json and exports.
`run(config)` is what `python -m trainer.main` runs; `fit(config)` is the
Python API, the same run from a Config.
"""

import dataclasses
import time

from absl import logging
import tensorflow as tf

from trainer.base import checks
from trainer.loop import actions
from trainer.base import config as config_lib
from trainer.base import errors
from trainer import export as export_lib
from trainer.loop import faults
from trainer.base import host
from trainer.data import input_pipeline
from trainer.loop import launch
from trainer.base import run_dir

# The Run and its set-up (trainer.launch), under the loop's name too.
Run = launch.Run
setup = launch.setup
prepare = launch.prepare
load_model = launch.load_model


@dataclasses.dataclass
class TrainResult:
  """What `train` saw: the last loop's loss, rollbacks, early stop and
  (examples, seconds) per loop."""

  train_loss: float = float("nan")
  recoveries: int = 0
  stopped_early: bool = False
  loop_times: list = dataclasses.field(default_factory=list)


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
  scalars = {
      "train/loss": loss,
      "train/learning_rate": lr,
      "train/grad_norm": grad_norm,
      "train/examples_per_second": speed
  }
  scalars.update(_loss_scale(state))
  actions.write_scalars(run.writers["train"], stop, scalars)
  if run.plan.eval_due(stop) and run.evaluator(stop)[1]:
    logging.info("Early stopping at step %d: no better %s in %d evals", stop,
                 c.early_stopping_metric, c.early_stopping_patience)
    state.save_unless_saved()
    return True
  if run.plan.checkpoint_due(stop):
    state.save(stop)
  signals.check(state, stop)
  return False


def _loss_scale(state):
  """float16's loss scale and the steps it skipped so far ({} otherwise)."""
  if state.loss_scale is None:
    return {}
  return {
      "train/loss_scale": float(state.loss_scale.scale.numpy()),
      "train/skipped_steps": int(state.loss_scale.skipped.numpy())
  }


def _loop(run, iterator, profiler):
  """Runs the loop that starts at the current step; returns (stop, mean
  loss, mean gradient norm, seconds)."""
  state = run.state
  step, position = state.step, state.data_position
  stop = run.plan.next_stop(step)
  host.keep_malloc_fast()
  profiler.before_loop(step)
  started = time.perf_counter()
  loss, grad_norm = run.train_loop(iterator, tf.constant(stop - step))
  loss, grad_norm = float(loss), float(grad_norm)
  seconds = time.perf_counter() - started
  profiler.after_loop(stop)
  if faults.nan_in(position, position + stop - step):
    loss = float("nan")
  return stop, loss, grad_norm, seconds


def train(run, signals):
  """The loops until the last step; returns a TrainResult.

  `signals` (`actions.StopSignals`, entered) is checked before the first
  loop and after each. A non-finite loss or gradient norm is caught at the
  loop boundary, before any save: the run rolls back to the newest
  checkpoint, skips the batches of the bad loop, and goes on, at most
  --max_nan_recoveries times.
  """
  state, plan, result = run.state, run.plan, TrainResult()
  signals.check(state, state.step)  # one that came during setup
  # The chief profiles; a worker's trace would be its own host's.
  profiler = actions.Profiler(plan.profile if run.chief else None,
                              run.out.summary_writer_dir("train"))
  iterator = run.train_data(state.data_position)
  progress = actions.Progress(
      plan.total_steps,
      run.config.batch_size,
      start=state.step,
      tty=None if run.chief else False)
  try:
    while state.step < plan.total_steps:
      step, position = state.step, state.data_position
      stop, loss, grad_norm, seconds = _loop(run, iterator, profiler)
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
    progress.close()
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
      eval_examples=metrics["examples"],
      examples_per_second=actions.throughput(result.loop_times),
      examples={name: counts[name]["rows_used"] for name in counts},
      nan_recoveries=result.recoveries,
      replicas=run.strategy.num_replicas_in_sync,
      total_steps=run.plan.total_steps,
      precision=run.route.precision)
  summary.update({
      f"eval_{k}": v for k, v in actions.scalar_metrics(metrics).items()
  })
  summary.update({
      k.split("/")[1]: v for k, v in _loss_scale(run.state).items()
  })
  if counts.get("test", {}).get("rows_used"):
    test = run.evaluate("test")
    summary.update({
        f"test_{k}": v for k, v in actions.scalar_metrics(test).items()
    })
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
  return export_lib.export(run.out.model_dir, io_device=run.state.io_device)


def finish(run, result, signals):
  """Saves, evaluates, restores the best model, tests, writes summary.json
  and exports; returns the summary (the dict written to summary.json).

  A signal (`signals`) that came meanwhile stops the run before its export,
  with every checkpoint saved: the rerun only evaluates and exports.
  """
  state, best = run.state, run.evaluator.best
  state.save_unless_saved()
  final_step = state.step
  metrics, _ = run.evaluator(final_step)
  if best.state["step"] not in (None, final_step):
    # The model the run hands over (and exports) is the best one.
    state.restore(best.manager.latest_checkpoint)
    logging.info("Restored the best checkpoint %s (step %d)",
                 best.manager.latest_checkpoint, state.step)
    metrics = run.evaluate_validation()
  summary = _summary(run, result, metrics, final_step)
  for writer in run.writers.values():
    writer.flush()
  run_dir.write_json(run.out.summary_json, summary)
  signals.check(state, final_step)
  if run.config.export and run.chief:
    summary["export_dir"] = _export(run)
    run_dir.write_json(run.out.summary_json, summary)
  if not run.chief:
    tf.io.gfile.rmtree(run.out.model_dir)
  logging.info(
      "Done at step %d: %s", state.step,
      ", ".join(f"eval {k} {v:.4f}"
                for k, v in actions.scalar_metrics(metrics).items()))
  return summary


def run(c, command="trainer.main"):
  """Validates Config `c` (completed: `config.complete`), trains,
  evaluates, exports; returns the summary (also model_dir/summary.json).

  SIGTERM/SIGINT at any point from here on stops the run at the next safe
  point with every step trained so far saved (`Preempted`, exit code 75).
  """
  checks.validate(c)
  with actions.StopSignals() as signals:
    the_run = setup(c, command)
    try:
      return finish(the_run, train(the_run, signals), signals)
    except BaseException as e:
      if the_run.log:  # the terminal gets it from the boundary
        the_run.log.note(f"stopped: {errors.first_line(e) or type(e).__name__}")
      raise
    finally:
      the_run.close()


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
  try:
    return run(config_lib.complete(config), command="trainer.fit (Python)")
  except Exception as e:  # pylint: disable=broad-except
    user_error = errors.translate(e)
    if user_error is None or user_error is e:
      raise
    raise user_error from e
