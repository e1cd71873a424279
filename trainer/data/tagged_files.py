"""Files of tagged sentences: layout detection and resumable sentence parsing.

Two formats, on any filesystem `tf.io.gfile` knows (local, gs://), plain
or gzip-compressed, read one line at a time (memory holds one sentence):

- CoNLL: one word a line, whitespace-separated columns (Python's
  whitespace), the word first and the tag last (or in `tag_column`), a
  blank line between sentences, `-DOCSTART-` lines skipped (they end a
  sentence, as a blank line does). UTF-8, or ISO-8859-1 when the file's
  start is not UTF-8 (`files.detect_encoding`).
- JSON lines: one object a line holding a list of words (`tokens` or
  `words`) and a list of tags (`ner_tags` or `tags`): tag names, or integer
  ids with their names given (what a Hugging Face `datasets` export of a
  ClassLabel sequence holds). Other keys by `words_key`/`tags_key`.

A file is JSON lines when its name ends in .jsonl or .json (before .gz) or
its first non-blank line starts with `{`; else CoNLL. Every sentence yields
its fate (`files.REASONS`): one bad line rejects its sentence, never the
rest of the file. A sentence is a CoNLL block's lines or one JSON line;
its `line` is its first word's line.
"""

import dataclasses
import json
import re

from trainer.data import files
from trainer.foundation import errors

FORMATS = ("auto", "conll", "jsonl")
WORDS_KEYS = ("tokens", "words")  # tried in turn when `words_key` is ''
TAGS_KEYS = ("ner_tags", "tags")
DOCSTART = "-DOCSTART-"
_SAMPLE = 1 << 20  # bytes read to decide a file's layout
REASON = {
    name: files.REASONS.index(name)
    for name in ("tag_not_in_set", "column_count_differs", "word_without_tag",
                 "malformed_json", "tag_count_differs", "word_with_whitespace",
                 "empty_text", "invalid_utf8", "field_too_long")
}
_WHITESPACE = re.compile(r"\s")  # Python's whitespace: `str.isspace`

DataError = errors.DataError


@dataclasses.dataclass(frozen=True)
class Layout:
  """How to read a tagged file: decided once from its first bytes."""

  file_format: str  # conll or jsonl
  encoding: str = "utf-8"
  bom: int = 0  # bytes of a UTF-8 byte-order mark to skip
  width: int = 0  # CoNLL: the columns of the file's first word line
  tag_index: int = 0  # CoNLL: the tag's column (0-based)
  words_key: str = ""  # JSON lines
  tags_key: str = ""

  def describe(self):
    if self.file_format == "conll":
      return (f"CoNLL ({self.width} columns, the tag in column "
              f"{self.tag_index}, {self.encoding})")
    return (f"JSON lines (words {self.words_key!r}, tags "
            f"{self.tags_key!r})")


def _text_start(sample, path):
  """Bytes of a UTF-8 byte-order mark; DataError for a file that is not
  text."""
  if sample.startswith((b"\xff\xfe", b"\xfe\xff", b"\x00\x00\xfe\xff")):
    raise DataError(f"{path} is UTF-16/32 text; convert it to UTF-8")
  if sample.count(b"\x00") > 0.05 * len(sample):
    raise DataError(f"{path} is not a text file (it holds NUL bytes); give "
                    "a CoNLL or JSON lines file (plain or .gz)")
  return 3 if sample.startswith(b"\xef\xbb\xbf") else 0


