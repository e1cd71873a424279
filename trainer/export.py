r"""Export a trained classifier as a SavedModel that serves raw strings.

    python -m trainer.export --model_dir=DIR [--checkpoint=PATH]

writes DIR/export/<step>/ with signatures

    serving_default(text: [batch] tf.string) ->
        probabilities [batch, num_classes] float32, class_ids [batch] int32,
        class_names [batch] tf.string
    preprocess(text) -> input_word_ids / input_mask / input_type_ids int32

A sentence-pair model's signatures take `text` and `text_pair` (both
[batch] tf.string); a regression model's (`--num_classes=1`) returns
`scores` [batch] float32 instead.

It holds the preprocessor (same cleaning and tokenization as training), the
encoder and the head, so it loads with `tf.saved_model.load` and
`import tensorflow_text` alone. It is written to a temporary folder and
renamed into place: a crash never leaves a half model under the final name.
"""

import json
import os
import uuid

from absl import flags
from absl import logging
import tensorflow as tf

from trainer.model import checkpoints
from trainer import cli
from trainer.base import config as config_lib
from trainer.base import errors
from trainer.model import classifier as model_lib
from trainer.data import preprocessing
from trainer.base import run_dir

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
               regression=False):
    super().__init__(name="serving")
    self.preprocessor = preprocessor
    self.model = model
    self._pack = preprocessing.make_packer(preprocessor, seq_length)
    self._class_names = list(class_names)
    self._regression = regression
    inputs = _PAIR if pairs else (_TEXT,)
    self.preprocess = tf.function(self._preprocess, input_signature=inputs)
    self.serve = tf.function(self._serve, input_signature=inputs)

  def _texts(self, text, text_pair=None):
    return text if text_pair is None else tf.stack([text, text_pair], axis=1)

  def _preprocess(self, text, text_pair=None):
    return self._pack(self._texts(text, text_pair))

  def _serve(self, text, text_pair=None):
    logits = self.model(
        self._pack(self._texts(text, text_pair)), training=False)
    if self._regression:
      return dict(scores=logits[:, 0])
    probabilities = tf.nn.softmax(logits, axis=-1)
    class_ids = tf.argmax(probabilities, axis=-1, output_type=tf.int32)
    names = tf.gather(tf.constant(self._class_names), class_ids)
    return dict(
        probabilities=probabilities, class_ids=class_ids, class_names=names)


def read_run_config(model_dir):
  """The Config a training run wrote to model_dir/config.json."""
  path = os.path.join(model_dir, "config.json")
  if not tf.io.gfile.exists(path):
    raise ExportError(f"--model_dir={model_dir} has no config.json; is it "
                      "the model_dir of a training run?")
  with tf.io.gfile.GFile(path) as f:
    saved = json.load(f)
  return config_lib.Config(**saved["config"])


def load_classifier(model_dir, checkpoint="", io_device=None):
  """Rebuilds the run's classifier on the host and restores a checkpoint
  (`io_device`: where files are read; a TPU's host, `distribute.io_device`).

  Returns:
    (config, preprocessor, model, checkpoint path, step).
  """
  c = read_run_config(model_dir)
  where = run_dir.locations(c)
  path = checkpoints.for_export(where.checkpoints, where.best, checkpoint)
  preprocessor, encoder = model_lib.load_checked(c,
                                                 tf.distribute.get_strategy(),
                                                 io_device)
  model = model_lib.Classifier(encoder, c.num_classes, c.dropout_rate, c.seed,
                               c.pooling)
  ckpt, step = checkpoints.for_reading(model, encoder)
  options = tf.train.CheckpointOptions(experimental_io_device=io_device)
  ckpt.restore(
      path, options=options).expect_partial().assert_existing_objects_matched()
  return c, preprocessor, model, path, int(step.numpy())


def serving_module(c, preprocessor, model):
  """The ServingModule of a run of Config `c`."""
  return ServingModule(preprocessor, model, c.seq_length, c.class_names(),
                       c.pairs, c.regression)


def _save_options(io_device=None):
  if io_device:
    return tf.saved_model.SaveOptions(experimental_io_device=io_device)
  return None


