"""Eval pictures for TensorBoard: a confusion matrix image and a PR curve;
and a tagging evaluate's scalars (`write_eval_scalars`).

Both are drawn from counts: the confusion matrix of an eval pass and, for
two classes, histograms of the positive class's probability for positive
and for negative examples (`metrics.PR_BUCKETS` buckets), which the eval
step accumulates on the replicas and `trainer.evaluate` computes on the
host. `summary.json` is not touched.
"""

from absl import logging
import numpy as np
import tensorflow as tf

from trainer.evaluation import metrics as metrics_lib

_CELL = 64  # pixels
_MARGIN = 112
MAX_IMAGE_CLASSES = 30  # beyond, a picture of counts no one can read


def _font():
  from PIL import ImageFont  # pylint: disable=g-import-not-at-top
  try:
    return ImageFont.load_default(size=14)
  except TypeError:  # Pillow < 10.1 has one bitmap size
    return ImageFont.load_default()


def confusion_image(confusion, class_names):
  """An RGB uint8 array [H, W, 3]: rows true class, columns predicted, each
  cell shaded by its share of the row (the class's recall) and labelled
  with its count."""
  from PIL import Image  # pylint: disable=g-import-not-at-top
  from PIL import ImageDraw  # pylint: disable=g-import-not-at-top
  confusion = np.asarray(confusion, np.int64)
  k = len(class_names)
  size = _MARGIN + k * _CELL
  image = Image.new("RGB", (size + 8, size + 8), "white")
  draw, font = ImageDraw.Draw(image), _font()
  rows = confusion.sum(axis=1, keepdims=True)
  share = confusion / np.maximum(rows, 1)
  for i in range(k):
    for j in range(k):
      x, y = _MARGIN + j * _CELL, _MARGIN + i * _CELL
      shade = int(255 - 200 * share[i, j])
      draw.rectangle([x, y, x + _CELL - 1, y + _CELL - 1],
                     fill=(shade, shade, 255),
                     outline=(160, 160, 160))
      draw.text((x + _CELL / 2, y + _CELL / 2),
                str(confusion[i, j]),
                fill="black" if share[i, j] < 0.6 else "white",
                font=font,
                anchor="mm")
  for i, name in enumerate(class_names):
    label = str(name)[:12]
    middle = _MARGIN + i * _CELL + _CELL / 2
    draw.text((_MARGIN - 6, middle),
              label,
              fill="black",
              font=font,
              anchor="rm")
    draw.text((middle, _MARGIN - 6),
              label,
              fill="black",
              font=font,
              anchor="ms")
  draw.text((4, 4), "rows: true class", fill="gray", font=font)
  draw.text((4, 22), "columns: predicted", fill="gray", font=font)
  return np.asarray(image, np.uint8)


def _image(confusion, class_names):
  try:
    pixels = confusion_image(confusion, class_names)
  except (OSError, ValueError, UnicodeError) as e:  # e.g. a font without
    logging.warning("No confusion matrix image: %s", e)  # the names' script
    return
  tf.summary.image(
      "eval/confusion_matrix",
      pixels[None],
      description="Rows: true class; columns: predicted; shade: share of "
      "the row.")


def write_eval_pictures(writer, step, confusion, class_names, histograms=None):
  """`eval/confusion_matrix` (image, up to MAX_IMAGE_CLASSES classes) and,
  given `histograms` (positive, negative), `eval/pr_curve` into `writer` at
  `step`."""
  # pylint: disable-next=g-import-not-at-top
  from tensorboard.plugins.pr_curve import summary as pr_summary
  with writer.as_default(step=step):
    if len(class_names) <= MAX_IMAGE_CLASSES:
      _image(confusion, class_names)
    if histograms is not None:
      curve = metrics_lib.pr_curve(*histograms)
      pb = pr_summary.raw_data_pb(
          "eval/pr_curve",
          num_thresholds=len(curve["thresholds"]),
          **{
              k: v for k, v in curve.items() if k != "thresholds"
          })
      tf.summary.experimental.write_raw_pb(pb.SerializeToString(), step=step)
  writer.flush()


def write_eval_scalars(writer, step, metrics):
  """`eval/<name>` of each float of `metrics` ({name: value}, the keys of
  training's eval summaries) into `writer` at `step`."""
  with writer.as_default(step=step):
    for name, value in metrics.items():
      tf.summary.scalar(f"eval/{name}", value)
  writer.flush()