def detect_layout(path,
                  file_format="auto",
                  tag_column=-1,
                  words_key="",
                  tags_key="",
                  tag_names=()):
  """Reads the first bytes of the file at `path` and decides how to read it.

  Args:
    path: a CoNLL or JSON lines file (plain or gzip; local, gs://).
    file_format: auto, conll or jsonl.
    tag_column: CoNLL: the tag's column, 0-based (-1: the last).
    words_key, tags_key: JSON lines: the keys of the lists ('': the first
      of `WORDS_KEYS`/`TAGS_KEYS` the first object holds).
    tag_names: JSON lines: the names of integer tag ids.
  """
  if file_format not in FORMATS:
    raise DataError(f"tagged file format {file_format!r}: choose one of "
                    f"{', '.join(FORMATS)}")
  with files.open_binary(path) as f:
    sample = f.read(_SAMPLE)
  bom = _text_start(sample, path)
  lines = sample[bom:].split(b"\n")
  if len(sample) == _SAMPLE:
    lines = lines[:-1]  # the last may be cut
  lines = [(n, raw) for n, raw in enumerate(lines, 1) if raw.strip()]
  if not lines:
    raise DataError(f"data file {path} is empty")
  name = path.lower().removesuffix(".gz")
  if file_format == "auto":
    jsonl = name.endswith(
        (".jsonl", ".json")) or lines[0][1].lstrip().startswith(b"{")
    file_format = "jsonl" if jsonl else "conll"
  if file_format == "jsonl":
    return _jsonl_layout(path, lines, bom, words_key, tags_key, tag_names)
  encoding = files.detect_encoding(sample[bom:])
  for number, raw in lines:
    fields = raw.decode(encoding, errors="replace").split()
    if fields and fields[0] != DOCSTART:
      break
  else:
    raise DataError(f"{path} holds no word line in its first "
                    f"{len(sample):,} bytes (only -DOCSTART- lines)")
  width = len(fields)
  if width < 2:
    delimited = any(c in fields[0] for c in ",\t") if fields else False
    hint = ("; it reads as a CSV/TSV of texts and labels, which "
            "--task=classification trains" if delimited else "")
    raise DataError(
        f"{path}: line {number} ({' '.join(fields)[:80]!r}), the first word "
        "line, has one column: CoNLL lines hold a word and its tag (the tag "
        f"last){hint}")
  index = tag_column if tag_column >= 0 else width + tag_column
  if not 1 <= index < width:
    raise DataError(
        f"{path}: tag column {tag_column} is outside columns 1..{width - 1} "
        f"of line {number} ({' '.join(fields)[:80]!r}); column 0 is the word")
  return Layout("conll", encoding, bom, width, index)


def _jsonl_layout(path, lines, bom, words_key, tags_key, tag_names):
  """The Layout of a JSON lines file: its keys, from its first object."""
  number, first = lines[0]
  if first.lstrip().startswith(b"["):
    raise DataError(f"{path} is a JSON array; give JSON lines (one object a "
                    "line, as `datasets`' to_json writes)")
  for number, raw in lines:
    try:
      obj = json.loads(raw)
    except ValueError:
      continue
    if isinstance(obj, dict):
      break
  else:
    raise DataError(f"{path}: no line of its first {_SAMPLE:,} bytes is a "
                    "JSON object")
  keys = []
  for given, known, what in ((words_key, WORDS_KEYS, "words"),
                             (tags_key, TAGS_KEYS, "tags")):
    found = [k for k in ((given,) if given else known) if k in obj]
    if not found:
      raise DataError(
          f"{path}: line {number} has no list of {what} (key "
          f"{' or '.join((given,) if given else known)}); its keys are "
          f"{sorted(obj)[:12]}")
    keys.append(found[0])
  tags = obj[keys[1]]
  if isinstance(tags, list) and tags and isinstance(tags[0],
                                                    int) and not tag_names:
    raise DataError(
        f"{path}: line {number} holds tag ids ({keys[1]}: {tags[:5]}...); "
        "give their names in id order (the dataset's ClassLabel names)")
  return Layout("jsonl", "utf-8", bom, words_key=keys[0], tags_key=keys[1])


def _decode(raw, encoding):
  try:
    return raw.decode(encoding), False
  except UnicodeDecodeError:
    return "", True


def _sentence(start, words, tags, reason):
  """(line, offset, text, tags, reason) of a parsed CoNLL sentence."""
  if reason:
    return start + ("", "", reason)
  return start + (" ".join(words), " ".join(tags), 0)


