"""An export loaded: the signature `trainer.predict` and `trainer.evaluate`
serve with, and what it takes.

`load_serving(export_dir)` gives an export's `serve_shared_rows` where it
has one (the same outputs as `serving_default` at less cost: several texts
a row), else its `serving_default`, and its class count; `pairs(serve)`
whether it takes sentence pairs. The signatures are written by
`trainer.serving.export`.
"""

import os

import tensorflow as tf

from trainer.foundation import checks
from trainer.foundation import errors

ExportError = errors.ExportError

# The signature that serves as serving_default does with several texts a
# row (exports whose encoder is this project's); `load_serving` prefers it.
SHARED_ROWS = "serve_shared_rows"


def is_complete(export_dir):
  """An export is complete once its saved_model.pb (written last) exists."""
  return tf.io.gfile.exists(os.path.join(export_dir, "saved_model.pb"))


def load_serving(export_dir, flag="export_dir"):
  """(serving_default of the export at `export_dir`, or its
  serve_shared_rows where it has one: the same outputs at less cost; its
  class count: 1 for a regression); a clear error for a folder that is not
  one of this project's exports. `pairs(serve)` says whether it takes
  sentence pairs."""
  if checks.path_kind(flag, export_dir) != "dir":
    raise ExportError(f"--{flag}={export_dir} is not a folder; give an export "
                      "(RUN/export/<step>)")
  if not is_complete(export_dir):
    raise ExportError(f"--{flag}={export_dir} holds no saved_model.pb; give "
                      "an export (RUN/export/<step>)")
  signatures = tf.saved_model.load(export_dir).signatures
  serve = signatures.get(SHARED_ROWS) or signatures.get("serving_default")
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
