"""Delimited text files: layout detection and robust, resumable row parsing.

Supports the Sentiment140 layout (six columns target,ids,date,flag,user,text;
no header, every field quoted, ISO-8859-1 — or the same with a header, as in
copies people make), CSV and TSV with a header row, plain, gzip-compressed
or inside a zip (the original `trainingandtestdata.zip`), on any filesystem
`tf.io.gfile` knows (local, gs://, ram://). A UTF-8 byte-order mark (what
Excel writes) is skipped; UTF-16/32 and binary files are refused with what
to do.

Rows are parsed one physical line at a time; a line whose quotes do not
balance is joined with the next lines (a quoted field may span lines) up to
`MAX_JOINED_LINES`, after which it is a malformed row and parsing resumes on
the following line — one broken quote never swallows the rest of the file.
Every row yields its fate (see `sources.REASONS`); nothing is dropped
silently.
"""

import collections
import csv
import dataclasses
import gzip
import math
import zipfile

import tensorflow as tf

from trainer.foundation import config
from trainer.foundation import errors

FORMATS = config.FILE_FORMATS
SENTIMENT140_HEADER = ["target", "ids", "date", "flag", "user", "text"]
MAX_JOINED_LINES = 50
# A row longer than this is rejected as field_too_long (Python's csv module
# refuses longer fields anyway); 100,000-character tweets fit.
MAX_ROW_CHARS = 16 * 1024 * 1024
csv.field_size_limit(MAX_ROW_CHARS)

# Why a row was not used; 0 means it was. Counted per split in summary.json.
# Ids are saved (stats.json, summary.json): new reasons are appended. The
# last six are a tagged sentence's (`trainer.data.tagged`): a tag outside the
# run's tag set, a CoNLL line with another column count than the file's
# first, a CoNLL line with a word and no tag, a JSON line that is not an
# object with a list of words and one of tags, lists of two lengths, an
# empty word or one holding whitespace.
REASONS = ("ok", "label_not_in_map", "label_not_a_number", "empty_text",
           "malformed_row", "invalid_utf8", "field_too_long", "empty_text_pair",
           "tag_not_in_set", "column_count_differs", "word_without_tag",
           "malformed_json", "tag_count_differs", "word_with_whitespace")
OK, NOT_A_NUMBER, MALFORMED, INVALID_UTF8, TOO_LONG = 0, 2, 4, 5, 6
_GZIP_MAGIC = b"\x1f\x8b"
_UTF8_BOM = b"\xef\xbb\xbf"

DataError = errors.DataError


@dataclasses.dataclass(frozen=True)
class Layout:
  """How to read a file: decided once from its first bytes and the flags."""

  file_format: str
  delimiter: str
  has_header: bool
  width: int
  text_indices: tuple  # one column per segment: (text,) or (text, pair)
  label_index: int | None  # None: labels not read (predict)
  encoding: str
  bom: int = 0  # bytes of a UTF-8 byte-order mark to skip at the start
  quoting: bool = True  # False: quotes are plain characters (GLUE's TSVs)
  label_kind: str = "int"  # int, word (a --label_map of words) or float

  def describe(self):
    header = "with a header" if self.has_header else "no header"
    bom = ", after a byte-order mark" if self.bom else ""
    quotes = "" if self.quoting else ", quotes as plain characters"
    columns = "text column" + ("s" if len(self.text_indices) > 1 else "")
    label = ("no label read" if self.label_index is None else
             f"{self.label_kind} label column {self.label_index}")
    return (f"{self.file_format} layout ({self.width} columns, {header}, "
            f"{columns} {', '.join(map(str, self.text_indices))}, {label}, "
            f"{self.encoding}{bom}{quotes})")


def open_binary(path, member=""):
  """Opens `path` (or `member` of the zip at `path`) for binary reading; a
  gzip-compressed file (by its magic bytes) is decompressed as it is read."""
  if not tf.io.gfile.exists(path):
    raise DataError(f"data file {path} does not exist")
  if tf.io.gfile.isdir(path):
    raise DataError(f"data file {path} is a folder; give a CSV/TSV file")
  if not path.lower().endswith(".zip"):
    f = tf.io.gfile.GFile(path, "rb")
    magic = f.read(2)
    f.seek(0)
    return gzip.GzipFile(fileobj=f, mode="rb") if magic == _GZIP_MAGIC else f
  archive = _zip(path)
  names = archive.namelist()
  if member not in names:
    raise DataError(f"{path} has no member {member!r}; it holds {names}")
  return archive.open(member)


