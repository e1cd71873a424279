"""Record streams: where examples come from, each row with its fate.

Every source yields one record per row it reads, valid or not, in chunks
(`chunks()`: a dataset of dicts of vectors, so per-row work is vectorized):

    {"index": int64, "line": int64, "text": string [segments],
     "label": int64 (float32 for regression), "reason": int32}

`text` holds one string per text field: one, or two for a sentence pair.
`label` is already the class id (after the label map; for regression the
score) and `reason` is 0 for a usable row, else an index into `REASONS`.
Keeping rejected rows in the stream (and filtering them in tf.data) lets one
mechanism count every outcome exactly, for TFDS and files alike. `index` is
the row's position in the source; splits and data order are pure functions
of it and the seed.
"""

import bisect
import dataclasses
import socket
import urllib.parse

import numpy as np
import tensorflow as tf

from trainer.data import files
from trainer.foundation import config
from trainer.foundation import errors

REASONS = files.REASONS
REASON_ID = {name: i for i, name in enumerate(REASONS)}

DataError = errors.DataError


def label_kind(label_map, regression=False):
  """How a source's raw labels are read (`files.raw_label`): float for
  regression, int when every key of `label_map` is an integer, else word."""
  if regression:
    return "float"
  numeric = all(files.raw_label(str(k), "int") is not None for k in label_map)
  return "int" if numeric else "word"


def _label_table(label_map, kind):
  """raw label string -> class id (-1: not in the map)."""
  keys = sorted(files.raw_label(str(k), kind) for k in label_map)
  by_key = {files.raw_label(str(k), kind): v for k, v in label_map.items()}
  return tf.lookup.StaticHashTable(
      tf.lookup.KeyValueTensorInitializer(
          tf.constant(keys or [""], tf.string),
          tf.constant([by_key[k] for k in keys] or [-1], tf.int64)),
      default_value=-1)


def _finish(ds, label_map, regression=False, labelled=True):
  """Maps raw labels (strings) through `label_map` (or, for regression, to
  float32 scores) and sets the reasons for bad labels and empty text fields
  (`empty_text` for the first, `empty_text_pair` for the second). Without
  labels (`labelled` False: texts to predict) every label is 0.

  Works on chunks (every field a vector; text [rows, segments]) so the
  per-row cost is vectorized.
  """
  table = None if regression or not labelled else _label_table(
      label_map, label_kind(label_map))

  @tf.autograph.experimental.do_not_convert  # Python `if`s on flags only
  def fn(index, line, text_, raw_label, reason):
    if not labelled:
      label = tf.zeros_like(reason)
      unmapped = tf.zeros_like(reason, tf.bool)
    elif regression:
      usable = tf.equal(reason, 0)
      label = tf.strings.to_number(tf.where(usable, raw_label, "0"), tf.float32)
      unmapped = tf.zeros_like(usable)
    else:
      label = table.lookup(raw_label)
      unmapped = label < 0
    empty = tf.equal(tf.strings.length(tf.strings.strip(text_)), 0)
    empty_reason = tf.where(empty[:, 0], REASON_ID["empty_text"], 0)
    if text_.shape[1] > 1:
      empty_reason = tf.where(
          tf.equal(empty_reason, 0) & tf.reduce_any(empty[:, 1:], axis=1),
          REASON_ID["empty_text_pair"], empty_reason)
    reason = tf.where(
        reason > 0, reason,
        tf.where(unmapped, REASON_ID["label_not_in_map"], empty_reason))
    return dict(
        index=index,
        line=line,
        text=text_,
        label=label,
        reason=tf.cast(reason, tf.int32))

  return ds.map(fn, num_parallel_calls=tf.data.AUTOTUNE, deterministic=True)


def _mocked(builder):
  """Under `tfds.testing.mock_data` nothing is downloaded: its
  download_and_prepare is the mock's."""
  prepare = type(builder).download_and_prepare
  return getattr(prepare, "__module__",
                 "").startswith("tensorflow_datasets.testing")


