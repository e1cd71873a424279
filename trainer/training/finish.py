"""The end of a run: `finish(result, ...)` after the last loop.

It saves the final step, evaluates the final model (reusing the last
loop's eval when they coincide), hands over the best checkpoint's model
when an earlier eval was better, tests it, writes summary.json and
exports. Every input is explicit: the training state, the evaluator and
its evaluations, the best checkpoint, the controller's `TrainResult` (loop
times, NaN recoveries, early stop), `RunFacts` fixed at set-up, and an
exporter (`serving.export.RunExporter`) that owns the serving copy.

With --ema_decay the evals (and the export) use the moving average of the
weights; summary.json then also holds the raw weights' metrics
(`eval_raw_*`), measured on the same model, for a paired comparison.
"""

import dataclasses

from absl import logging
import tensorflow as tf

from trainer.data import counts as counts_lib
from trainer.runtime import run_dir
from trainer.training import actions
from trainer.training import controller


@dataclasses.dataclass(frozen=True)
class RunFacts:
  """What summary.json states about a run beside its metrics, known once
  it is set up.

  Attributes:
    start_step: the step it started (or resumed) at.
    total_steps: the plan's last step.
    replicas: replicas in sync.
    route: its `precision.Route` (precision, XLA, the note).
    layout: its `layout.Layout` (the shapes its steps are counted by).
    counts: {split: `counts.count` record} of its data.
  """

  start_step: int
  total_steps: int
  replicas: int
  route: object
  layout: object
  counts: dict


def prefixed(prefix, metrics):
  """The scalar metrics of an eval under `prefix` ("eval_", "test_")."""
  return {f"{prefix}{k}": v for k, v in actions.scalar_metrics(metrics).items()}


def summary(facts, result, metrics, best, *, final_step, steps_per_shape,
            loss_scale):
  """summary.json of a finished run (its test metrics added by `finish`).

  Args:
    facts: the run's `RunFacts`.
    result: `controller.TrainResult` of its loops.
    metrics: the eval of the model it hands over.
    best: its `actions.BestCheckpoint`.
    final_step: the last step trained.
    steps_per_shape: {bucket length, or in shared rows row count: steps}
      over the whole run (`Layout.shapes`).
    loss_scale: {"loss_scale/<name>": value} (float16's loss scaling).
  """
  counts = facts.counts
  out = dict(
      final_step=final_step,
      best_step=best.step,
      best_metric={best.metric: best.state["value"]},
      stopped_early=result.stopped_early,
      start_step=facts.start_step,
      train_loss=result.train_loss,
      eval_examples=metrics["examples"],
      examples_per_second=controller.throughput(result.loop_times),
      examples={name: counts[name]["rows_used"] for name in counts},
      nan_recoveries=result.recoveries,
      replicas=facts.replicas,
      total_steps=facts.total_steps,
      precision=facts.route.precision,
      buckets=list(facts.layout.lengths))
  steps = {str(k): v for k, v in sorted(steps_per_shape.items())}
  if facts.layout.rows:
    out.update(shared_rows=list(facts.layout.shapes), steps_per_rows=steps)
  else:
    out["steps_per_bucket"] = steps
  out.update(prefixed("eval_", metrics))
  out.update({k.split("/")[1]: v for k, v in loss_scale.items()})
  out.update(counts_lib.flat_counts(counts))
  return out


def _handed_over(state, evaluator, evaluations, best):
  """The eval of the model the run hands over (and exports): the final one
  (the last loop's eval when it fell on this step), or when an earlier
  eval was better the best checkpoint's, restored into `state`."""
  try:
    metrics = evaluations.at(state.step)
  except controller.StopTraining:
    # Early stopping's patience ran out at the final eval: nothing is left
    # to stop. The eval is kept before its followers run.
    metrics = evaluations.at(state.step)
  if best.step not in (None, state.step):
    state.restore(best.latest)
    logging.info("Restored the best checkpoint %s (step %d)", best.latest,
                 state.step)
    metrics = evaluator.evaluate()
  return metrics


def finish(result,
           state,
           evaluator,
           evaluations,
           best,
           facts,
           *,
           out,
           stop,
           exporter=None,
           chief=True):
  """Saves, evaluates, restores the best model, tests, writes summary.json
  and exports; returns the summary (the dict written to summary.json).

  Args:
    result: `controller.TrainResult` of the run's loops.
    state: the `TrainState` (saved, read, restored to the best checkpoint).
    evaluator: the run's `Evaluator` (validation and test splits).
    evaluations: `actions.Evaluations` (the final eval reuses the last
      loop's when they fall on the same step).
    best: `actions.BestCheckpoint`.
    facts: `RunFacts`.
    out: this process's `run_dir.Locations` (summary.json; a worker's
      private folder is removed at the end).
    stop: `actions.StopOnSignal`: a signal that came meanwhile stops the
      run before its export, with every checkpoint saved and none written
      from the best model restored (the rerun only evaluates and exports).
    exporter: () -> the export folder of the model `state` holds; None
      when the run exports nothing (--export=false, a worker).
    chief: this process writes the run's folder.
  """
  state.save_unless_saved()
  final_step = state.step
  # Counted in the state: read before the best checkpoint replaces it.
  steps_per_shape = state.steps_per_shape(facts.layout.shapes)
  metrics = _handed_over(state, evaluator, evaluations, best)
  written = summary(
      facts,
      result,
      metrics,
      best,
      final_step=final_step,
      steps_per_shape=steps_per_shape,
      loss_scale=state.loss_scale_scalars())
  if state.has_average:  # the same model's raw weights, for comparison
    written.update(prefixed("eval_raw_", evaluator.evaluate(averaged=False)))
  if facts.counts.get("test", {}).get("rows_used"):
    written.update(prefixed("test_", evaluator.evaluate_split("test")))
  run_dir.write_json(out.summary_json, written)
  stop.check(final_step, save=False)  # saved above; the best may be loaded
  if exporter:
    written["export_dir"] = exporter()
    run_dir.write_json(out.summary_json, written)
  if not chief:
    tf.io.gfile.rmtree(out.model_dir)
  logging.info(
      "Done at step %d: %s", state.step,
      ", ".join(f"eval {k} {v:.4f}"
                for k, v in actions.scalar_metrics(metrics).items()))
  return written
