"""Record streams: where examples come from, each row with its fate.

Every source yields one record per row it reads, valid or not:

    {"index": int64, "line": int64, "text": string, "label": int64,
     "reason": int32}

`label` is already the class id (after the label map) and `reason` is 0 for a
usable row, else an index into `REASONS`. Keeping rejected rows in the stream
(and filtering them in tf.data) lets one mechanism count every outcome
exactly, for TFDS and files alike. `index` is the row's position in the
source; splits and data order are pure functions of it and the seed.
"""

import csv
import dataclasses

import tensorflow as tf

REASONS = ("ok", "label_not_in_map", "label_not_a_number", "empty_text",
           "malformed_row", "invalid_utf8")
REASON_ID = {name: i for i, name in enumerate(REASONS)}

RECORD_SPEC = {
    "index": tf.TensorSpec([], tf.int64),
    "line": tf.TensorSpec([], tf.int64),
    "text": tf.TensorSpec([], tf.string),
    "label": tf.TensorSpec([], tf.int64),
    "reason": tf.TensorSpec([], tf.int32),
}


class DataError(ValueError):
  """A data source is missing, unreadable or of the wrong format."""


def parse_label_map(spec):
  """'0:0,4:1' -> {0: 0, 4: 1}; raises ValueError on a malformed spec."""
  mapping = {}
  for item in spec.split(","):
    raw, sep, cls = item.strip().partition(":")
    if not sep:
      raise ValueError(f"label map entry {item!r} is not of the form raw:class")
    mapping[int(raw)] = int(cls)
  return mapping


def _label_table(label_map):
  keys = tf.constant(sorted(label_map), tf.int64)
  values = tf.constant([label_map[k] for k in sorted(label_map)], tf.int64)
  return tf.lookup.StaticHashTable(
      tf.lookup.KeyValueTensorInitializer(keys, values), default_value=-1)


def _finish(ds, label_map):
  """Maps raw labels through `label_map`, sets reasons for bad labels/text."""
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


@dataclasses.dataclass(frozen=True)
class TfdsSource:
  """A split of a TFDS text classification dataset."""

  name: str
  split: str
  data_dir: str | None
  text_key: str
  label_key: str
  label_map: dict

  def records(self):
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
          f"{self.split!r} (data_dir={self.data_dir}): {first_line(e)}. "
          "Prepare it with `tfds build` where there is network, then point "
          "--data_dir at it (gs:// works).") from None
    text_key, label_key = self.text_key, self.label_key
    spec = ds.element_spec
    for key in (text_key, label_key):
      if key not in spec:
        raise DataError(f"TFDS dataset {self.name} has no feature {key!r}; "
                        f"features are {sorted(spec)} (set --text_key / "
                        "--label_key)")
    ds = ds.enumerate().map(lambda i, ex: (i, i + 1, ex[
        text_key], tf.cast(ex[label_key], tf.int64), tf.constant(0, tf.int32)))
    return _finish(ds, self.label_map)


def first_line(exc):
  msg = str(exc).strip().splitlines()
  return msg[0] if msg else type(exc).__name__


@dataclasses.dataclass(frozen=True)
class CsvSource:
  """A delimited text file with a header row (local, gs:// or ram://)."""

  path: str
  text_column: str
  label_column: str
  label_map: dict
  delimiter: str = ","
  encoding: str = "utf-8"

  def _column_indices(self, header):

    def find(col, flag):
      if col in header:
        return header.index(col)
      if col.isdigit() and int(col) < len(header):
        return int(col)
      raise DataError(f"{self.path}: no column {col!r} ({flag}); the header "
                      f"has {header}")

    return find(self.text_column,
                "--text_column"), find(self.label_column, "--label_column")

  def check(self):
    """Fails fast (before training) when the file or its columns are wrong."""
    if not tf.io.gfile.exists(self.path):
      raise DataError(f"data file {self.path} does not exist")
    with tf.io.gfile.GFile(self.path, "rb") as f:
      first = f.readline().decode(self.encoding, errors="replace")
    header = next(csv.reader([first], delimiter=self.delimiter), [])
    self._column_indices(header)

  def _rows(self):
    with tf.io.gfile.GFile(self.path, "rb") as raw:
      reader = csv.reader(
          _decoded_lines(raw, self.encoding),
          delimiter=self.delimiter,
          strict=True)
      header = next(reader)
      text_i, label_i = self._column_indices(header)
      width = len(header)
      index = 0
      while True:
        try:
          row = next(reader)
          reason = 0
        except StopIteration:
          return
        except csv.Error:
          row, reason = [], REASON_ID["malformed_row"]
        line = reader.line_num
        text_, label = "", -1
        if reason == 0 and len(row) != width:
          reason = REASON_ID["malformed_row"]
        if reason == 0:
          text_ = row[text_i]
          if _INVALID in text_:
            reason = REASON_ID["invalid_utf8"]
          else:
            try:
              label = int(row[label_i].strip())
            except ValueError:
              reason = REASON_ID["label_not_a_number"]
        yield index, line, text_.encode("utf-8"), label, reason
        index += 1

  def records(self):
    self.check()
    ds = tf.data.Dataset.from_generator(
        self._rows,
        output_signature=(tf.TensorSpec([],
                                        tf.int64), tf.TensorSpec([], tf.int64),
                          tf.TensorSpec([],
                                        tf.string), tf.TensorSpec([], tf.int64),
                          tf.TensorSpec([], tf.int32)))
    return _finish(ds, self.label_map)


_INVALID = "\udcff"  # Marker for undecodable bytes (see _decoded_lines).


def _decoded_lines(raw, encoding):
  """Yields text lines; a line with bytes invalid in the encoding is marked."""
  for line in raw:
    try:
      yield line.decode(encoding)
    except UnicodeDecodeError:
      yield line.decode(
          encoding, errors="replace").rstrip("\r\n").replace(
              "\ufffd", _INVALID) + "\n"
