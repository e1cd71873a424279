"""Export a trained classifier or tagger as a SavedModel that serves raw
strings.

One route for every export: `write(model, preprocessor, seq_length, task,
export_dir)` saves a classifier (`finish` hands it the run's live model,
just restored to its best checkpoint); `export_run(model_dir)` (`python -m
trainer.export`, `trainer.export(...)`) rebuilds a run's classifier on the
host from its folder (`run_folder`: config.json and a checkpoint) and calls
the same function; `exported` loads an export back. The export,
<export_base_dir>/<step>/, has the signatures

    serving_default(text: [batch] tf.string) ->
        probabilities [batch, num_classes] float32, class_ids [batch] int32,
        class_names [batch] tf.string
    preprocess(text) -> input_word_ids / input_mask / input_type_ids int32
    serve_shared_rows(text) -> as serving_default, several texts a row
        (only where the encoder is this project's, rebuilt in Python: what
        `trainer.predict` and `trainer.evaluate` use when it is there)

A sentence-pair model's signatures take `text` and `text_pair` (both
[batch] tf.string); a regression model's (`--num_classes=1`) returns
`scores` [batch] float32 instead. A tagging run's export tags each word of
raw text and returns its entities (`trainer.serving.tagging`).

It holds the preprocessor (same cleaning and tokenization as training), the
encoder and the head, so it loads with `tf.saved_model.load` and
`import tensorflow_text` alone. It is written to a temporary folder and
renamed into place: a crash never leaves a half model under the final name.
"""

import dataclasses

from absl import logging
import tensorflow as tf

from trainer.data import input_pipeline
from trainer.data import preprocessing
from trainer.data import row_layout
from trainer.encoders import handles
from trainer.encoders import native
from trainer.foundation import errors
from trainer.foundation import tasks
from trainer.model import classifier as model_lib
from trainer.runtime import distribute
from trainer.runtime import run_dir
from trainer.serving import exported
from trainer.serving import run_folder
from trainer.serving import tagging

ExportError = errors.ExportError

_TEXT = tf.TensorSpec([None], tf.string, name="text")
_PAIR = (_TEXT, tf.TensorSpec([None], tf.string, name="text_pair"))


class ServingModule(tf.Module):
  """Preprocessor + model behind string signatures: `serve` and
  `preprocess` take `text`, or `text` and `text_pair` (`pairs`)."""

  def __init__(self,
               preprocessor,
               model,
               seq_length,
               class_names,
               pairs=False,
               regression=False,
               buckets=None):
    super().__init__(name="serving")
    self.preprocessor = preprocessor
    self.model = model
    self._pack = bucketed_packer(
        preprocessing.make_packer(preprocessor, seq_length), buckets or
        (seq_length,))
    self._class_names = list(class_names)
    self._regression = regression
    inputs = _PAIR if pairs else (_TEXT,)
    self.preprocess = tf.function(
        self._preprocess, input_signature=inputs, autograph=False)
    self.serve = tf.function(
        self._serve, input_signature=inputs, autograph=False)
    # Shared rows: the same outputs, several texts a row (`row_layout`),
    # where the encoder is this project's in Python.
    self.serve_rows = None
    if isinstance(model.encoder, native.NativeEncoder):
      self._full_pack = preprocessing.make_packer(preprocessor, seq_length)
      self._seq_length = seq_length
      self.serve_rows = tf.function(
          self._serve_rows, input_signature=inputs, autograph=False)

  def signatures(self):
    """{name: tf.function} as `tf.saved_model.save` takes them."""
    out = {"serving_default": self.serve, "preprocess": self.preprocess}
    if self.serve_rows is not None:
      out[exported.SHARED_ROWS] = self.serve_rows
    return out

  def _texts(self, text, text_pair=None):
    return text if text_pair is None else tf.stack([text, text_pair], axis=1)

  def _preprocess(self, text, text_pair=None):
    return self._pack(self._texts(text, text_pair))

  def _serve(self, text, text_pair=None):
    logits = self.model(
        self._pack(self._texts(text, text_pair)), training=False)
    return self._outputs(logits)

  def _serve_rows(self, text, text_pair=None):
    rows, where = row_layout.serving_rows(
        self._full_pack(self._texts(text, text_pair)), self._seq_length)
    return self._outputs(tf.gather(self.model(rows, training=False), where))

  def _outputs(self, logits):
    if self._regression:
      return dict(scores=logits[:, 0])
    probabilities = tf.nn.softmax(logits, axis=-1)
    class_ids = tf.argmax(probabilities, axis=-1, output_type=tf.int32)
    names = tf.gather(tf.constant(self._class_names), class_ids)
    return dict(
        probabilities=probabilities, class_ids=class_ids, class_names=names)


