"""Record streams of tagged sentences (files, TFDS conll2003) and their tag set.

Every source yields one record per sentence it reads, usable or not, in
chunks (`chunks()`): the record contract of `trainer.data.sources` plus the
tags,

    {"index": int64, "line": int64, "text": string [rows, 1],
     "label": int64 (0), "tags": string [rows], "reason": int32}

`text` holds the sentence's words joined by one space: split it on " " to
get them back (no usable sentence has an empty word or one holding
whitespace). `tags` holds the ids of their tags in the run's `TagSet`
(`trainer.data.tag_sets`) joined by one space, one per word, in IOB2 (IOB1
data converted here, sentence by sentence, in TF ops). `line` is the
1-based line of the sentence's first word (TFDS: index + 1) and `index`
its position in the source. A rejected sentence keeps its place with
`reason` > 0 (an index into `sources.REASONS`), empty `tags`, and its
`text` only when its words were read whole (a tag outside the set), so
`counts` counts every outcome and --max_bad_fraction refuses or skips them
as it does rows of text. Strings, not ragged ids, keep a chunk a dict of
equal-length vectors that splits carve by mask and tf.data batches; one
`tf.strings.split` gives the words or the ids back.

`read_tag_set` reads the tag set from training data in one streamed pass
(or takes the names given) and decides the scheme (`tag_sets`).
"""

import dataclasses

from absl import logging
import numpy as np
import tensorflow as tf

from trainer.data import files
from trainer.data import sources
from trainer.data import tag_sets
from trainer.data import tagged_files
from trainer.foundation import errors

REASON = tagged_files.REASON
# Python's whitespace (`str.isspace`, what `str.split` splits on) as RE2
# (TF) spells it: a test checks every code point.
WHITESPACE_RE2 = r"[\t-\r\x1c-\x20\x85\p{Z}]"
_CHUNK = 512

DataError = errors.DataError


def _columns(rows):
  """The arrays of a chunk of parsed sentences (`tagged_files.parse`)."""
  index, line, _, text, tags, reason = zip(*rows)
  return (np.array(index, np.int64), np.array(line, np.int64),
          np.array([[t.encode("utf-8")] for t in text], dtype=object),
          np.array([t.encode("utf-8") for t in tags],
                   dtype=object), np.array(reason, np.int32))


_SIGNATURE = (tf.TensorSpec([None], tf.int64), tf.TensorSpec([None], tf.int64),
              tf.TensorSpec([None, 1], tf.string),
              tf.TensorSpec([None], tf.string), tf.TensorSpec([None], tf.int32))
_STRIPES = {}  # (stamp, layout, tag names, stripes) -> (starts, total)


def entity_openings(ids, positions, tag_set):
  """Where entities open among tag ids, by conlleval's chunking (an entity
  opens at `B-X`, or at an `I-X` not directly after a tag of type X in its
  sentence): what IOB1 to IOB2 rewrites (`_to_iob2`) and where a tagging
  export's entities open (`serving.tagging.entities`).

  Args:
    ids: int32 or int64 [words]: tag ids in `tag_set`, sentence after
      sentence; -1 (a tag outside the set) opens nothing and ends an entity.
    positions: int [words]: each word's place in its sentence.
    tag_set: the `tag_sets.TagSet` the ids index.

  Returns:
    (bool [words]: an entity opens there; int [words], the ids' dtype: each
    word's entity type, an index into `tag_set.types`, -1 for O, -2 for -1).
  """
  kind_of, inside, _ = tag_sets.conversion_tables(tag_set)
  known = tf.maximum(ids, 0)
  kinds = tf.gather(tf.constant(kind_of, ids.dtype), known)
  kinds = tf.where(ids < 0, tf.constant(-2, ids.dtype), kinds)
  previous = tf.concat([tf.constant([-1], ids.dtype), kinds[:-1]], 0)
  previous = tf.where(positions == 0, tf.constant(-1, ids.dtype), previous)
  continues = tf.gather(tf.constant(inside), known) & tf.equal(kinds, previous)
  return (kinds >= 0) & ~continues, kinds


def _to_iob2(ids, tag_set):
  """IOB1 tag ids -> IOB2 (`tag_sets.iob1_to_iob2` in TF): an I-X not
  directly after a tag of type X becomes B-X (every opening its type's
  B-, `entity_openings`).

  Args:
    ids: RaggedTensor int64 [rows, (words)]; -1 (a tag outside the set)
      allowed, and kept.
  """
  _, _, begin = tag_sets.conversion_tables(tag_set)
  flat = ids.flat_values
  position = tf.ragged.range(ids.row_lengths()).flat_values
  opens, _ = entity_openings(flat, position, tag_set)
  begins = tf.gather(tf.constant(begin, tf.int64), tf.maximum(flat, 0))
  return ids.with_flat_values(tf.where(opens, begins, flat))


