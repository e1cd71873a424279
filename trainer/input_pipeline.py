"""Sources -> host preprocessing -> fixed-shape int32 batches.

All text work (cleaning, WordPiece, packing) runs here, in tf.data on the
host CPU, so the replicas only ever receive int32 tensors of static shape
[batch, seq_length]. Data order is a pure function of (seed, epoch,
position): a run resumed at step s sees exactly the batches an uninterrupted
run would see from step s on. Nothing here holds the corpus in memory: rows
stream from the source through a bounded shuffle buffer.
"""

import dataclasses
import os

import tensorflow as tf

from trainer import demo
from trainer import sources

_BUCKETS = 10_000


@dataclasses.dataclass(frozen=True)
class Split:
  """A named split: a source, optionally a seeded part of it.

  `holdout` is None for a whole source. Otherwise the source's rows are
  partitioned by a hash of (seed, row index): rows whose bucket falls under
  `fraction` form the held-out part (holdout=True), the rest the other part.
  """

  name: str
  source: object
  holdout: bool | None = None
  fraction: float = 0.0
  seed: int = 0

  def records(self):
    ds = self.source.records()
    if self.holdout is None:
      return ds
    threshold = int(round(self.fraction * _BUCKETS))
    seed, holdout = self.seed, self.holdout

    def keep(r):
      key = tf.strings.format("{}:{}", (seed, r["index"]))
      held = tf.strings.to_hash_bucket_fast(key, _BUCKETS) < threshold
      return tf.equal(held, holdout)

    return ds.filter(keep)


def _tfds_splits(name, data_dir):
  import tensorflow_datasets as tfds  # pylint: disable=g-import-not-at-top
  try:
    return set(tfds.builder(name, data_dir=data_dir or None).info.splits)
  except Exception as e:  # Unknown name, unreadable data_dir, ...
    raise sources.DataError(
        f"--tfds_name={name}: {sources.first_line(e)}") from None


def make_splits(config):
  """Returns {"train": Split, "validation": Split[, "test": Split]}."""
  label_map = config.resolved_label_map()
  seed, fraction = config.seed, config.validation_fraction

  def carve(source):
    return dict(
        train=Split("train", source, False, fraction, seed),
        validation=Split("validation", source, True, fraction, seed))

  if config.source_kind == "demo":
    paths = demo.ensure_assets(config.demo_cache_dir or None)
    csv = lambda p: sources.CsvSource(p, "text", "label", {0: 0, 1: 1})
    return dict(
        train=Split("train", csv(paths["train"])),
        validation=Split("validation", csv(paths["validation"])))
  if config.source_kind == "file":
    csv = lambda p: sources.CsvSource(
        p,
        config.text_column,
        config.label_column,
        label_map,
        delimiter="\t" if p.endswith(".tsv") else ",")
    if config.eval_file:
      return dict(
          train=Split("train", csv(config.train_file)),
          validation=Split("validation", csv(config.eval_file)))
    return carve(csv(config.train_file))
  name, data_dir = config.tfds_name, config.data_dir or None
  available = _tfds_splits(name, data_dir)
  text_key = config.text_key or "text"
  label_key = config.label_key or ("polarity" if name.startswith("sentiment140")
                                   else "label")
  tfds_source = lambda split: sources.TfdsSource(name, split, data_dir,
                                                 text_key, label_key, label_map)
  if "validation" in available:
    splits = dict(
        train=Split("train", tfds_source("train")),
        validation=Split("validation", tfds_source("validation")))
  else:
    splits = carve(tfds_source("train"))
  if "test" in available:
    splits["test"] = Split("test", tfds_source("test"))
  return splits


def count(split):
  """One pass over a split: rows read, used and rejected per reason."""
  n = len(sources.REASONS)
  totals = split.records().map(
      lambda r: tf.one_hot(r["reason"], n, dtype=tf.int64),
      num_parallel_calls=tf.data.AUTOTUNE).reduce(
          tf.zeros([n], tf.int64), lambda a, b: a + b).numpy()
  rejected = {
      sources.REASONS[i]: int(totals[i]) for i in range(1, n) if totals[i]
  }
  return dict(
      rows_read=int(totals.sum()), rows_used=int(totals[0]), rejected=rejected)


def _usable(split):
  return split.records().filter(lambda r: tf.equal(r["reason"], 0)).map(
      lambda r: (r["text"], tf.cast(r["label"], tf.int32)))


def _pack_batch(packer):

  def fn(texts, labels):
    features = packer(texts)
    features["label"] = labels
    return features

  return fn


def train_dataset(split,
                  packer,
                  global_batch_size,
                  steps_per_epoch,
                  start_step=0,
                  seed=0,
                  shuffle_buffer=100_000):
  """The endless training stream, positioned at `start_step`.

  Epoch e is the split's usable rows shuffled with seed (seed, e) through a
  bounded buffer, cut into `steps_per_epoch` full batches (the remainder is
  dropped so shapes never change). The first `start_step` batches are skipped
  before any tokenization.

  Returns:
    Dataset of dicts: int32 `input_word_ids`, `input_mask`, `input_type_ids`
    [global_batch_size, seq_length] and int32 `label` [global_batch_size].
  """
  start_epoch, offset = divmod(start_step, steps_per_epoch)
  base = _usable(split)

  def epoch(e):
    epoch_seed = tf.bitwise.bitwise_xor(
        tf.cast(seed, tf.int64) * 1_000_003, tf.cast(e, tf.int64))
    return base.shuffle(
        shuffle_buffer, seed=epoch_seed, reshuffle_each_iteration=False).batch(
            global_batch_size, drop_remainder=True).take(steps_per_epoch)

  ds = tf.data.Dataset.range(start_epoch, 1 << 62).flat_map(epoch).skip(offset)
  ds = ds.map(
      _pack_batch(packer),
      num_parallel_calls=tf.data.AUTOTUNE,
      deterministic=True)
  return ds.prefetch(tf.data.AUTOTUNE)


def eval_dataset(split, packer, global_batch_size):
  """Every usable row exactly once, in full batches padded with weight 0.

  Returns:
    Dataset of dicts as `train_dataset` plus float32 `weight`
    [global_batch_size] (1 for real rows, 0 for padding).
  """
  pack = _pack_batch(packer)

  def pad(texts, labels):
    features = pack(texts, labels)
    real = tf.shape(labels)[0]
    missing = global_batch_size - real
    out = {}
    for key, value in features.items():
      padding = [[0, missing]] + [[0, 0]] * (len(value.shape) - 1)
      padded = tf.pad(value, padding)
      out[key] = tf.ensure_shape(padded, [global_batch_size] +
                                 value.shape[1:].as_list())
    out["weight"] = tf.ensure_shape(
        tf.concat([tf.ones([real]), tf.zeros([missing])], axis=0),
        [global_batch_size])
    return out

  ds = _usable(split).batch(global_batch_size).map(
      pad, num_parallel_calls=tf.data.AUTOTUNE, deterministic=True)
  return ds.prefetch(tf.data.AUTOTUNE)


def check_int_features(element_spec):
  """Raises TypeError unless every feature is int32 (or weight float32) and
  fully static: the contract that keeps strings and tables off the TPU."""
  for key, spec in element_spec.items():
    want = tf.float32 if key == "weight" else tf.int32
    if spec.dtype != want or not spec.shape.is_fully_defined():
      raise TypeError(f"feature {key!r} is {spec}; replicas accept only "
                      f"{want.name} of static shape")


def stats_path(model_dir):
  return os.path.join(model_dir, "data_stats.json")
