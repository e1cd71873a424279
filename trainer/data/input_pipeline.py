"""Sources -> host preprocessing -> fixed-shape int32 batches.

All text work (cleaning, WordPiece, packing) runs here, in tf.data on the
host CPU, so the replicas only ever receive int32 tensors of static shape
[batch, seq_length]. Data order is a pure function of (seed, epoch,
position): a run resumed at step s sees exactly the batches an uninterrupted
run would see from step s on. Nothing here holds the corpus in memory: rows
stream from the source through a bounded shuffle buffer.
"""

import dataclasses

from absl import logging
import tensorflow as tf

from trainer.model import demo
from trainer.base import errors
from trainer.data import files
from trainer.base import run_dir
from trainer.data import sources
from trainer.base import tasks

_HEAD_ROWS = 2000

_BUCKETS = 10_000


def _one_text(chunk):
  """A chunk whose text [rows, 1] is squeezed to [rows]."""
  if chunk["text"].shape[1] != 1:
    return chunk
  return dict(chunk, text=chunk["text"][:, 0])


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

  def chunks(self, stripes=1):
    """The split's records in chunks (dicts of equal-length vectors)."""
    ds = self.source.chunks(stripes=stripes)
    if self.holdout is None:
      return ds
    threshold = int(round(self.fraction * _BUCKETS))
    seed, holdout = self.seed, self.holdout

    def keep(chunk):
      keys = tf.strings.join(
          [str(seed), tf.strings.as_string(chunk["index"])], separator=":")
      held = tf.strings.to_hash_bucket_fast(keys, _BUCKETS) < threshold
      mask = tf.equal(held, holdout)
      return {k: tf.boolean_mask(v, mask) for k, v in chunk.items()}

    return ds.map(keep, num_parallel_calls=tf.data.AUTOTUNE, deterministic=True)

  def records(self, stripes=1):
    """One record per row: dict of scalars, `text` a string (one text
    field) or a [2] vector (a pair), as `usable_rows` gives them."""
    return self.chunks(stripes).map(_one_text).unbatch()

  def describe(self):
    part = ""
    if self.holdout is not None:
      part = (f" ({'held-out' if self.holdout else 'remaining'} "
              f"{self.fraction if self.holdout else 1 - self.fraction:.0%})")
    return self.source.describe() + part


def _tfds_source(config, split, label_map):
  default_text, default_label = config.tfds_defaults()[:2]
  return sources.TfdsSource(config.tfds_name, split, config.data_dir or None,
                            config.text_key or default_text, config.label_key or
                            default_label, label_map, config.regression)


def _tfds(config, label_map, carve):
  """TFDS's own splits: validation (GLUE's MNLI: validation_matched, with
  each other validation_* split evaluated beside it), else one carved from
  train; a test split only when its labels are known (GLUE hides them:
  -1)."""
  name, data_dir = config.tfds_name, config.data_dir or None
  task = tasks.tfds_task(name)
  available = sources.tfds_splits(name,
                                  data_dir) or set(task.splits if task else ())
  make = lambda split: _tfds_source(config, split, label_map)
  validation = [s for s in sorted(available) if s.startswith("validation")]
  main = "validation" if "validation" in available else (
      "validation_matched" if "validation_matched" in available else None)
  if main:
    splits = dict(
        train=Split("train", make("train")),
        validation=Split("validation", make(main)))
    for extra in validation:
      if extra != main:
        splits[extra] = Split(extra, make(extra))
  else:
    splits = carve(make("train"))
  if "test" in available and not config.hidden_test_labels():
    splits["test"] = Split("test", make("test"))
  return splits


def _zip_member(path, split):
  """The Sentiment140 zip holds the train and the test CSV; pick by name."""
  members = [m for m in files.zip_members(path) if not m.endswith("/")]
  wanted = "train" if split == "train" else "test"
  named = [m for m in members if wanted in m.lower()]
  if named:
    return named[0]
  if split == "train" and len(members) == 1:
    return members[0]
  if split == "train":
    raise errors.DataError(
        f"{path}: cannot tell which member is the training data among "
        f"{members}; extract it and pass the file")
  return None


def _file_source(config, path, split, label_map=None):
  member = ""
  if path.lower().endswith(".zip"):
    member = _zip_member(path, split)
    if member is None:
      return None
  source = sources.FileSource(path, {}, config.file_format, config.text_column,
                              config.label_column, config.encoding, member,
                              config.header, config.quoting, config.regression)
  layout = source.layout()
  if label_map is None:
    label_map = config.label_map_for(
        sentiment140=layout.file_format == "sentiment140")
  source = dataclasses.replace(source, label_map=label_map)
  layout = source.layout()  # with the label map's kind (int or word)
  logging.info("%s: %s; label map %s", source.describe(), layout.describe(),
               label_map)
  return source