def _finish(ds, tag_set):
  """Raw chunks (index, line, text, tag names, reason) -> records: tag names
  looked up in `tag_set` (`tag_not_in_set` for one outside it), IOB1
  converted to IOB2, ids joined by one space."""
  table = tf.lookup.StaticHashTable(
      tf.lookup.KeyValueTensorInitializer(
          tf.constant(tag_set.names), tf.range(len(tag_set), dtype=tf.int64)),
      default_value=-1)
  iob1 = tag_set.scheme == "iob1"

  @tf.autograph.experimental.do_not_convert  # a Python `if` on the scheme
  def fn(index, line, text, names, reason):
    ids = tf.ragged.map_flat_values(table.lookup, tf.strings.split(names, " "))
    if iob1:
      ids = _to_iob2(ids, tag_set)
    unknown = tf.reduce_any(ids < 0, axis=1)
    reason = tf.where(
        reason > 0, reason,
        tf.where(unknown, tf.constant(REASON["tag_not_in_set"]), 0))
    tags = tf.strings.reduce_join(
        tf.strings.as_string(ids), axis=1, separator=" ")
    return dict(
        index=index,
        line=line,
        text=text,
        label=tf.zeros_like(index),
        tags=tf.where(tf.equal(reason, 0), tags, ""),
        reason=reason)

  return ds.map(fn, num_parallel_calls=tf.data.AUTOTUNE, deterministic=True)


def _needs(tag_set, source):
  if tag_set is None:
    raise ValueError(f"{source.describe()}: records need a tag set "
                     "(read_tag_set reads one)")
  return tag_set


@dataclasses.dataclass(frozen=True)
class FileSource:
  """A file of tagged sentences, CoNLL or JSON lines (local, gs://, gzip).

  `chunks(stripes=K)` reads K contiguous stretches of the file in
  round-robin (as `sources.FileSource`); the sentence indices do not depend
  on K. `tag_set` None: only `raw()` (what `read_tag_set` reads).
  """

  path: str
  tag_set: tag_sets.TagSet | None = None
  file_format: str = "auto"  # auto, conll or jsonl
  tag_column: int = -1  # CoNLL: the tag's column (-1: the last)
  words_key: str = ""  # JSON lines ('': tokens or words)
  tags_key: str = ""  # JSON lines ('': ner_tags or tags)
  tag_names: tuple = ()  # JSON lines: the names of integer tag ids

  def describe(self):
    return self.path

  def stamp(self):
    """What changes when the file does: its size and modification time."""
    return sources.file_stamp(self.path, self.describe())

  def layout(self):
    try:
      return tagged_files.detect_layout(self.path, self.file_format,
                                        self.tag_column, self.words_key,
                                        self.tags_key, self.tag_names)
    except OSError as e:
      raise DataError(
          f"cannot read {self.path}: {errors.first_line(e)}") from None

  def _rows(self, layout, start=None, stop=None):
    """Chunks (`_columns`) of the sentences from the mark `start` (index,
    line, offset; None: the file's start) up to the sentence `stop`."""
    path, names = self.path, tuple(self.tag_names)

    def rows():
      with files.open_binary(path) as f:
        if start is None or start[0] == 0:
          sentences = tagged_files.parse(f, layout, names)
        else:
          f.seek(start[2])
          sentences = tagged_files.parse(f, layout, names, start[0], start[1],
                                         False)
        chunk = []
        for sentence in sentences:
          if stop is not None and sentence[0] >= stop:
            break
          chunk.append(sentence)
          if len(chunk) == _CHUNK:
            yield _columns(chunk)
            chunk = []
        if chunk:
          yield _columns(chunk)

    return rows()

  def raw(self):
    """The sentences before the tag set: chunks (index, line, text [rows,
    1], tag names joined by one space, reason)."""
    layout = self.layout()
    return tf.data.Dataset.from_generator(
        lambda: self._rows(layout), output_signature=_SIGNATURE)

  def _stripe_starts(self, layout, stripes):
    key = (self.stamp(), layout, tuple(self.tag_names), stripes)
    if key not in _STRIPES:
      with files.open_binary(self.path) as f:
        marks, total = files.offset_marks(
            tagged_files.parse(f, layout, self.tag_names))
      _STRIPES[key] = (sources.stripe_starts(marks, total, stripes), total)
    return _STRIPES[key]

  def chunks(self, stripes=1):
    """Records (the module's contract) in chunks of up to 512 sentences."""
    tag_set = _needs(self.tag_set, self)
    if stripes <= 1:
      return _finish(self.raw(), tag_set)
    layout = self.layout()
    starts, total = self._stripe_starts(layout, stripes)
    rows = lambda start, stop: self._rows(layout, start, stop)
    return _finish(sources.striped(rows, _SIGNATURE, starts, total), tag_set)


def _class_names(name, data_dir, key):
  """The names of a TFDS dataset's ClassLabel sequence `key`; () when its
  tags are strings."""
  import tensorflow_datasets as tfds  # pylint: disable=g-import-not-at-top
  feature = tfds.builder(name, data_dir=data_dir).info.features[key]
  inner = getattr(feature, "feature", feature)
  return tuple(getattr(inner, "names", ()))