def _zip(path):
  try:
    return zipfile.ZipFile(tf.io.gfile.GFile(path, "rb"))
  except zipfile.BadZipFile as e:
    raise DataError(f"{path} is not a readable zip archive ({e}); give the "
                    "Sentiment140 zip or the CSV inside it") from None


def zip_members(path):
  with _zip(path) as archive:
    return archive.namelist()


def detect_encoding(sample):
  """utf-8 unless the sample has more invalid sequences than a few bad rows
  would explain (a latin-1 file fails on nearly every accented character)."""
  # Cut at the last newline so a multi-byte character is never split.
  cut = sample[:sample.rfind(b"\n") + 1] or sample
  invalid = cut.decode("utf-8", errors="replace").count("\ufffd")
  invalid -= cut.count(b"\xef\xbf\xbd")  # U+FFFD present in the file itself
  lines = cut.count(b"\n")
  return "utf-8" if invalid <= max(8, lines // 1000) else "iso-8859-1"


def _show(header):
  """A header for a message: a few columns, each cut short."""
  shown = [c if len(c) <= 40 else c[:37] + "..." for c in header[:8]]
  return str(shown) + (f" and {len(header) - 8} more"
                       if len(header) > 8 else "")


def _resolve_column(value, header, flag, path):
  if header and value in header:
    return header.index(value)
  if value.isdigit():
    return int(value)
  hint = "Give a column name or a 0-based index"
  if len(header) == 1 and _looks_tagged(header[0]):
    hint = ("It looks like a CoNLL file of tagged words (a word and its tag "
            "a line): train it with --task=tagging")
  raise DataError(
      f"{path}: no column {value!r} ({flag}); the header has {_show(header)}. "
      f"{hint}")


def _looks_tagged(line):
  """Whether a file's first line reads as CoNLL's (whitespace columns, the
  last an IOB tag), not a header: the message of a classification run on
  a tagging file."""
  fields = line.split()
  return len(fields) >= 2 and (fields[-1] == "O" or
                               fields[-1][:2] in ("B-", "I-"))


# Bytes no text holds (C0 controls but tab, newlines, form feed; DEL), and
# the share of a file's start above which it is binary, not text with a
# damaged row (a binary file: ~12% for uniform bytes, more for most formats).
_CONTROL_BYTES = [b for b in range(32) if b not in (9, 10, 12, 13)] + [127]
_BINARY_SHARE = 0.05


def _sniff(sample, path):
  """Bytes of a UTF-8 byte-order mark to skip; DataError for a file that is
  not UTF-8/ISO-8859-1 text (UTF-16/32, binary)."""
  if sample.startswith(b"PK\x03\x04"):
    raise DataError(f"{path} is a zip archive; name it *.zip, or extract the "
                    "CSV inside it")
  for bom, name in ((b"\xff\xfe\x00\x00", "UTF-32"), (b"\x00\x00\xfe\xff",
                                                      "UTF-32"),
                    (b"\xff\xfe", "UTF-16"), (b"\xfe\xff", "UTF-16")):
    if sample.startswith(bom):
      raise DataError(
          f"{path} is {name} text; convert it to UTF-8 (e.g. `iconv -f "
          f"{name} -t UTF-8 {path} > converted.csv`) or save it as UTF-8")
  nuls = sample.count(b"\x00")
  controls = sum(sample.count(bytes([b])) for b in _CONTROL_BYTES)
  # Text with a stray NUL is text: that row is a malformed row, wherever it
  # is (`_fields`), counted against --max_bad_fraction. A file is binary
  # when control bytes are a share of its start no text has.
  if nuls and controls > _BINARY_SHARE * len(sample):
    first_nul = sample.index(b"\x00")
    utf16 = nuls >= len(sample) // 3 and (
        sample[1::2].count(b"\x00") > 0.9 * len(sample[1::2]) or
        sample[::2].count(b"\x00") > 0.9 * len(sample[::2]))
    raise DataError(
        f"{path} looks like UTF-16 text without a byte-order mark; convert "
        "it to UTF-8" if utf16 else
        f"{path} is not a text file (it holds NUL bytes, first at byte "
        f"{first_nul}); give a CSV/TSV file (plain, .gz or .zip)")
  return len(_UTF8_BOM) if sample.startswith(_UTF8_BOM) else 0