def make_splits(config):
  """Returns {"train": Split, "validation": Split[, "test": Split]}."""
  seed, fraction = config.seed, config.validation_fraction

  def carve(source):
    return dict(
        train=Split("train", source, False, fraction, seed),
        validation=Split("validation", source, True, fraction, seed))

  if config.source_kind == "tfds":
    return _tfds(config, config.label_map_for(), carve)
  if config.source_kind == "demo":
    paths = demo.ensure_assets(config.demo_cache_dir or None)
    csv = lambda p: sources.FileSource(p, {"0": 0, "1": 1}, "csv")
    return dict(
        train=Split("train", csv(paths["train"])),
        validation=Split("validation", csv(paths["validation"])))
  train = _file_source(config, config.train_file, "train")
  splits = carve(train)
  if config.eval_file:
    splits = dict(
        train=Split("train", train),
        validation=Split(
            "validation",
            _file_source(config, config.eval_file, "validation",
                         train.label_map)))
  test_path = config.test_file or (
      config.train_file if config.train_file.lower().endswith(".zip") else "")
  test = test_path and _file_source(config, test_path, "test", train.label_map)
  if test:
    splits["test"] = Split("test", test)
  return splits


def tfds_split_names(config):
  """The splits the TFDS dataset of `config` has (prepared or not)."""
  return sources.tfds_splits(config.tfds_name, config.data_dir or None)


def whole_split(config, input_file="", tfds_split=""):
  """Every row of one labelled file (`input_file`, read with the Config's
  column and label flags) or of one TFDS split, never carved: what
  `trainer.evaluate --input_file` and `--tfds_name --split` score."""
  if input_file:
    # The file's labels, not the training data's: a run on TFDS
    # sentiment140 (0/4) scored on a 0/1 file keeps --label_map or the
    # file's own layout only.
    config = dataclasses.replace(config, tfds_name="", train_file=input_file)
    source = _file_source(config, input_file, "test")
    if source is None:
      raise errors.DataError(
          f"--input_file={input_file}: this zip holds no member named "
          "'test'; extract the file to score and pass it")
    return Split("input", source)
  available = tfds_split_names(config)  # empty: not known before loading
  if available and tfds_split.split("[")[0] not in available:
    raise errors.ConfigError(
        f"--split={tfds_split!r} is invalid: TFDS {config.tfds_name} has "
        f"splits {sorted(available)}")
  return Split(tfds_split,
               _tfds_source(config, tfds_split, config.label_map_for()))


def count(split, limit=None, num_classes=0):
  """One pass over a split (or its first `limit` rows): rows read, used and
  rejected per reason, and (with `num_classes`) the usable rows per class
  id, as {"0": n, ...}."""
  n, k = len(sources.REASONS), max(num_classes, 1)
  records = split.records()
  if limit:
    records = records.take(limit)

  def one_hot(r):
    usable = tf.equal(r["reason"], 0)
    if r["label"].dtype.is_floating:  # regression: no classes
      label = tf.constant(-1, tf.int64)
    else:
      label = tf.where(usable, r["label"], -1)  # one_hot(-1) is all zeros
    return (tf.one_hot(r["reason"], n,
                       dtype=tf.int64), tf.one_hot(label, k, dtype=tf.int64))

  zeros = (tf.zeros([n], tf.int64), tf.zeros([k], tf.int64))
  totals, classes = records.map(
      one_hot, num_parallel_calls=tf.data.AUTOTUNE).reduce(
          zeros, lambda a, b: (a[0] + b[0], a[1] + b[1]))
  totals, classes = totals.numpy(), classes.numpy()
  rejected = {
      sources.REASONS[i]: int(totals[i]) for i in range(1, n) if totals[i]
  }
  counts = dict(
      rows_read=int(totals.sum()), rows_used=int(totals[0]), rejected=rejected)
  if num_classes > 1:
    counts["classes"] = {str(i): int(c) for i, c in enumerate(classes) if c}
  return counts


# Rejections that mean "this input is broken"; labels outside the map (e.g.
# Sentiment140's neutral test rows) are an expected exclusion instead.
BAD_REASONS = ("label_not_a_number", "empty_text", "malformed_row",
               "invalid_utf8", "field_too_long", "empty_text_pair")


def check_bad_fraction(split, counts, max_fraction):
  """Raises DataError naming the file, count, reason and example lines when
  more than `max_fraction` of the split's rows are broken."""
  reasons = BAD_REASONS
  if sources.label_kind(split.source.label_map,
                        split.source.regression) == "word":
    # Every cell is a word: one outside the map is a typo, not a class
    # left out on purpose (Sentiment140's neutral 2).
    reasons += ("label_not_in_map",)
  bad = {r: counts["rejected"].get(r, 0) for r in reasons}
  total_bad = sum(bad.values())
  if not counts["rows_read"] or total_bad <= max_fraction * counts["rows_read"]:
    return
  reason = max(bad, key=bad.get)
  reason_id = sources.REASONS.index(reason)
  lines = [
      int(r["line"]) for r in split.records().filter(
          lambda r: tf.equal(r["reason"], reason_id)).take(3)
  ]
  detail = ", ".join(f"{r}: {n}" for r, n in bad.items() if n)
  raise errors.DataError(
      f"{split.describe()}: {total_bad} of {counts['rows_read']} rows "
      f"rejected ({detail}), more than --max_bad_fraction={max_fraction}; "
      f"most are {reason}, e.g. lines {', '.join(map(str, lines))}. Check "
      "--file_format, --text_column/--label_column and --encoding" +
      (" (a TSV whose double quotes are plain characters, as GLUE's, needs "
       "--quoting=none)" if reason == "malformed_row" and
       getattr(split.source, "quoting", "") == "csv" and
       split.source.layout().delimiter == "\t" else "") + ".")