@dataclasses.dataclass(frozen=True)
class TfdsSource:
  """A split of a TFDS dataset of tagged sentences (conll2003: `tokens`,
  and `ner`, a sequence of ClassLabel ids named O, B-PER, I-PER, ...)."""

  name: str
  split: str
  data_dir: str | None = None
  tag_set: tag_sets.TagSet | None = None
  words_key: str = "tokens"
  tags_key: str = "ner"

  def describe(self):
    return f"TFDS {self.name} split {self.split}"

  def stamp(self):
    """What changes when the data does (a prepared TFDS version does not)."""
    return self.describe()

  def raw(self):
    """As `FileSource.raw`; `line` is index + 1."""
    words_key, tags_key = self.words_key, self.tags_key
    ds = sources.load_tfds(self.name, self.split, self.data_dir,
                           [words_key, tags_key], "the words and tags keys")
    names = _class_names(self.name, self.data_dir, tags_key)
    ds = ds.enumerate().map(lambda i, ex: (i, ex[words_key], ex[tags_key]))
    return ds.ragged_batch(_CHUNK).map(
        lambda i, words, tags: _tfds_columns(i, words, tags, names))

  def chunks(self, stripes=1):
    """TFDS stores examples shuffled already, so `stripes` is not needed."""
    del stripes
    return _finish(self.raw(), _needs(self.tag_set, self))


def _empty_or_spaced(words):
  """bool [n]: which of `words` (string [n]) are empty or hold whitespace."""
  spaced = tf.strings.regex_full_match(words, f"(?s).*{WHITESPACE_RE2}.*")
  return spaced | tf.equal(tf.strings.length(words), 0)


def _tfds_columns(index, words, tags, names):
  """Raw chunk columns of ragged words and tags (ids of `names`, or names)."""
  if names:
    tags = tf.gather(tf.constant(names), tags)
  count = words.row_lengths()
  spaced = tf.ragged.map_flat_values(_empty_or_spaced, words)
  reason = tf.where(
      tf.not_equal(count, tags.row_lengths()), REASON["tag_count_differs"],
      tf.where(
          tf.equal(count, 0), REASON["empty_text"],
          tf.where(
              tf.reduce_any(spaced, axis=1), REASON["word_with_whitespace"],
              0)))
  usable = tf.equal(reason, 0)
  text = tf.strings.reduce_join(words, axis=1, separator=" ")
  tags = tf.strings.reduce_join(tags, axis=1, separator=" ")
  return (index, index + 1, tf.where(usable, text, "")[:, None],
          tf.where(usable, tags, ""), tf.cast(reason, tf.int32))


SOURCES = (FileSource, TfdsSource)


def read_tag_set(source, names=()):
  """The tag set of `source`'s data, in one streamed pass.

  The scheme is IOB1 when an `I-` tag opens an entity anywhere (logged in
  one line; each sentence is then converted to IOB2 as it is read), else
  IOB2. A tag that is not IOB (BIOES's S-/E-, ...) is refused in one line
  naming the file, the line and the tag.

  Args:
    source: a `FileSource` or `TfdsSource` (its tag_set is not read).
    names: the tag names, in id order, when given; else O and the B-/I- of
      every type read, sorted (`tag_sets.complete`).

  Returns:
    A `tag_sets.TagSet`.
  """
  seen, types = set(), set()
  entities = by_inside = 0
  first = None
  for chunk in source.raw().as_numpy_iterator():
    _, line, _, tags, reason = chunk
    for number, joined in zip(line[reason == 0], tags[reason == 0]):
      sentence = joined.decode("utf-8").split(" ")
      for tag in sentence:
        if tag not in seen:
          problem = tag_sets.tag_problem(tag)
          if problem:
            raise DataError(f"{source.describe()} line {number}: {problem}")
          seen.add(tag)
          types.add(tag_sets.split_tag(tag)[1])
      opened, inside = tag_sets.openings(sentence)
      entities += opened
      by_inside += inside
      if inside and first is None:
        first = int(number)
  if not seen and not names:
    raise DataError(f"{source.describe()} holds no usable sentence to read "
                    "the tags from")
  scheme = "iob1" if by_inside else "iob2"
  if by_inside:
    logging.info(
        "%s: the tags are IOB1 (%d of %d entities open with I-, the first in "
        "the sentence at line %d); each sentence is converted to IOB2 as it "
        "is read", source.describe(), by_inside, entities, first)
  return tag_sets.TagSet(
      tuple(names) if names else tag_sets.complete(types - {""}), scheme)


def first_bad_row(split):
  """"FILE line N: REASON" of the first rejected record of `split` (a
  `splits.Split`), or None: the line to log when bad sentences are skipped
  under --max_bad_fraction (reads the split up to that record)."""
  for record in split.records().filter(lambda r: r["reason"] > 0).take(1):
    return (f"{split.describe()} line {int(record['line'])}: "
            f"{sources.REASONS[int(record['reason'])]}")
  return None
