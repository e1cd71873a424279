"""Record streams: where examples come from, each row with its fate.

Every source yields one record per row it reads, valid or not, in chunks
(`chunks()`: a dataset of dicts of vectors, so per-row work is vectorized):

    {"index": int64, "line": int64, "text": string, "label": int64,
     "reason": int32}

`label` is already the class id (after the label map) and `reason` is 0 for a
usable row, else an index into `REASONS`. Keeping rejected rows in the stream
(and filtering them in tf.data) lets one mechanism count every outcome
exactly, for TFDS and files alike. `index` is the row's position in the
source; splits and data order are pure functions of it and the seed.
"""

import bisect
import dataclasses
import socket
import urllib.parse

import numpy as np
import tensorflow as tf

from trainer import errors
from trainer import files

REASONS = files.REASONS
REASON_ID = {name: i for i, name in enumerate(REASONS)}

RECORD_SPEC = {
    "index": tf.TensorSpec([], tf.int64),
    "line": tf.TensorSpec([], tf.int64),
    "text": tf.TensorSpec([], tf.string),
    "label": tf.TensorSpec([], tf.int64),
    "reason": tf.TensorSpec([], tf.int32),
}

DataError = errors.DataError


def _label_table(label_map):
  keys = tf.constant(sorted(label_map), tf.int64)
  values = tf.constant([label_map[k] for k in sorted(label_map)], tf.int64)
  return tf.lookup.StaticHashTable(
      tf.lookup.KeyValueTensorInitializer(keys, values), default_value=-1)


def _finish(ds, label_map):
  """Maps raw labels through `label_map`, sets reasons for bad labels/text.

  Works on chunks (every field a vector) so the per-row cost is vectorized.
  """
  table = _label_table(label_map)

  def fn(index, line, text_, raw_label, reason):
    label = table.lookup(raw_label)
    empty = tf.equal(tf.strings.length(tf.strings.strip(text_)), 0)
    reason = tf.where(
        reason > 0, reason,
        tf.where(label < 0, REASON_ID["label_not_in_map"],
                 tf.where(empty, REASON_ID["empty_text"], 0)))
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


@dataclasses.dataclass(frozen=True)
class TfdsSource:
  """A split of a TFDS text classification dataset."""

  name: str
  split: str
  data_dir: str | None
  text_key: str
  label_key: str
  label_map: dict

  def describe(self):
    return f"TFDS {self.name} split {self.split}"

  def stamp(self):
    """What changes when the data does (a prepared TFDS version does not)."""
    return self.describe()

  def chunks(self, stripes=1):
    """TFDS stores examples shuffled already, so `stripes` is not needed."""
    del stripes
    import tensorflow_datasets as tfds  # pylint: disable=g-import-not-at-top
    try:
      ds = tfds.load(
          self.name,
          split=self.split,
          data_dir=self.data_dir,
          shuffle_files=False,
          download=True)
    except Exception as e:  # TFDS raises many types; all mean "not readable".
      raise DataError(
          f"cannot load TFDS dataset --tfds_name={self.name} split "
          f"{self.split!r} (data_dir={self.data_dir}): "
          f"{errors.first_line(e)}. "
          "Prepare it with `tfds build` where there is network, then point "
          "--data_dir at it (gs:// works).") from None
    text_key, label_key = self.text_key, self.label_key
    spec = ds.element_spec
    for key in (text_key, label_key):
      if key not in spec:
        raise DataError(f"TFDS dataset {self.name} has no feature {key!r}; "
                        f"features are {sorted(spec)} (set --text_key / "
                        "--label_key)")
    ds = ds.enumerate().batch(_CHUNK).map(
        lambda i, ex: (i, i + 1, ex[text_key], tf.cast(ex[label_key], tf.int64),
                       tf.zeros_like(i, tf.int32)))
    return _finish(ds, self.label_map)


@dataclasses.dataclass(frozen=True)
class FileSource:
  """A delimited text file, plain or a zip member (local, gs://, ram://).

  `records(stripes=K)` reads K contiguous stretches of the file in
  round-robin, so a label-sorted file (like the original Sentiment140 CSV)
  yields a mixed stream before any shuffle buffer; the row indices (and so
  the validation carve) do not depend on K.
  """

  path: str
  label_map: dict
  file_format: str = "auto"
  text_column: str = "text"
  label_column: str = "label"
  encoding: str = ""
  member: str = ""

  def describe(self):
    return f"{self.path}" + (f" member {self.member}" if self.member else "")

  def stamp(self):
    """What changes when the file does: its size and modification time."""
    try:
      stat = tf.io.gfile.stat(self.path)
    except tf.errors.OpError:
      return self.describe()
    return f"{self.describe()} {stat.length} {stat.mtime_nsec}"

  def layout(self):
    try:
      return files.detect_layout(self.path, self.member, self.file_format,
                                 self.text_column, self.label_column,
                                 self.encoding)
    except OSError as e:
      raise DataError(
          f"cannot read {self.path}: {errors.first_line(e)}") from None

  def _stripe_starts(self, layout, stripes):
    key = (self.path, self.member, layout, stripes)
    if key not in _STRIPES:
      marks, total = files.scan_offsets(self.path, self.member, layout)
      indices = [m[0] for m in marks]
      # For each stripe, the last mark at or before its ideal first row.
      picks = sorted({
          bisect.bisect_right(indices, k * total // stripes) - 1
          for k in range(stripes)
      })
      _STRIPES[key] = ([marks[p] for p in picks if p >= 0], total)
    return _STRIPES[key]

  def chunks(self, stripes=1):
    layout = self.layout()
    path, member = self.path, self.member

    def rows(start=None, stop=None):
      # Chunks of rows, unbatched in tf.data: one Python call per row costs
      # ~20x more than the parsing itself.
      chunk = []
      for index, line, _, text_, label, reason in files.read_rows(
          path, member, layout, start, stop):
        chunk.append((index, line, text_.encode("utf-8"), label, reason))
        if len(chunk) == _CHUNK:
          yield _columns(chunk)
          chunk = []
      if chunk:
        yield _columns(chunk)

    signature = tuple(
        tf.TensorSpec([None], dtype)
        for dtype in (tf.int64, tf.int64, tf.string, tf.int64, tf.int32))
    if stripes <= 1:
      ds = tf.data.Dataset.from_generator(rows, output_signature=signature)
      return _finish(ds, self.label_map)
    starts, total = self._stripe_starts(layout, stripes)
    bounds = [s[0] for s in starts[1:]] + [total]

    def stripe(k):
      k = int(k)
      return rows(starts[k], bounds[k])

    # Round-robin over the stripes, one row from each in turn.
    ds = tf.data.Dataset.range(len(starts)).interleave(
        lambda k: tf.data.Dataset.from_generator(
            stripe, args=(k,), output_signature=signature).unbatch(),
        cycle_length=len(starts),
        block_length=1)
    return _finish(ds.batch(_CHUNK), self.label_map)


_CHUNK = 512


def _columns(rows):
  index, line, text_, label, reason = zip(*rows)
  return (np.array(index,
                   np.int64), np.array(line,
                                       np.int64), np.array(text_, dtype=object),
          np.array(label, np.int64), np.array(reason, np.int32))


_STRIPES = {}  # (path, member, layout, stripes) -> (starts, total rows)
