"""The embedded default: a small BERT, its preprocessor and a labelled text set.

`python -m trainer.main` with no flags must run offline, so the project builds
(once, then cached) what a real run downloads (the demo's own training
defaults are `config.DEMO_DEFAULTS`): an encoder and a preprocessor in
the TF Hub SavedModel format, and a CSV of generated short reviews whose
sentiment a model can learn. Everything is a pure function of the version
below, so the cache is safe to share between runs.
"""

import csv
import os
import random

import tensorflow as tf

from trainer.data import preprocessing
from trainer.encoders import bert
from trainer.encoders import native

VERSION = 5  # 5: the preprocessor packs sentence pairs

_POSITIVE = ("good great love loved amazing wonderful happy awesome excellent "
             "fantastic enjoyed best nice fun beautiful glad perfect brilliant "
             "lovely superb").split()
_NEGATIVE = ("bad terrible hate hated awful horrible sad worst boring poor "
             "angry ugly annoying disappointing broken sick dull useless "
             "painful lousy").split()
_SUBJECTS = ("the movie", "this phone", "my day", "the food", "our trip",
             "the game", "that song", "the weather", "work", "the show",
             "this book", "the service", "the hotel", "my coffee",
             "the concert", "the update", "class", "the traffic", "dinner",
             "the party")
_FILLERS = ("today", "really", "so", "very", "again", "honestly", "just", "lol",
            "tonight", "with friends", "at home", "this morning", "as usual",
            "for sure", "all week", "right now")
_TEMPLATES = ("{s} was {a} {f}", "{f} {s} is {a}", "i think {s} is {a}",
              "{s} {f} was {a} {f2}", "wow {s} was {a}", "{s} was {a} and {f}")

DEMO_BERT = dict(
    hidden_size=64,
    num_layers=2,
    num_heads=4,
    intermediate_size=128,
    max_position_embeddings=128,
    dropout_rate=0.1)


def vocabulary():
  """The demo WordPiece vocabulary: specials, whole words, letters, pieces."""
  words = set()
  for phrase in _POSITIVE + _NEGATIVE + list(_SUBJECTS) + list(_FILLERS) + list(
      _TEMPLATES):
    for word in phrase.replace("{", " ").replace("}", " ").split():
      if word.isalpha() and word not in ("s", "a", "f", "f2"):
        words.add(word)
  chars = "abcdefghijklmnopqrstuvwxyz0123456789"
  punct = ".,!?'\"@#&;:-()/"
  singles = [c for c in chars + punct if c not in words]
  return (list(preprocessing.SPECIAL_TOKENS) + sorted(words) + singles +
          ["##" + c for c in chars])


def sentence(rng, positive):
  adjective = rng.choice(_POSITIVE if positive else _NEGATIVE)
  return rng.choice(_TEMPLATES).format(
      s=rng.choice(_SUBJECTS),
      a=adjective,
      f=rng.choice(_FILLERS),
      f2=rng.choice(_FILLERS))


def write_texts(path, num_examples, seed):
  """Writes `text,label` rows (label 0 negative, 1 positive), balanced."""
  rng = random.Random(seed)
  with tf.io.gfile.GFile(path, "w") as f:
    writer = csv.writer(f, lineterminator="\n")
    writer.writerow(["text", "label"])
    for i in range(num_examples):
      label = i % 2
      writer.writerow([sentence(rng, label == 1), label])


def default_cache_dir():
  base = os.environ.get(
      "BERT_TRAINER_CACHE",
      os.path.join(os.path.expanduser("~"), ".cache", "bert_tpu_trainer"))
  return os.path.join(base, f"demo-v{VERSION}")


def paths(cache_dir=None):
  root = cache_dir or default_cache_dir()
  return dict(
      root=root,
      encoder=os.path.join(root, "encoder"),
      preprocessor=os.path.join(root, "preprocessor"),
      train=os.path.join(root, "train.csv"),
      validation=os.path.join(root, "validation.csv"))


def ensure_assets(cache_dir=None):
  """Builds the demo assets unless cached; returns their paths.

  Writes into a temporary folder renamed into place, so an interrupted build
  never leaves a half-written cache behind.
  """
  p = paths(cache_dir)
  if tf.io.gfile.exists(os.path.join(p["root"], "DONE")):
    return p
  tmp = p["root"] + f".tmp-{os.getpid()}"
  if tf.io.gfile.exists(tmp):
    tf.io.gfile.rmtree(tmp)
  tf.io.gfile.makedirs(tmp)
  t = paths(tmp)
  vocab_file = os.path.join(tmp, "vocab.txt")
  vocab = vocabulary()
  with tf.io.gfile.GFile(vocab_file, "w") as f:
    f.write("\n".join(vocab) + "\n")
  preprocessing.save_preprocessor(
      preprocessing.BertPreprocessor(vocab_file), t["preprocessor"])
  config = bert.BertConfig(vocab_size=len(vocab), **DEMO_BERT)
  # Seed 3 since v3: v4 changed the saved graphs (static hidden sizes, the
  # normalizing preprocessor), not the weights.
  native.save_encoder(bert.BertEncoder(config, seed=3), t["encoder"])
  write_texts(t["train"], 4000, seed=1)
  write_texts(t["validation"], 1000, seed=2)
  with tf.io.gfile.GFile(os.path.join(tmp, "DONE"), "w") as f:
    f.write("ok\n")
  if tf.io.gfile.exists(p["root"]):
    tf.io.gfile.rmtree(p["root"])
  tf.io.gfile.rename(tmp, p["root"])
  return p
