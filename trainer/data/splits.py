"""Splits: which rows of which source train, validate and test a run.

`make_splits(task, data)` turns a run's Task and its data flags (`DataSpec`,
resolved once) into named `Split`s: TFDS's own splits, a file and its
carved validation part, the demo's files; `file_split` and `tfds_split` are
one labelled file or one TFDS split read whole (what `trainer.evaluate`
scores). The label map of each source is decided here, once: --label_map,
else Sentiment140's 0:0,4:1 (TFDS, or a file in its layout), else the
identity. One counting pass (`count_splits`) gives every split's rows read,
used and rejected by reason, checked against --max_bad_fraction and cached
in the run's folder.
"""

import dataclasses

from absl import logging
import tensorflow as tf

from trainer.base import errors
from trainer.base import run_dir
from trainer.base import tasks
from trainer.data import files
from trainer.data import sources

_HEAD_ROWS = 2000

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

  tfds_name: str = ""
  data_dir: str = ""
  train_file: str = ""
  eval_file: str = ""
  test_file: str = ""
  file_format: str = "auto"
  encoding: str = ""
  header: str = "auto"
  quoting: str = "csv"
  label_map: str = ""
  validation_fraction: float = 0.05
  validation_fold: int = 0
  seed: int = 0
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


def _make_splits(task, data):
  carved = (data.validation_fraction, data.seed, data.validation_fold)

  def carve(source):
    return dict(
        train=Split("train", source, False, *carved),
        validation=Split("validation", source, True, *carved))

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


def _row_digests(chunk):
  """int64 [rows]: a fingerprint of each row as a run sees it (its index,
  texts, label and fate); their sum (order-free, wrapping) is the split's
  content digest."""
  label = tf.strings.as_string(chunk["label"])
  fields = tf.strings.reduce_join(chunk["text"], axis=1, separator="\x1f")
  keys = tf.strings.join([
      tf.strings.as_string(chunk["index"]), fields, label,
      tf.strings.as_string(chunk["reason"])
  ],
                         separator="\x1e")
  return tf.bitcast(tf.fingerprint(keys), tf.int64)


def count(split, limit=None, num_classes=0):
  """One pass over a split (or its first `limit` rows): rows read, used and
  rejected per reason, (with `num_classes`) the usable rows per class id,
  as {"0": n, ...}, and `digest`, a hash of every row's content (what a
  resume checks the data against). Counted a chunk at a time (a bincount
  and a fingerprint per chunk)."""
  n, k = len(sources.REASONS), max(num_classes, 1)
  chunks = split.chunks()
  if limit:
    chunks = chunks.unbatch().take(limit).batch(512)

  def per_chunk(chunk):
    reasons = tf.math.bincount(
        chunk["reason"], minlength=n, maxlength=n, dtype=tf.int64)
    digest = tf.reduce_sum(_row_digests(chunk))
    if chunk["label"].dtype.is_floating or num_classes < 2:
      return reasons, tf.zeros([k], tf.int64), digest
    usable = tf.boolean_mask(chunk["label"], tf.equal(chunk["reason"], 0))
    classes = tf.math.bincount(
        tf.cast(usable, tf.int32), minlength=k, maxlength=k, dtype=tf.int64)
    return reasons, classes, digest

  zeros = (tf.zeros([n],
                    tf.int64), tf.zeros([k],
                                        tf.int64), tf.constant(0, tf.int64))
  totals, classes, digest = chunks.map(
      per_chunk, num_parallel_calls=tf.data.AUTOTUNE).reduce(
          zeros, lambda a, b: tuple(x + y for x, y in zip(a, b)))
  totals, classes = totals.numpy(), classes.numpy()
  rejected = {
      sources.REASONS[i]: int(totals[i]) for i in range(1, n) if totals[i]
  }
  counts = dict(
      rows_read=int(totals.sum()),
      rows_used=int(totals[0]),
      rejected=rejected,
      digest=f"{int(digest.numpy()) & (1 << 64) - 1:016x}")
  if num_classes > 1:
    counts["classes"] = {str(i): int(c) for i, c in enumerate(classes) if c}
  return counts


def fingerprint(counts):
  """What a run's training and validation data were ({split: rows read,
  used, digest}), saved in config.json and checked on resume."""
  return {
      name: {
          k: counts[name].get(k) for k in ("rows_read", "rows_used", "digest")
      } for name in ("train", "validation") if name in counts
  }


def check_same_data(saved, counts, model_dir):
  """Raises ConfigError when the data differ from `saved` (a run's
  `fingerprint`); a run from before fingerprints (None) passes."""
  if not saved:
    return
  now = fingerprint(counts)
  changes = []
  for name in sorted(set(saved) | set(now)):
    old, new = saved.get(name, {}), now.get(name, {})
    for key in ("rows_read", "rows_used", "digest"):
      if old.get(key) != new.get(key):
        changes.append(f"{name} {key} {old.get(key)} -> {new.get(key)}")
        break
  if changes:
    raise errors.ConfigError(
        f"--model_dir={model_dir} holds the checkpoints of a run trained on "
        f"other data ({'; '.join(changes)}): resuming would change its "
        "splits, order and validation set. Restore the data the run began "
        "with, or use a new --model_dir; nothing was changed")


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
              num_classes, "digest"))
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


def _no_usable_rows(splits, counts, names, carved):
  """Raises the TrainingError for splits `names` (a source's carve, or one
  split) with no usable row: empty, or every row rejected (by reason)."""
  what = (
      splits[names[0]].source.describe()
      if carved else f"the {names[0]} split ({splits[names[0]].describe()})")
  read = sum(counts[k]["rows_read"] for k in names)
  if not read:
    raise errors.TrainingError(f"{what} holds no data rows (a header only, or "
                               "an empty file); check the data source flags")
  rejected = {}
  for k in names:
    for reason, n in counts[k]["rejected"].items():
      rejected[reason] = rejected.get(reason, 0) + n
  reasons = ", ".join(f"{r} {n}" for r, n in sorted(rejected.items()))
  raise errors.TrainingError(
      f"{what} has no usable rows ({read} read, rejected: {reasons}); check "
      "--label_map (every raw label must map to a class), "
      "--text_column/--label_column and --file_format")


def check_counts(splits, counts, validation_fraction):
  """Stops, saying why, on a split that leaves nothing to learn from."""
  validation = splits["validation"]
  carved = validation.holdout is not None
  # A carve of a source without usable rows is the source's problem.
  groups = [("train", "validation")] if carved else [("train",),
                                                     ("validation",)]
  for group in groups:
    if not sum(counts[k]["rows_used"] for k in group):
      _no_usable_rows(splits, counts, group, carved)
  if counts["validation"]["rows_used"] == 0 and carved:
    raise errors.TrainingError(
        f"the validation split carved from {validation.source.describe()} "
        f"at --validation_fraction={validation_fraction} holds no usable row "
        f"(the file has {counts['train']['rows_used']} usable rows); raise "
        "--validation_fraction or give --eval_file")
  if counts["train"]["rows_used"] == 0:
    raise errors.TrainingError(
        f"the training part of {validation.source.describe()} holds no "
        f"usable row at --validation_fraction={validation_fraction}; lower "
        "it or give --eval_file")
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