def _check_download(builder, name, data_dir):
  """A dataset not prepared in `data_dir` is downloaded by TFDS, which
  retries an unreachable host for about 3.5 minutes: fail in seconds."""
  if builder.is_prepared() or _mocked(builder):
    return
  for url in sorted(builder.url_infos or {}):
    parsed = urllib.parse.urlsplit(url)
    port = parsed.port or (443 if parsed.scheme == "https" else 80)
    try:
      socket.create_connection((parsed.hostname, port), timeout=10).close()
    except OSError as e:
      raise DataError(
          f"--tfds_name={name} is not prepared in --data_dir="
          f"{data_dir or '~/tensorflow_datasets'} and its download host "
          f"{parsed.hostname} is unreachable ({e.strerror or e}); prepare it "
          f"where there is network (`tfds build {name} --data_dir=DIR`) and "
          "point --data_dir at DIR (gs:// works)") from None


def tfds_splits(name, data_dir):
  """The split names TFDS knows for `name` (fails in seconds when the data
  is not prepared and its download host is unreachable)."""
  import tensorflow_datasets as tfds  # pylint: disable=g-import-not-at-top
  try:
    builder = tfds.builder(name, data_dir=data_dir)
    splits = set(builder.info.splits)
  except Exception as e:  # Unknown name, unreadable data_dir, ...
    raise DataError(f"--tfds_name={name}: {errors.first_line(e)}") from None
  _check_download(builder, name, data_dir)
  return splits


def load_tfds(name, split, data_dir, features=(), hint="--text_key"):
  """`tfds.load` of one split in its stored order, holding `features`, or a
  DataError saying what to do (`hint`: the flags that name features)."""
  import tensorflow_datasets as tfds  # pylint: disable=g-import-not-at-top
  try:
    ds = tfds.load(
        name,
        split=split,
        data_dir=data_dir,
        shuffle_files=False,
        download=True)
  except Exception as e:  # TFDS raises many types; all mean "not readable".
    raise DataError(
        f"cannot load TFDS dataset --tfds_name={name} split {split!r} "
        f"(data_dir={data_dir}): {errors.first_line(e)}. Prepare it with "
        "`tfds build` where there is network, then point --data_dir at it "
        "(gs:// works).") from None
  missing = [k for k in features if k not in ds.element_spec]
  if missing:
    raise DataError(f"TFDS dataset {name} has no feature {missing[0]!r}; "
                    f"features are {sorted(ds.element_spec)} (set {hint})")
  return ds


@dataclasses.dataclass(frozen=True)
class TfdsSource:
  """A split of a TFDS text classification dataset."""

  name: str
  split: str
  data_dir: str | None
  text_key: str  # one feature, or two comma-separated (a sentence pair)
  label_key: str
  label_map: dict
  regression: bool = False

  def describe(self):
    return f"TFDS {self.name} split {self.split}"

  def stamp(self):
    """What changes when the data does (a prepared TFDS version does not)."""
    return self.describe()

  def chunks(self, stripes=1):
    """TFDS stores examples shuffled already, so `stripes` is not needed."""
    del stripes
    text_keys = [k.strip() for k in self.text_key.split(",")]
    label_key = self.label_key
    ds = load_tfds(self.name, self.split, self.data_dir,
                   text_keys + [label_key], "--text_key / --label_key")
    regression = self.regression

    def columns(i, ex):
      label = ex[label_key]
      if regression:
        raw = tf.strings.as_string(tf.cast(label, tf.float32), shortest=True)
      else:
        raw = tf.strings.as_string(tf.cast(label, tf.int64))
      texts = tf.stack([ex[k] for k in text_keys], axis=1)
      return (i, i + 1, texts, raw, tf.zeros_like(i, tf.int32))

    ds = ds.enumerate().batch(_CHUNK).map(columns)
    return _finish(ds, self.label_map, regression)


def file_stamp(path, described):
  """`described` (a source's `describe()`) with the size and modification
  time of the file at `path`: what changes when the file does (the
  description alone where the file cannot be read)."""
  try:
    stat = tf.io.gfile.stat(path)
  except tf.errors.OpError:
    return described
  return f"{described} {stat.length} {stat.mtime_nsec}"


