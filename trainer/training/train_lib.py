"""A whole run: `run(config)` (the command), `fit(config)` (Python).

`run` sets the run up (`launch.setup`: everything resolved once, a `Job`),
trains it (`controller.train`: loops of `steps_per_loop` steps, one
tf.function call each, and the between-loop actions) and finishes it
(`finish.finish`: saves, evaluates, restores the best model, tests, writes
summary.json and exports the live model). `fit` is the Python API: the
same run from a Config.
"""

from absl import logging

from trainer.foundation import checks
from trainer.foundation import config as config_lib
from trainer.foundation import errors
from trainer.training import actions
from trainer.training import controller
from trainer.training import finish as finish_lib
from trainer.training import launch


def train(job):
  """The loops of a set-up Job until its last step, an early stop or a
  signal (`Preempted`); returns the `controller.TrainResult`."""
  try:
    job.stop.check(job.trainer.step)  # a signal that came during setup
    return controller.train(job.trainer, job.plan, job.actions,
                            job.run.config.max_nan_recoveries)
  finally:
    job.end_training()


def finish(job, result):
  """`finish.finish` of a set-up Job: saves, evaluates, restores the best
  model, tests, writes summary.json, exports; returns the summary."""
  return finish_lib.finish(
      result,
      job.state,
      job.evaluator,
      job.evaluations,
      job.best,
      job.facts,
      out=job.run.out,
      stop=job.stop,
      exporter=job.exporter,
      chief=job.run.chief)


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
    job = launch.setup(c, command, signals)
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
