"""One run's training state: the replicated model, AdamW, the data position,
their checkpoint and its manager.

Everything a step depends on is either checkpointed here (weights, AdamW
slots and step, `data_skip`, the encoder's dropout generator among its
variables) or a pure function of (seed, step), so a run resumed from a
checkpoint continues exactly as an uninterrupted one.
"""

import contextlib

from absl import logging
import tensorflow as tf

from trainer.foundation import buckets
from trainer.foundation import errors
from trainer.model import checkpoints
from trainer.model import classifier as model_lib
from trainer.model import layer_decay as layer_decay_lib
from trainer.model import optimization


def _counter(name, shape):
  """An int64 counter of the run, kept in its checkpoint: zeros of `shape`,
  one value for all replicas (the host sets it between loops)."""
  return tf.Variable(
      tf.zeros(shape, tf.int64),
      trainable=False,
      name=name,
      aggregation=tf.VariableAggregation.ONLY_FIRST_REPLICA)


class TrainState:
  """The model, optimizer and data position of a run, and their checkpoint.

  Build it under nothing: it enters `strategy.scope()` itself.
  """

  def __init__(self,
               strategy,
               encoder,
               *,
               num_classes,
               dropout_rate,
               seed,
               pooling="cls",
               schedule,
               weight_decay,
               clip_norm,
               directory,
               keep,
               layer_decay=1.0,
               loss_scaling=False,
               io_device=None,
               ema_decay=0.0):
    """Creates the state.

    Args:
      strategy, encoder: the run's, its encoder `model.prepare_encoder`d.
      num_classes, dropout_rate, seed, pooling: the head (`model.Classifier`).
      schedule, weight_decay, clip_norm, layer_decay: AdamW's and the
        layer-wise rate decay's (`optimization`, `layer_decay`; 1 = off).
      loss_scaling: keep float16's `optimization.LossScale` (checkpointed).
      ema_decay: keep a moving average of the weights (`averaged`; 0 off).
      directory, keep: where this process writes its rolling checkpoints,
        how many it keeps.
      io_device: where the checkpoint files are read and written (a TPU's
        host; `distribute.io_device`).
    """
    with strategy.scope():
      self.model = model_lib.Classifier(encoder, num_classes, dropout_rate,
                                        seed, pooling)
      factors, self.layer_rates = layer_decay_lib.multipliers(
          encoder.trainable_variables, (self.model.kernel, self.model.bias),
          layer_decay)
      self.optimizer = optimization.AdamW(
          self.model.trainable_variables,
          schedule,
          weight_decay=weight_decay,
          clip_norm=clip_norm,
          rate_multipliers=factors,
          ema_decay=ema_decay)
      # Batches skipped after non-finite losses (position = step + these).
      self.data_skip = _counter("data_skip", [])
      self.loss_scale = optimization.LossScale() if loss_scaling else None
    # Steps per `Layout.shapes` (an older name), on the host: no collective.
    self.bucket_steps = _counter("bucket_steps", [buckets.MAX_BUCKETS])
    self._encoder = encoder  # for a checkpoint of an older layout
    self.checkpoint = checkpoints.layout(self.model, encoder, self.optimizer,
                                         self.data_skip, self.loss_scale,
                                         self.bucket_steps)
    self.io_device = io_device
    self.options = tf.train.CheckpointOptions(experimental_io_device=io_device)
    self.manager = tf.train.CheckpointManager(
        self.checkpoint,
        directory,
        max_to_keep=keep,
        step_counter=self.optimizer.iterations)

  @property
  def step(self):
    return int(self.optimizer.iterations.numpy())

  @property
  def data_position(self):
    """Batches consumed from the training stream (steps + skipped)."""
    return self.step + int(self.data_skip.numpy())

  def loss_scale_scalars(self):
    """float16's loss scale and the steps it skipped so far, as train
    summaries ({} for the other precisions)."""
    if self.loss_scale is None:
      return {}
    return {
        "train/loss_scale": float(self.loss_scale.scale.numpy()),
        "train/skipped_steps": int(self.loss_scale.skipped.numpy())
    }

  def save(self, step):
    return self.manager.save(checkpoint_number=step, options=self.options)

  def save_unless_saved(self):
    """Saves at the current step unless the newest checkpoint is for it."""
    latest = self.manager.latest_checkpoint
    if latest is None or not latest.endswith(f"-{self.step}"):
      self.save(self.step)

  def restore(self, path):
    """Restores the checkpoint at prefix `path`. One written without a loss
    scale (another precision) restores into a float16 run too: the scale
    starts afresh; one written before the steps per bucket were kept
    counts them from here."""
    checkpoint = self.checkpoint
    loss_scale, bucket_steps = self.loss_scale, self.bucket_steps
    if loss_scale is not None and not checkpoints.has_loss_scale(path):
      logging.info(
          "%s has no loss scale (written in another precision): "
          "float16 starts at scale %g", path, float(loss_scale.scale.numpy()))
      loss_scale = None
    if not checkpoints.holds(path, "bucket_steps"):
      bucket_steps = None
      self.bucket_steps.assign(tf.zeros_like(self.bucket_steps))
    if loss_scale is not self.loss_scale or (bucket_steps
                                             is not self.bucket_steps):
      checkpoint = checkpoints.layout(self.model, self._encoder, self.optimizer,
                                      self.data_skip, loss_scale, bucket_steps)
    checkpoint.restore(
        path, options=self.options).assert_existing_objects_matched()

  @contextlib.contextmanager
  def averaged(self):
    """The model holds the moving average of its weights inside (with
    --ema_decay; else it is left as it is): what evals and exports use.
    Nothing may save or train inside."""
    if not self.optimizer.ema:
      yield
      return
    self.optimizer.swap_average()
    try:
      yield
    finally:
      self.optimizer.swap_average()

  @property
  def has_average(self):
    """Keeps a moving average of the weights (--ema_decay)."""
    return bool(self.optimizer.ema)

  def steps_per_shape(self, shapes):
    """{shape: steps trained at it} for the run's `shapes` (`Layout.shapes`:
    bucket lengths, or row counts), its whole history (a checkpoint from
    before they were counted: since the resume)."""
    counts = self.bucket_steps.numpy()
    return {b: int(counts[i]) for i, b in enumerate(shapes) if counts[i]}

  def add_shape_steps(self, steps):
    """Counts `steps` ({index in the run's shapes: steps}) as trained."""
    counts = [0] * buckets.MAX_BUCKETS
    for index, n in steps.items():
      counts[index] += n
    self.bucket_steps.assign_add(tf.constant(counts, tf.int64))

  def resume(self, directory, chief=True):
    """Restores the newest intact checkpoint of `directory`, if any (the
    restore order: `checkpoints.resume_point`)."""
    latest = checkpoints.resume_point(directory, chief)
    if not latest:
      return
    try:
      self.restore(latest)
    except (ValueError, AssertionError, tf.errors.OpError) as e:
      raise errors.CheckpointError(
          f"{latest} does not fit this model ({errors.first_line(e)}): it "
          "was written by another encoder or head. Use a new --model_dir, or "
          "the handles and flags of that run; nothing was changed") from None
    logging.info("Resumed from %s at step %d", latest, self.step)

  def skip_to(self, position):
    """Makes the data position `position` at the current step."""
    self.data_skip.assign(position - self.step)