def bucketed_packer(pack, buckets):
  """`pack` (strings -> inputs at --seq_length) cut to the smallest of
  `buckets` that holds the longest text of the call
  (`input_pipeline.cut_to_bucket`)."""
  return lambda strings: input_pipeline.cut_to_bucket(pack(strings), buckets)


def serving_module(model, preprocessor, seq_length, task, buckets=None):
  """The ServingModule of a classifier of Task `task` (serving in the
  lengths of `buckets`, default --seq_length only); a tagging Task's
  `tagging.TaggingModule`."""
  if task.tagging:
    return tagging.TaggingModule(preprocessor, model, seq_length,
                                 task.class_names, buckets)
  return ServingModule(preprocessor, model, seq_length, task.class_names,
                       task.pairs, task.regression, buckets)


def run_module(c, saved, task, checkpoint=""):
  """(serving module, checkpoint path, step) of the run in `c.model_dir`
  (its config.json `saved`) rebuilt from `checkpoint` (the best, else the
  newest): what `trainer.evaluate --model_dir` scores, for either task."""
  preprocessor, model, path, step = run_folder.load_classifier(
      dataclasses.replace(
          saved,
          demo_cache_dir=c.demo_cache_dir,
          checkpoint_dir=c.checkpoint_dir), checkpoint)
  # A run's best checkpoint is not always its newest: say which is scored.
  logging.info("Scoring %s (step %d) of the run in %s", path, step, c.model_dir)
  module = serving_module(model, preprocessor, c.seq_length, task,
                          run_folder.read_layout(c).lengths)
  return module, path, step


def _save_options(io_device=None):
  if io_device:
    return tf.saved_model.SaveOptions(experimental_io_device=io_device)
  return None


def write_export(module, export_dir, io_device=None):
  """Saves `module` to a temporary sibling, then moves it to export_dir
  (`run_dir.publish_folder`: saved_model.pb is written last)."""
  if exported.is_complete(export_dir):
    raise ExportError(f"{export_dir} exists already; remove it to export "
                      "again")
  signatures = module.signatures()
  return run_dir.publish_folder(
      lambda tmp: tf.saved_model.save(
          module, tmp, signatures=signatures, options=_save_options(io_device)),
      export_dir, "saved_model.pb")


def for_serving(model):
  """The classifier to export: `model` itself, its live weights, computing
  as its saved encoder does (a rebuilt encoder, `native.NativeEncoder`,
  serves its weights in float32)."""
  if isinstance(model.encoder, native.NativeEncoder):
    return model.with_encoder(model.encoder.in_float32())
  return model


def host_copy(model, encoder):
  """A classifier on this host holding `model`'s weights (read from
  wherever they live: a TPU's), over `encoder` (a fresh load of the same
  handle, or `native.NativeEncoder`'s rebuild); `encoder.variables` must
  match `model.encoder.variables` in order and shape."""
  with tf.device("/cpu:0"):
    copy = model_lib.Classifier(
        encoder,
        int(model.kernel.shape[1]),
        model.dropout_rate,
        pooling=model.pooling)
    ours = list(encoder.variables) + [copy.kernel, copy.bias]
    theirs = list(model.encoder.variables) + [model.kernel, model.bias]
    for mine, live in zip(ours, theirs, strict=True):
      mine.assign(tf.convert_to_tensor(live))
  return copy