def detect_layout(path,
                  member="",
                  file_format=config.default("file_format"),
                  text_column=config.default("text_column"),
                  label_column=config.default("label_column"),
                  encoding=config.default("encoding"),
                  header=config.default("header"),
                  quoting=config.default("quoting"),
                  label_kind="int"):
  """Reads the first bytes of the file and decides how to parse it.

  `text_column` is one column or two, comma-separated (a sentence pair);
  `label_column` '' reads no label (`trainer.predict`); `header`
  auto/yes/no (auto: Sentiment140's layout is detected, CSV/TSV have one);
  `quoting` csv or none; `label_kind` how labels are read (int, word,
  float).
  """
  if file_format not in FORMATS:
    raise DataError(f"--file_format={file_format!r}: choose one of "
                    f"{', '.join(FORMATS)}")
  with open_binary(path, member) as f:
    sample = f.read(1 << 20)
  if not sample.strip():
    raise DataError(f"data file {path} {member} is empty")
  bom = _sniff(sample, path)
  sample = sample[bom:]
  first_line = sample.split(b"\n", 1)[0].decode("utf-8", errors="replace")
  name = (member or path).lower().removesuffix(".gz")
  delimiter = "\t" if file_format == "tsv" or (file_format == "auto" and
                                               name.endswith(".tsv")) else ","
  first = next(
      csv.reader([first_line[:MAX_ROW_CHARS]], delimiter=delimiter), [])
  s140_header = [c.strip().lower() for c in first] == SENTIMENT140_HEADER
  s140_row = (
      len(first) == 6 and first[0].strip() in ("0", "2", "4") and
      first[1].strip().isdigit())
  if file_format == "auto":
    file_format = "sentiment140" if s140_header or s140_row else (
        "tsv" if delimiter == "\t" else "csv")
  if file_format == "sentiment140":
    if len(first) != 6:
      raise DataError(
          f"{path}: --file_format=sentiment140 expects six columns "
          f"(target,ids,date,flag,user,text) but the first line has "
          f"{len(first)}: {first_line[:120]!r}")
    # The original file is ISO-8859-1; a copy with a header is whatever its
    # maker saved it as (the shared sample is UTF-8).
    if not encoding:
      encoding = detect_encoding(sample) if s140_header else "iso-8859-1"
    has_header = s140_header if header == "auto" else header == "yes"
    return Layout("sentiment140", ",", has_header, 6, (5,),
                  0 if label_column else None, encoding, bom, True, label_kind)
  if quoting == "none":
    first = first_line.rstrip("\r").split(delimiter)
  return _delimited(path, file_format, delimiter, first, first_line, encoding or
                    detect_encoding(sample), bom, text_column, label_column,
                    header, quoting, label_kind)


def _delimited(path, file_format, delimiter, first, first_line, encoding, bom,
               text_column, label_column, header, quoting, label_kind):
  """The Layout of a CSV/TSV whose first row is `first` (split)."""
  has_header = header != "no"
  names = [c.strip() for c in first] if has_header else []
  text_indices = tuple(
      _resolve_column(column.strip(), names, "--text_column", path)
      for column in text_column.split(","))
  label_index = _resolve_column(label_column, names, "--label_column",
                                path) if label_column else None
  widest = max(text_indices + ((label_index,) if label_column else ()))
  if widest >= len(first):
    where = (f"the header {_show(names)}"
             if has_header else f"the first row ({first_line[:80]!r})")
    raise DataError(f"{path}: column index {widest} is outside the "
                    f"{len(first)} columns of {where}")
  return Layout(file_format, delimiter, has_header, len(first), text_indices,
                label_index, encoding, bom, quoting != "none", label_kind)


def _quotes_balanced(text):
  return text.count('"') % 2 == 0


def _decode(raw, encoding):
  try:
    return raw.decode(encoding), False
  except UnicodeDecodeError:
    return raw.decode(encoding, errors="replace"), True


def _skip_start(stream, layout):
  """Reads past a byte-order mark and the header; returns the bytes read."""
  skipped = len(stream.read(layout.bom)) if layout.bom else 0
  if layout.has_header:
    skipped += len(stream.readline())
  return skipped