def _conll(lines, layout):
  """Yields (line, offset, text, tags, reason) per sentence of `lines`, an
  iterator of (line number, byte offset, raw line)."""
  start, words, tags, reason, chars = None, [], [], 0, 0
  for number, offset, raw in lines:
    text, invalid = _decode(raw, layout.encoding)
    fields = text.split()
    if not invalid and (not fields or fields[0] == DOCSTART):
      if start is not None:
        yield _sentence(start, words, tags, reason)
        start, words, tags, reason, chars = None, [], [], 0, 0
      continue
    if start is None:
      start = (number, offset)
    if reason:
      continue  # the sentence is rejected; its words are not kept
    if invalid:
      reason = REASON["invalid_utf8"]
    elif len(fields) == 1:
      reason = REASON["word_without_tag"]
    elif len(fields) != layout.width:
      reason = REASON["column_count_differs"]
    else:
      chars += len(fields[0]) + 1
      reason = REASON["field_too_long"] if chars > files.MAX_ROW_CHARS else 0
      words.append(fields[0])
      tags.append(fields[layout.tag_index])
  if start is not None:
    yield _sentence(start, words, tags, reason)


def _json_sentence(raw, layout, tag_names):
  """(text, tags, reason) of one JSON line."""
  if len(raw) > files.MAX_ROW_CHARS:
    return "", "", REASON["field_too_long"]
  try:
    obj = json.loads(raw.decode("utf-8"))
  except UnicodeDecodeError:
    return "", "", REASON["invalid_utf8"]
  except ValueError:
    return "", "", REASON["malformed_json"]
  words = obj.get(layout.words_key) if isinstance(obj, dict) else None
  tags = obj.get(layout.tags_key) if isinstance(obj, dict) else None
  if not (isinstance(words, list) and isinstance(tags, list) and
          all(isinstance(w, str) for w in words)):
    return "", "", REASON["malformed_json"]
  ids = all(isinstance(t, int) and not isinstance(t, bool) for t in tags)
  if not ids and not all(isinstance(t, str) for t in tags):
    return "", "", REASON["malformed_json"]
  if len(words) != len(tags):
    return "", "", REASON["tag_count_differs"]
  if not words:
    return "", "", REASON["empty_text"]
  if any(not w or _WHITESPACE.search(w) for w in words):
    return "", "", REASON["word_with_whitespace"]
  if ids:
    if not all(0 <= t < len(tag_names) for t in tags):
      return "", "", REASON["tag_not_in_set"]
    tags = [tag_names[t] for t in tags]
  # A tag holding a space would split in two: it is in no tag set anyway.
  if any(not t or _WHITESPACE.search(t) for t in tags):
    return "", "", REASON["tag_not_in_set"]
  return " ".join(words), " ".join(tags), 0


def _jsonl(lines, layout, tag_names):
  """Yields (line, offset, text, tags, reason) per non-blank line of `lines`
  (as `_conll`)."""
  for number, offset, raw in lines:
    if raw.strip():
      yield (number, offset) + _json_sentence(raw, layout, tag_names)


def parse(stream, layout, tag_names=(), index=0, line=1, at_start=True):
  """Yields (index, line, offset, text, tags, reason) for each sentence.

  Args:
    stream: binary file object at the file's start or a sentence's start.
    layout: the file's `Layout`.
    tag_names: JSON lines: the names of integer tag ids.
    index: 0-based position of the first sentence read.
    line: 1-based line number of the first line read.
    at_start: whether the stream is at the file's start (a byte-order mark).

  `offset` is the byte offset of the sentence's first line relative to where
  the stream started; `text` the words joined by one space and `tags` the tag
  names joined by one space ('' when rejected).
  """
  skipped = len(stream.read(layout.bom)) if at_start and layout.bom else 0

  def lines():
    offset = skipped
    for number, raw in enumerate(stream, line):
      yield number, offset, raw
      offset += len(raw)

  sentences = (
      _conll(lines(), layout) if layout.file_format == "conll" else _jsonl(
          lines(), layout, tag_names))
  for i, sentence in enumerate(sentences, index):
    yield (i,) + sentence