def usable_rows(split, stripes=1):
  """(text, label) of the usable rows, one element per row: text a string
  (one text field) or a [2] vector (a pair); label int32 (float32 for
  regression)."""

  def usable(chunk):
    mask = tf.equal(chunk["reason"], 0)
    texts = tf.boolean_mask(_one_text(chunk)["text"], mask)
    label = tf.boolean_mask(chunk["label"], mask)
    if not label.dtype.is_floating:
      label = tf.cast(label, tf.int32)
    return texts, label

  return split.chunks(stripes).map(usable).unbatch()


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
                  shuffle_buffer=100_000,
                  read_stripes=1):
  """The endless training stream, positioned at `start_step`.

  Epoch e is the split's usable rows (a file read at `read_stripes` places
  in round-robin) shuffled with seed (seed, e) through a bounded buffer, cut
  into `steps_per_epoch` full batches (the remainder is dropped so shapes
  never change). The first `start_step` batches are skipped
  before any tokenization.

  Returns:
    Dataset of dicts: int32 `input_word_ids`, `input_mask`, `input_type_ids`
    [global_batch_size, seq_length] and int32 `label` [global_batch_size].
  """
  start_epoch, offset = divmod(start_step, steps_per_epoch)
  base = usable_rows(split, read_stripes)

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

  ds = usable_rows(split).batch(global_batch_size).map(
      pad, num_parallel_calls=tf.data.AUTOTUNE, deterministic=True)
  return ds.prefetch(tf.data.AUTOTUNE)


def check_int_features(element_spec):
  """Raises TypeError unless every feature is int32 (weight and a
  regression label float32) and fully static: the contract that keeps
  strings and tables off the TPU."""
  for key, spec in element_spec.items():
    want = tf.float32 if key == "weight" else tf.int32
    if key == "label" and spec.dtype == tf.float32:
      want = tf.float32
    if spec.dtype != want or not spec.shape.is_fully_defined():
      raise TypeError(f"feature {key!r} is {spec}; replicas accept only "
                      f"{want.name} of static shape")


def count_splits(splits, max_bad_fraction, cache_path, num_classes=0):
  """Row counts per split ({name: count()}, with rows per class), checked
  against `max_bad_fraction` and cached at `cache_path` (a resumed run skips
  them).

  Every split's first rows are counted before any is read whole, so a wrong
  layout fails in seconds rather than after millions of rows.
  """
  # The file's size and time are part of the key: an edited file is
  # counted again.
  key = repr((sorted(
      (name, repr(s), s.source.stamp()) for name, s in splits.items()),
              num_classes))
  cached = run_dir.read_json(cache_path)
  if cached and cached.get("key") == key:
    return cached["counts"]
  for split in splits.values():
    check_bad_fraction(split, count(split, limit=_HEAD_ROWS), max_bad_fraction)
  counts = {}
  for name, split in splits.items():
    counts[name] = count(split, num_classes=num_classes)
    check_bad_fraction(split, counts[name], max_bad_fraction)
    logging.info("Split %s: %d rows read, %d used, rejected %s", name,
                 counts[name]["rows_read"], counts[name]["rows_used"],
                 counts[name]["rejected"] or "none")
  run_dir.write_json(cache_path, dict(key=key, counts=counts))
  return counts


def check_counts(splits, counts, validation_fraction):
  """Stops, saying why, on a split that leaves nothing to learn from."""
  validation = splits["validation"]
  if counts["validation"]["rows_used"] == 0 and validation.holdout:
    raise errors.TrainingError(
        f"the validation split carved from {validation.source.describe()} "
        f"at --validation_fraction={validation_fraction} holds no usable row "
        f"(the file has {counts['train']['rows_used']} usable rows); raise "
        "--validation_fraction or give --eval_file")
  for name in ("train", "validation"):
    if counts[name]["rows_used"] == 0:
      raise errors.TrainingError(
          f"the {name} split has no usable rows ({counts[name]}); check the "
          "data source flags, --label_map and --text_column/--label_column")
  classes = counts["train"].get("classes", {})
  if len(classes) == 1:
    (only, rows), = classes.items()
    raise errors.TrainingError(
        f"the training split has examples of class {only} only ({rows} "
        "rows): a classifier learns nothing from one class. Check "
        "--label_column and --label_map (each class needs a raw label)")


def flat_counts(counts):
  """{split: count()} -> summary.json's data.<split>.<what> keys."""
  flat = {}
  for split, c in counts.items():
    flat[f"data.{split}.rows_read"] = c["rows_read"]
    flat[f"data.{split}.rows_used"] = c["rows_used"]
    for reason, n in c["rejected"].items():
      flat[f"data.{split}.rejected.{reason}"] = n
  return flat