class RunExporter:
  """The export of a training run's live model, <export_base_dir>/<step>:
  what `finish` hands over (the best model once restored; --ema_decay's
  moving average of its weights).

  On a TPU, whose variables live there, it exports a copy of the weights
  on this host (`host_copy` over the encoder rebuilt, or loaded again from
  its handle); elsewhere the live model itself.

  Args:
    state: the run's `TrainState` (model, step, `averaged()`, io_device).
    preprocessor: the run's preprocessor (host).
    config: the run's Config (seq_length, the encoder handle for a TPU's
      host copy, demo_cache_dir).
    task: the run's `tasks.Task`.
    layout: the run's `layout.Layout` (the export serves in its lengths).
    locations: the run's `run_dir.Locations`.
    strategy: the run's strategy.
  """

  def __init__(self, state, preprocessor, config, task, layout, locations,
               strategy):
    self.state, self.preprocessor, self.config = state, preprocessor, config
    self.task, self.layout, self.locations = task, layout, locations
    self.strategy = strategy

  def serving_model(self):
    """The model to export: the live one, or a TPU's copy on this host."""
    model = self.state.model
    if not distribute.is_tpu(self.strategy):
      return model
    if isinstance(model.encoder, native.NativeEncoder):
      encoder = model.encoder.host_twin()
    else:
      encoder = handles.load_on_host(self.config.encoder_handle,
                                     distribute.io_device(self.strategy),
                                     self.config.demo_cache_dir)
    return host_copy(model, encoder)

  def __call__(self):
    """Exports the model of step `state.step` (once); returns its folder."""
    step = self.state.step
    target = self.locations.export_dir(step)
    if exported.is_complete(target):
      logging.info("Export for step %d exists already: %s", step, target)
      return target
    with self.state.averaged():  # --ema_decay: the average is what serves
      write(self.serving_model(), self.preprocessor, self.config.seq_length,
            self.task, target, self.state.io_device, self.layout.lengths)
    logging.info("Exported the model of step %d to %s", step, target)
    return target


def write(model,
          preprocessor,
          seq_length,
          task,
          export_dir,
          io_device=None,
          buckets=None):
  """Exports classifier `model` of Task `task` with its preprocessor to
  `export_dir` (atomically: `write_export`), serving in the lengths of
  `buckets`; returns export_dir."""
  module = serving_module(
      for_serving(model), preprocessor, seq_length, task, buckets)
  return write_export(module, export_dir, io_device)


def export_run(model_dir,
               checkpoint="",
               checkpoint_dir="",
               export_base_dir="",
               demo_cache_dir=None,
               io_device=None):
  """Exports a checkpoint of the training run in `model_dir` (`checkpoint`,
  else the best, else the newest) to <export_base_dir>/<step> (default
  model_dir/export); returns the export folder.

  The run's own flags come from its config.json; its checkpoints are read
  from `checkpoint_dir` (default model_dir/checkpoints) and its demo
  assets from `demo_cache_dir` when given.
  """
  c = run_folder.read_run_config(model_dir, checkpoint_dir)
  c = dataclasses.replace(
      c,
      checkpoint_dir=checkpoint_dir,
      export_base_dir=export_base_dir,
      demo_cache_dir=c.demo_cache_dir
      if demo_cache_dir is None else demo_cache_dir)
  preprocessor, model, path, step = run_folder.load_classifier(
      c, checkpoint, io_device)
  where = run_dir.locations(c.model_dir, c.checkpoint_dir, c.summary_dir,
                            c.export_base_dir)
  export_dir = write(model, preprocessor, c.seq_length, tasks.resolve(c),
                     where.export_dir(step), io_device,
                     run_folder.read_layout(c).lengths)
  logging.info("Exported %s (step %d) to %s", path, step, export_dir)
  return export_dir
