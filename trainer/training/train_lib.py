"""A whole run: `run(config)` (the command), `fit(config)` (Python).

`run` sets the run up (`launch.setup`: everything resolved once), trains it
(`controller.train`: loops of `steps_per_loop` steps, one tf.function call
each, and the between-loop actions) and finishes it (`finish`: saves,
evaluates, restores the best model, tests, writes summary.json and exports
the live model). `fit` is the Python API: the same run from a Config.
"""

from absl import logging
import tensorflow as tf

from trainer.data import counts as counts_lib
from trainer.encoders import bert
from trainer.encoders import handles
from trainer.foundation import checks
from trainer.foundation import config as config_lib
from trainer.foundation import errors
from trainer.runtime import distribute
from trainer.runtime import run_dir
from trainer.serving import export as export_lib
from trainer.training import actions
from trainer.training import controller
from trainer.training import launch

# The set-up, under the loop's name too.
setup = launch.setup


def train(job):
  """The loops of a set-up Job until its last step, an early stop or a
  signal (`Preempted`); returns the `controller.TrainResult`."""
  job.stop.check(job.trainer.step)  # a signal that came during setup
  try:
    return controller.train(job.trainer, job.plan, job.actions,
                            job.run.config.max_nan_recoveries)
  finally:
    job.actions[0].close()  # the progress bar
    getattr(job.trainer, "close", lambda: None)()  # the profiler


def summarize(job, result, metrics, final_step, steps_per_bucket):
  """The summary.json of a finished run (test metrics added by `finish`);
  `steps_per_bucket` {bucket length: steps} over the whole run."""
  best, counts = job.best, job.counts
  summary = dict(
      final_step=final_step,
      best_step=best.step,
      best_metric={best.metric: best.state["value"]},
      stopped_early=result.stopped_early,
      start_step=job.start_step,
      train_loss=result.train_loss,
      eval_examples=metrics["examples"],
      examples_per_second=controller.throughput(result.loop_times),
      examples={name: counts[name]["rows_used"] for name in counts},
      nan_recoveries=result.recoveries,
      replicas=job.strategy.num_replicas_in_sync,
      total_steps=job.plan.total_steps,
      precision=job.route.precision,
      buckets=list(job.buckets),
      steps_per_bucket={
          str(k): v for k, v in sorted(steps_per_bucket.items())
      })
  summary.update(_prefixed("eval_", metrics))
  summary.update({
      k.split("/")[1]: v for k, v in job.state.loss_scale_scalars().items()
  })
  summary.update(counts_lib.flat_counts(counts))
  return summary


def _prefixed(prefix, metrics):
  return {f"{prefix}{k}": v for k, v in actions.scalar_metrics(metrics).items()}


def _serving_model(job):
  """The live model to export: itself, or on a TPU (whose variables live
  there) a copy of its weights on the host."""
  model = job.state.model
  if not distribute.is_tpu(job.strategy):
    return model
  if isinstance(model.encoder, bert.NativeEncoder):
    encoder = model.encoder.host_twin()
  else:
    c = job.run.config
    encoder = handles.load_on_host(c.encoder_handle,
                                   distribute.io_device(job.strategy),
                                   c.demo_cache_dir)
  return export_lib.host_copy(model, encoder)


def _export(job):
  """The export of the model the run hands over (step `job.state.step`)."""
  target = job.run.out.export_dir(job.state.step)
  if export_lib.is_complete(target):
    logging.info("Export for step %d exists already: %s", job.state.step,
                 target)
    return target
  c = job.run.config
  with job.state.averaged():  # --ema_decay: the average is what serves
    export_lib.write(
        _serving_model(job), job.preprocessor, c.seq_length, job.run.task,
        target, job.state.io_device, job.buckets)
  logging.info("Exported the model of step %d to %s", job.state.step, target)
  return target


def finish(job, result):
  """Saves, evaluates, restores the best model, tests, writes summary.json
  and exports; returns the summary (the dict written to summary.json).

  A signal that came meanwhile stops the run before its export, with every
  checkpoint saved: the rerun only evaluates and exports.
  """
  state, best, out = job.state, job.best, job.run.out
  state.save_unless_saved()
  final_step = state.step
  # Counted in the state: read before the best checkpoint replaces it.
  steps_per_bucket = dict(getattr(job.trainer, "steps_per_length", {}))
  metrics = job.evaluations.at(final_step)
  if best.step not in (None, final_step):
    # The model the run hands over (and exports) is the best one.
    state.restore(best.latest)
    logging.info("Restored the best checkpoint %s (step %d)", best.latest,
                 state.step)
    metrics = job.evaluator.evaluate()
  summary = summarize(job, result, metrics, final_step, steps_per_bucket)
  if job.counts.get("test", {}).get("rows_used"):
    summary.update(_prefixed("test_", job.evaluator.evaluate_split("test")))
  for writer in job.writers.values():
    writer.flush()
  run_dir.write_json(out.summary_json, summary)
  job.stop.check(final_step)
  if job.run.config.export and job.run.chief:
    summary["export_dir"] = _export(job)
    run_dir.write_json(out.summary_json, summary)
  if not job.run.chief:
    tf.io.gfile.rmtree(out.model_dir)
  logging.info(
      "Done at step %d: %s", state.step,
      ", ".join(f"eval {k} {v:.4f}"
                for k, v in actions.scalar_metrics(metrics).items()))
  return summary


def run(c, command="trainer.main", exiting=False):
  """Validates Config `c` (completed: `config.complete`), trains,
  evaluates, exports; returns the summary (also model_dir/summary.json).

  SIGTERM/SIGINT at any point from here on stops the run at the next safe
  point with every step trained so far saved (`Preempted`, exit code 75).
  `exiting`: the process ends with the run (the command), so a second
  signal while it stops changes nothing (a second Ctrl-C exited 130).
  """
  checks.validate(c)
  with actions.StopSignals(exiting=exiting) as signals:
    job = setup(c, command, signals)
    try:
      return finish(job, train(job))
    except BaseException as e:
      if job.run.log:  # the terminal gets it from the boundary
        job.run.log.note(f"stopped: {errors.first_line(e) or type(e).__name__}")
      raise
    finally:
      job.close()


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
