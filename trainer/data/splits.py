"""Splits: which rows of which source train, validate and test a run.

`make_splits(task, data)` turns a run's Task and its data flags (`DataSpec`,
resolved once) into named `Split`s: TFDS's own splits, a file and its
carved validation part, the demo's files; `file_split` and `tfds_split` are
one labelled file or one TFDS split read whole (what `trainer.evaluate`
scores). The label map of each source is decided here, once: --label_map,
else Sentiment140's 0:0,4:1 (TFDS, or a file in its layout), else the
identity. How many rows each split holds, and whether they are usable, is
`trainer.data.counts`'s.
"""

import dataclasses

from absl import logging
import tensorflow as tf

from trainer.data import files
from trainer.data import sources
from trainer.data import tag_sets
from trainer.data import tagged_sources
from trainer.foundation import config
from trainer.foundation import errors
from trainer.foundation import tasks

_BUCKETS = 10_000


def one_text(chunk):
  """A chunk whose text [rows, 1] is squeezed to [rows] (one text field;
  a pair's [rows, 2] stays)."""
  if chunk["text"].shape[1] != 1:
    return chunk
  return dict(chunk, text=chunk["text"][:, 0])


@dataclasses.dataclass(frozen=True)
class DataSpec:
  """A run's data flags, as given (`from_flags`): where the examples come
  from and how to read them. `demo_files` holds the demo text set's
  (train, validation) CSVs when the run is the embedded demo's."""

  tfds_name: str = config.default("tfds_name")
  data_dir: str = config.default("data_dir")
  train_file: str = config.default("train_file")
  eval_file: str = config.default("eval_file")
  test_file: str = config.default("test_file")
  file_format: str = config.default("file_format")
  encoding: str = config.default("encoding")
  header: str = config.default("header")
  quoting: str = config.default("quoting")
  label_map: str = config.default("label_map")
  tag_column: int = config.default("tag_column")
  validation_fraction: float = config.default("validation_fraction")
  validation_fold: int = config.default("validation_fold")
  seed: int = config.default("seed")
  demo_files: tuple = ()


def from_flags(c, demo_files=()):
  """The DataSpec of the data flags of `c` (a Config, or anything with
  those fields)."""
  names = [
      f.name for f in dataclasses.fields(DataSpec) if f.name != "demo_files"
  ]
  values = {name: getattr(c, name) for name in names}
  return DataSpec(**values, demo_files=tuple(demo_files))


@dataclasses.dataclass(frozen=True)
class Split:
  """A named split: a source, optionally a seeded part of it.

  `holdout` is None for a whole source. Otherwise the source's rows are
  partitioned by a hash of (seed, row index): rows whose bucket falls in
  [fold, fold + 1) x `fraction` form the held-out part (holdout=True), the
  rest the other part.
  """

  name: str
  source: object
  holdout: bool | None = None
  fraction: float = 0.0
  seed: int = 0
  fold: int = 0

  def chunks(self, stripes=1):
    """The split's records in chunks (dicts of equal-length vectors)."""
    ds = self.source.chunks(stripes=stripes)
    if self.holdout is None:
      return ds
    low = int(round(self.fold * self.fraction * _BUCKETS))
    high = int(round((self.fold + 1) * self.fraction * _BUCKETS))
    seed, holdout = self.seed, self.holdout

    def keep(chunk):
      keys = tf.strings.join(
          [str(seed), tf.strings.as_string(chunk["index"])], separator=":")
      bucket = tf.strings.to_hash_bucket_fast(keys, _BUCKETS)
      held = (bucket >= low) & (bucket < high)
      mask = tf.equal(held, holdout)
      return {k: tf.boolean_mask(v, mask) for k, v in chunk.items()}

    return ds.map(keep, num_parallel_calls=tf.data.AUTOTUNE, deterministic=True)

  def records(self, stripes=1):
    """One record per row: dict of scalars, `text` a string (one text
    field) or a [2] vector (a pair), as `usable_rows` gives them."""
    return self.chunks(stripes).map(one_text).unbatch()

  def describe(self):
    part = ""
    if self.holdout is not None:
      fold = f" of fold {self.fold}" if self.fold else ""
      part = (f" ({'held-out' if self.holdout else 'remaining'} "
              f"{self.fraction if self.holdout else 1 - self.fraction:.0%}"
              f"{fold})")
    return self.source.describe() + part


def _tfds_source(task, data, split, label_map):
  return sources.TfdsSource(data.tfds_name, split, data.data_dir or None,
                            ",".join(task.text_fields), task.label_field,
                            label_map, task.regression)


def _tfds(task, data, carve):
  """TFDS's own splits: validation (GLUE's MNLI: validation_matched, with
  each other validation_* split evaluated beside it), else one carved from
  train; a test split only when its labels are known (GLUE hides them:
  -1)."""
  name, data_dir = data.tfds_name, data.data_dir or None
  known = tasks.tfds_task(name)
  available = sources.tfds_splits(
      name, data_dir) or set(known.splits if known else ())
  label_map = tasks.label_map(
      data.label_map,
      task.num_classes,
      sentiment140=name.startswith("sentiment140"))
  make = lambda split: _tfds_source(task, data, split, label_map)
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
  if "test" in available and not task.hidden_test_labels:
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