def write_export(module, export_dir, io_device=None):
  """Saves `module` to a temporary sibling, then renames it to export_dir."""
  if is_complete(export_dir):
    raise ExportError(f"{export_dir} exists already; remove it to export "
                      "again")
  if tf.io.gfile.exists(export_dir):
    _remove_quietly(export_dir)  # the remains of an interrupted copy
  parent = os.path.dirname(export_dir.rstrip("/"))
  tf.io.gfile.makedirs(parent)
  tmp = os.path.join(
      parent, f".tmp-{os.path.basename(export_dir)}-"
      f"{uuid.uuid4().hex[:8]}")
  moved = False
  try:
    tf.saved_model.save(
        module,
        tmp,
        signatures={
            "serving_default": module.serve,
            "preprocess": module.preprocess
        },
        options=_save_options(io_device))
    _publish(tmp, export_dir)
    moved = True
  finally:
    if not moved:
      _remove_quietly(tmp)
  return export_dir


def load_serving(export_dir, flag="export_dir"):
  """(serving_default of the export at `export_dir`, its class count: 1 for
  a regression); a clear error for a folder that is not one of this
  project's exports. `pairs(serve)` says whether it takes sentence pairs."""
  if not tf.io.gfile.isdir(export_dir):
    raise ExportError(f"--{flag}={export_dir} is not a folder; give an export "
                      "(RUN/export/<step>)")
  if not is_complete(export_dir):
    raise ExportError(f"--{flag}={export_dir} holds no saved_model.pb; give "
                      "an export (RUN/export/<step>)")
  serve = tf.saved_model.load(export_dir).signatures.get("serving_default")
  outputs = getattr(serve, "structured_outputs", {}) if serve else {}
  if "scores" in outputs:
    return serve, 1
  if "probabilities" not in outputs:
    raise ExportError(
        f"--{flag}={export_dir} is a SavedModel but not an export of this "
        "trainer (no serving_default signature returning probabilities)")
  return serve, int(outputs["probabilities"].shape[-1])


def pairs(serve):
  """Whether a loaded `serving_default` takes sentence pairs."""
  return "text_pair" in serve.structured_input_signature[1]


def is_complete(export_dir):
  """An export is complete once its saved_model.pb (written last) exists."""
  return tf.io.gfile.exists(os.path.join(export_dir, "saved_model.pb"))


def _publish(tmp, final):
  """Moves the finished export into place.

  A rename is atomic on local disks. Some filesystems (ram://, object stores)
  rename only the folder entry and not what is inside; there the files are
  copied with saved_model.pb last, so the folder is never a loadable but
  incomplete model.
  """
  tf.io.gfile.rename(tmp, final)
  if is_complete(final):
    return
  files = []
  for folder, _, names in tf.io.gfile.walk(tmp):
    files += [os.path.join(folder, n) for n in names]
  files.sort(key=lambda p: os.path.basename(p) == "saved_model.pb")
  for src in files:
    dst = os.path.join(final, os.path.relpath(src, tmp))
    tf.io.gfile.makedirs(os.path.dirname(dst))
    tf.io.gfile.copy(src, dst, overwrite=True)
  _remove_quietly(tmp)


def _remove_quietly(path):
  try:
    tf.io.gfile.rmtree(path)
  except tf.errors.NotFoundError:
    pass  # Never created, or an object store with no folder to remove.


def export(model_dir, checkpoint="", io_device=None):
  """Exports the chosen checkpoint of `model_dir`; returns the export dir."""
  c, preprocessor, model, path, step = load_classifier(model_dir, checkpoint,
                                                       io_device)
  module = serving_module(c, preprocessor, model)
  export_dir = run_dir.locations(c).export_dir(step)
  write_export(module, export_dir, io_device)
  logging.info("Exported %s (step %d) to %s", path, step, export_dir)
  return export_dir


def define_flags():
  flags.DEFINE_string("model_dir", None, "The training run's model_dir.")
  flags.DEFINE_string("checkpoint", "", "Checkpoint path ('' = best, else the "
                      "newest).")
  flags.mark_flag_as_required("model_dir")


def main(argv):
  del argv
  read_run_config(flags.FLAGS.model_dir)  # a run's folder, or a clear error
  # A training run holds its model_dir until it has exported itself.
  with run_dir.Lock(flags.FLAGS.model_dir, "trainer.export"):
    print(export(flags.FLAGS.model_dir, flags.FLAGS.checkpoint))


if __name__ == "__main__":
  define_flags()
  cli.run(main)