@dataclasses.dataclass(frozen=True)
class FileSource:
  """A delimited text file, plain or a zip member (local, gs://, ram://).

  `records(stripes=K)` reads K contiguous stretches of the file in
  round-robin, so a label-sorted file (like the original Sentiment140 CSV)
  yields a mixed stream before any shuffle window; the row indices (and so
  the validation carve) do not depend on K.
  """

  path: str
  label_map: dict
  file_format: str = config.default("file_format")
  # One column, or two comma-separated (a pair).
  text_column: str = config.default("text_column")
  label_column: str = config.default("label_column")  # '': no labels
  encoding: str = config.default("encoding")
  member: str = ""
  header: str = config.default("header")
  quoting: str = config.default("quoting")
  regression: bool = False

  def describe(self):
    return f"{self.path}" + (f" member {self.member}" if self.member else "")

  def stamp(self):
    """What changes when the file does: its size and modification time."""
    return file_stamp(self.path, self.describe())

  def layout(self):
    try:
      return files.detect_layout(self.path, self.member, self.file_format,
                                 self.text_column, self.label_column,
                                 self.encoding, self.header, self.quoting,
                                 label_kind(self.label_map, self.regression))
    except OSError as e:
      raise DataError(
          f"cannot read {self.path}: {errors.first_line(e)}") from None

  def _stripe_starts(self, layout, stripes):
    key = (self.path, self.member, layout, stripes)
    if key not in _STRIPES:
      marks, total = files.scan_offsets(self.path, self.member, layout)
      _STRIPES[key] = (stripe_starts(marks, total, stripes), total)
    return _STRIPES[key]

  def chunks(self, stripes=1):
    layout = self.layout()
    path, member = self.path, self.member

    def rows(start=None, stop=None):
      # Chunks of rows, unbatched in tf.data: one Python call per row costs
      # ~20x more than the parsing itself.
      chunk = []
      for index, line, _, texts, label, reason in files.read_rows(
          path, member, layout, start, stop):
        chunk.append((index, line, [t.encode("utf-8") for t in texts],
                      label.encode("utf-8"), reason))
        if len(chunk) == _CHUNK:
          yield _columns(chunk)
          chunk = []
      if chunk:
        yield _columns(chunk)

    segments = len(layout.text_indices)
    signature = (tf.TensorSpec([None], tf.int64), tf.TensorSpec([None],
                                                                tf.int64),
                 tf.TensorSpec([None, segments],
                               tf.string), tf.TensorSpec([None], tf.string),
                 tf.TensorSpec([None], tf.int32))
    finish = lambda ds: _finish(ds, self.label_map, self.regression,
                                bool(self.label_column))
    if stripes <= 1:
      return finish(
          tf.data.Dataset.from_generator(rows, output_signature=signature))
    starts, total = self._stripe_starts(layout, stripes)
    return finish(striped(rows, signature, starts, total))


_CHUNK = 512


def stripe_starts(marks, total, stripes):
  """Where each of `stripes` contiguous stretches of a file's `total` rows
  begins: for each, the last of the (index, line, offset) `marks` at or
  before its ideal first row (fewer stretches when marks coincide)."""
  indices = [m[0] for m in marks]
  picks = sorted({
      bisect.bisect_right(indices, k * total // stripes) - 1
      for k in range(stripes)
  })
  return [marks[p] for p in picks if p >= 0]


def striped(rows, signature, starts, total):
  """Chunks of rows read at each of `starts` in round-robin, one row from
  each stretch in turn. `rows(start, stop_index)` yields chunks (tuples of
  arrays, `signature`) of the rows from the mark `start` up to the row
  `stop_index`; each stretch ends where the next begins."""
  bounds = [s[0] for s in starts[1:]] + [total]

  def stripe(k):
    k = int(k)
    return rows(starts[k], bounds[k])

  ds = tf.data.Dataset.range(len(starts)).interleave(
      lambda k: tf.data.Dataset.from_generator(
          stripe, args=(k,), output_signature=signature).unbatch(),
      cycle_length=len(starts),
      block_length=1)
  return ds.batch(_CHUNK)


def _columns(rows):
  index, line, texts, label, reason = zip(*rows)
  return (np.array(index,
                   np.int64), np.array(line,
                                       np.int64), np.array(texts, dtype=object),
          np.array(label, dtype=object), np.array(reason, np.int32))


_STRIPES = {}  # (path, member, layout, stripes) -> (starts, total rows)