def _file_source(task, data, path, split, label_map=None):
  """The source of one file; `label_map` None: the file's own (--label_map,
  else Sentiment140's for a file in its layout, else the identity)."""
  member = ""
  if path.lower().endswith(".zip"):
    member = _zip_member(path, split)
    if member is None:
      return None
  source = sources.FileSource(path, {}, data.file_format,
                              ",".join(task.text_fields), task.label_field,
                              data.encoding, member, data.header, data.quoting,
                              task.regression)
  layout = source.layout()
  if label_map is None:
    label_map = tasks.label_map(
        data.label_map,
        task.num_classes,
        sentiment140=layout.file_format == "sentiment140")
  source = dataclasses.replace(source, label_map=label_map)
  layout = source.layout()  # with the label map's kind (int or word)
  logging.info("%s: %s; label map %s", source.describe(), layout.describe(),
               label_map)
  return source


def make_splits(task, data):
  """Returns {"train": Split, "validation": Split[, "test": Split]} of the
  Task `task` read per DataSpec `data`."""
  splits = _make_splits(task, data)
  validation = splits["validation"]
  if data.validation_fold and validation.holdout is None:
    raise errors.ConfigError(
        f"--validation_fold={data.validation_fold} is invalid: validation "
        f"is {validation.source.describe()}, not carved from the training "
        "data; leave it 0 (folds need --train_file without --eval_file, or "
        "a TFDS set without a validation split)")
  return splits


def tag_set(task):
  """The `TagSet` of a tagging Task (its class names and scheme)."""
  return tag_sets.TagSet(task.class_names, task.tag_scheme or "iob2")


def tagged_source(task, data, path="", split="", tags=None):
  """The source of tagged sentences of one file (`path`) or TFDS split
  (`split`), read with the tag set `tags` (None: raw, for `read_tag_set`)."""
  if path:
    return tagged_sources.FileSource(path, tags, tag_column=data.tag_column)
  return tagged_sources.TfdsSource(data.tfds_name, split, data.data_dir or None,
                                   tags, task.text_fields[0], task.label_field)


def _tagged_splits(task, data, carve):
  """A tagging task's splits: the files' (validation carved from the
  training file without --eval_file) or TFDS's."""
  tags = tag_set(task)
  if task.source == "tfds":
    available = tfds_split_names(data) or {"train", "validation", "test"}
    make = lambda split: tagged_source(task, data, split=split, tags=tags)
    splits = (
        dict(
            train=Split("train", make("train")),
            validation=Split("validation", make("validation")))
        if "validation" in available else carve(make("train")))
    if "test" in available:
      splits["test"] = Split("test", make("test"))
    return splits
  make = lambda path: tagged_source(task, data, path=path, tags=tags)
  splits = carve(make(data.train_file))
  if data.eval_file:
    splits = dict(
        train=Split("train", make(data.train_file)),
        validation=Split("validation", make(data.eval_file)))
  if data.test_file:
    splits["test"] = Split("test", make(data.test_file))
  return splits


def _make_splits(task, data):
  carved = (data.validation_fraction, data.seed, data.validation_fold)

  def carve(source):
    return dict(
        train=Split("train", source, False, *carved),
        validation=Split("validation", source, True, *carved))

  if task.tagging:
    return _tagged_splits(task, data, carve)
  if task.source == "tfds":
    return _tfds(task, data, carve)
  if task.source == "demo":
    csv = lambda p: sources.FileSource(p, {"0": 0, "1": 1}, "csv")
    train, validation = data.demo_files
    return dict(
        train=Split("train", csv(train)),
        validation=Split("validation", csv(validation)))
  train = _file_source(task, data, data.train_file, "train")
  splits = carve(train)
  if data.eval_file:
    splits = dict(
        train=Split("train", train),
        validation=Split(
            "validation",
            _file_source(task, data, data.eval_file, "validation",
                         train.label_map)))
  test_path = data.test_file or (
      data.train_file if data.train_file.lower().endswith(".zip") else "")
  test = test_path and _file_source(task, data, test_path, "test",
                                    train.label_map)
  if test:
    splits["test"] = Split("test", test)
  return splits


def tfds_split_names(data):
  """The splits the TFDS dataset of DataSpec `data` has (prepared or not)."""
  return sources.tfds_splits(data.tfds_name, data.data_dir or None)


def file_split(task, data, path):
  """Every row of one labelled file, never carved, read by the Task's
  columns with the file's own labels (a run on TFDS sentiment140, 0/4,
  scored on a 0/1 file keeps --label_map or the file's own layout only):
  what `trainer.evaluate --input_file` scores."""
  source = _file_source(task, data, path, "test")
  if source is None:
    raise errors.DataError(
        f"--input_file={path}: this zip holds no member named "
        "'test'; extract the file to score and pass it")
  return Split("input", source)


def tfds_split(task, data, split):
  """Every row of one TFDS split (`split`, e.g. test or train[:10%])."""
  available = tfds_split_names(data)  # empty: not known before loading
  if available and split.split("[")[0] not in available:
    raise errors.ConfigError(
        f"--split={split!r} is invalid: TFDS {data.tfds_name} has "
        f"splits {sorted(available)}")
  label_map = tasks.label_map(
      data.label_map,
      task.num_classes,
      sentiment140=data.tfds_name.startswith("sentiment140"))
  return Split(split, _tfds_source(task, data, split, label_map))