def parse(stream, layout, index=0, line=1, skip_header=True):
  """Yields (index, line, offset, texts, raw_label, reason) for each row.

  Args:
    stream: binary file object positioned at a row start.
    layout: the file's `Layout`.
    index: 0-based row index of the first row read.
    line: 1-based physical line number of the first line read.
    skip_header: whether the stream starts at the header row.

  `offset` is the byte offset, relative to where the stream started, of the
  row's first line; `texts` a tuple of str, one per text column ('' when
  rejected), `raw_label` a str (`raw_label()`; '' when rejected).
  """
  offset = 0
  if skip_header:  # at the start of the file
    offset = _skip_start(stream, layout)
    line += layout.has_header
  lines = iter(stream)
  pushed_back = collections.deque()

  def next_line():
    nonlocal offset, line
    if pushed_back:
      return pushed_back.popleft()
    raw = next(lines, None)
    if raw is None:
      return None
    item = (offset, line, raw)
    offset += len(raw)
    line += 1
    return item

  while True:
    first = next_line()
    if first is None:
      return
    group = [first]
    while True:
      text_line, invalid = _decode(b"".join(raw for _, _, raw in group),
                                   layout.encoding)
      if not layout.quoting or _quotes_balanced(text_line):
        fields = _fields(text_line, invalid, layout)
        if len(group) == 1 or fields[2] != MALFORMED:
          yield (index, first[1], first[0]) + fields
          break
        # Joining lines balanced the quotes but did not make one good row:
        # the first line was broken on its own.
        following = None
      else:
        following = next_line() if len(group) < MAX_JOINED_LINES else None
      if following is None:
        # An unterminated quote: only its first line is lost; the lines
        # after it are parsed again as rows of their own.
        yield (index, first[1], first[0], ("",) * len(layout.text_indices), "",
               MALFORMED)
        pushed_back.extendleft(reversed(group[1:]))
        break
      group.append(following)
    index += 1


def raw_label(value, kind):
  """The label as the label table keys it: an int's canonical digits
  (" 04" -> "4"), a word stripped, a float's shortest repr; None when the
  value is not of `kind`."""
  value = value.strip()
  try:
    if kind == "int":
      return str(int(value))
    if kind == "float":
      number = float(value)
      return repr(number) if math.isfinite(number) else None
  except ValueError:
    return None
  return value


def _fields(text_line, invalid, layout):
  """(texts, raw_label, reason) of one complete row."""
  body = text_line.rstrip("\r\n")
  nothing = ("",) * len(layout.text_indices)
  if len(body) > MAX_ROW_CHARS:
    return nothing, "", TOO_LONG
  if "\x00" in body:  # a damaged row, wherever it is (`_sniff`)
    return nothing, "", MALFORMED
  if layout.quoting:
    try:
      fields = next(
          csv.reader([body], delimiter=layout.delimiter, strict=True), [])
    except csv.Error:
      return nothing, "", MALFORMED
  else:
    fields = body.split(layout.delimiter)
  if len(fields) != layout.width:
    return nothing, "", MALFORMED
  if invalid:
    return nothing, "", INVALID_UTF8
  if layout.label_index is None:
    return tuple(fields[i] for i in layout.text_indices), "", OK
  label = raw_label(fields[layout.label_index], layout.label_kind)
  if label is None:
    return nothing, "", NOT_A_NUMBER
  return tuple(fields[i] for i in layout.text_indices), label, OK


def offset_marks(rows, max_marks=4096):
  """(index, line, byte offset) marks of `rows` (each starting with those
  three) and the total row count. Marks are every `stride`-th row, the
  stride doubling whenever there are more than `max_marks`: memory stays
  O(max_marks) for any file."""
  marks, stride, total = [], 1, 0
  for index, line, offset, *_ in rows:
    if index % stride == 0:
      marks.append((index, line, offset))
      if len(marks) > max_marks:
        marks, stride = marks[::2], stride * 2
    total = index + 1
  return marks, total


def scan_offsets(path, member, layout, max_marks=4096):
  """One pass over the file: its rows' `offset_marks`."""
  with open_binary(path, member) as f:
    return offset_marks(parse(f, layout), max_marks)


def read_rows(path, member, layout, start=None, stop_index=None):
  """Yields rows from `start` = (index, line, offset) up to `stop_index`."""
  with open_binary(path, member) as f:
    if start is None or start[0] == 0:
      rows = parse(f, layout)
    else:
      index, line, offset = start
      f.seek(offset)
      rows = parse(f, layout, index=index, line=line, skip_header=False)
      rows = ((i, ln, off + offset, *rest) for i, ln, off, *rest in rows)
    for row in rows:
      if stop_index is not None and row[0] >= stop_index:
        return
      yield row
