"""An export loaded: the signature `trainer.predict` and `trainer.evaluate`
serve with, and what it takes.

`load_serving(export_dir)` gives a classification export's
`serve_shared_rows` where it has one (the same outputs as `serving_default`
at less cost: several texts a row), else its `serving_default`, and its
class count; `pairs(serve)` whether it takes sentence pairs.
`load_tagger(export_dir)` gives a tagging export's signatures and tags;
each refuses the other kind in one line. The signatures are written by
`trainer.serving.export` and `trainer.serving.tagging`.
"""

import dataclasses
import os

import tensorflow as tf

from trainer.foundation import checks
from trainer.foundation import errors

ExportError = errors.ExportError

# The signature that serves as serving_default does with several texts a
# row (exports whose encoder is this project's); `load_serving` prefers it.
SHARED_ROWS = "serve_shared_rows"
# A tagging export's signature of pre-split words, and its shared rows
# twin (`trainer.serving.tagging`): what tells a tagging export.
WORDS = "serve_words"
WORDS_SHARED_ROWS = "serve_words_shared_rows"


def is_complete(export_dir):
  """An export is complete once its saved_model.pb (written last) exists."""
  return tf.io.gfile.exists(os.path.join(export_dir, "saved_model.pb"))


def load(export_dir, flag="export_dir"):
  """The SavedModel at `export_dir` loaded; a clear error for a folder that
  is not an export."""
  if checks.path_kind(flag, export_dir) != "dir":
    raise ExportError(f"--{flag}={export_dir} is not a folder; give an export "
                      "(RUN/export/<step>)")
  if not is_complete(export_dir):
    raise ExportError(f"--{flag}={export_dir} holds no saved_model.pb; give "
                      "an export (RUN/export/<step>)")
  return tf.saved_model.load(export_dir)


def is_tagging(loaded):
  """Whether a loaded export tags words (a tagging run's) rather than
  classifying texts."""
  return WORDS in loaded.signatures


def load_serving(export_dir, flag="export_dir", loaded=None):
  """(serving_default of the export at `export_dir`, or its
  serve_shared_rows where it has one: the same outputs at less cost; its
  class count: 1 for a regression); a clear error for a folder that is not
  one of this project's classification exports (a tagging export's is
  `load_tagger`). `pairs(serve)` says whether it takes sentence pairs."""
  loaded = loaded or load(export_dir, flag)
  if is_tagging(loaded):
    raise ExportError(
        f"--{flag}={export_dir} is a tagging export (a tag per word, not a "
        "class per text): evaluate it with --task=tagging on CoNLL or JSON "
        "lines data")
  signatures = loaded.signatures
  serve = signatures.get(SHARED_ROWS) or signatures.get("serving_default")
  outputs = getattr(serve, "structured_outputs", {}) if serve else {}
  if "scores" in outputs:
    return serve, 1
  if "probabilities" not in outputs:
    raise ExportError(
        f"--{flag}={export_dir} is a SavedModel but not an export of this "
        "trainer (no serving_default signature returning probabilities)")
  return serve, int(outputs["probabilities"].shape[-1])


@dataclasses.dataclass(frozen=True)
class Tagger:
  """A tagging export loaded: `text` serves raw texts, `words` pre-split
  words (each its shared rows signature where it has one), `tag_names`
  its tags by id."""

  text: object
  words: object
  tag_names: tuple


def load_tagger(export_dir, flag="export_dir", loaded=None):
  """The `Tagger` of the tagging export at `export_dir`; a clear error for
  a classification export or a folder that is not an export."""
  loaded = loaded or load(export_dir, flag)
  if not is_tagging(loaded):
    raise ExportError(
        f"--{flag}={export_dir} is a classification export (a class per "
        "text, not a tag per word): evaluate it without --task=tagging")
  if not hasattr(loaded, "tag_names"):
    raise ExportError(f"--{flag}={export_dir} has no tag_names: it is not a "
                      "tagging export of this trainer")
  signatures = loaded.signatures
  return Tagger(
      signatures.get(SHARED_ROWS) or signatures["serving_default"],
      signatures.get(WORDS_SHARED_ROWS) or signatures[WORDS],
      tuple(n.decode("utf-8") for n in loaded.tag_names().numpy()))


def pairs(serve):
  """Whether a loaded `serving_default` takes sentence pairs."""
  return "text_pair" in serve.structured_input_signature[1]
