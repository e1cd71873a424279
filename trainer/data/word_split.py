"""Raw text to words, as BERT's basic tokenizer splits it, with each word's
character offsets in the text: what a tagging export serves from.

A word is a run of characters between whitespace, and every punctuation
character (ASCII's, and Unicode's P categories) and CJK ideograph is a
word of its own, as BERT's basic tokenizer (and Hugging Face's
`BertPreTokenizer`) splits text. Whitespace is what this project's
preprocessor turns into spaces (`preprocessing.normalize`: tab, newline,
carriage return, Unicode's space separators); control and format
characters are not whitespace there (it removes them), so they stay in
their word here, and a word of only such characters is a word (it gets the
unknown piece, `word_pieces.NO_PIECE`, and is tagged like any other).

Offsets count characters (Unicode code points, as Python's `str` indexes
them), end exclusive: `text[start:end]` is the word. Invalid UTF-8 is first
repaired (`preprocessing.repair_utf8`: what Python's
`bytes.decode("utf-8", errors="replace")` gives) and the offsets are those
of the repaired text, which is what such a Python caller holds. Words are
substrings of the text: an HTML entity is not decoded here, so "&amp;" is
three words ("&", "amp", ";").

Memory is linear in the text: each text is decoded to code points once,
and words (`substrings`) are gathered from them, never from a copy of the
text per word.
"""

import tensorflow as tf
import tensorflow_text as text

from trainer.data import preprocessing

# BERT's punctuation (ASCII's symbol ranges and Unicode's P categories) and
# CJK ideographs: each a word of its own (TF Text's BasicTokenizer ranges).
_ALONE = "|".join([
    r"[!-/]", r"[:-@]", r"[\[-`]", r"[{-~]", r"[\p{P}]", r"[\x{4E00}-\x{9FFF}]",
    r"[\x{3400}-\x{4DBF}]", r"[\x{20000}-\x{2A6DF}]", r"[\x{2A700}-\x{2B73F}]",
    r"[\x{2B740}-\x{2B81F}]", r"[\x{2B820}-\x{2CEAF}]", r"[\x{F900}-\x{FAFF}]",
    r"[\x{2F800}-\x{2FA1F}]"
])


def split_with_offsets(texts):
  """Words of raw texts and where each lies.

  Args:
    texts: string [n], UTF-8 (repaired here: `preprocessing.repair_utf8`).

  Returns:
    (words string RaggedTensor [n, (words)], starts and ends int32
    RaggedTensor [n, (words)]: character offsets in the repaired text, end
    exclusive; the repaired texts string [n]). A text of only whitespace
    has no word.
  """
  texts = preprocessing.repair_utf8(texts)
  # The split stops at a NUL byte (its text is read as a C string): split
  # with NUL as U+0001, another control character of one byte (the same
  # words, at the same bytes), and read each word from the text itself.
  split = tf.strings.regex_replace(texts, "\x00", "\x01")
  spans, begins, ends = text.regex_split_with_offsets(
      split, f"{preprocessing.WHITESPACE}+|{_ALONE}", _ALONE)
  chars, at = tf.strings.unicode_decode_with_offsets(texts, "UTF-8")
  rows = tf.cast(spans.value_rowids(), tf.int32)
  size = tf.strings.length(texts)
  starts = _characters(at, size, rows, begins.flat_values)
  ends = _characters(at, size, rows, ends.flat_values)
  words = substrings(chars, rows, starts, ends)
  return (spans.with_flat_values(words), spans.with_flat_values(starts),
          spans.with_flat_values(ends), texts)


def _characters(at, size, rows, offsets):
  """int32 [k]: the character index in text `rows` of each byte offset of
  `offsets` (int64 [k]: a character's first byte, or the text's end).

  Args:
    at: int64 RaggedTensor [n, (characters)]: each character's first byte
      in its text (`tf.strings.unicode_decode_with_offsets`).
    size: int32 [n]: each text's bytes.

  One sorted search over every text's characters at once: each text's
  offsets shifted by the bytes of the texts before it, so that the flat
  offsets are sorted and a text's end is the next text's first byte (the
  search counts the offsets below it: the text's characters)."""
  base = tf.math.cumsum(tf.cast(size, tf.int64), exclusive=True)
  shifted = at + tf.expand_dims(base, 1)
  found = tf.searchsorted(
      shifted.flat_values, tf.gather(base, rows) + offsets, out_type=tf.int64)
  return tf.cast(found - tf.gather(at.row_starts(), rows), tf.int32)


def substrings(chars, rows, starts, ends):
  """string [k]: the characters [starts, ends) of text `rows`, gathered
  from the texts' code points (decoded once) rather than from a copy of a
  text per substring.

  Args:
    chars: int32 RaggedTensor [n, (characters)]: the texts' code points
      (`tf.strings.unicode_decode`).
    rows, starts, ends: int32 [k].
  """
  first = tf.gather(tf.cast(chars.row_starts(), tf.int32), rows) + starts
  picked = tf.ragged.range(first, first + (ends - starts))
  return tf.strings.unicode_encode(
      tf.gather(chars.flat_values, picked), "UTF-8")


def joined_with_offsets(words):
  """Pre-split words as one text each: (the words joined by single spaces
  string [n], their starts and ends int32 RaggedTensor [n, (words)] in
  it, characters, end exclusive).

  Args:
    words: string RaggedTensor [n, (words)].
  """
  lengths = tf.strings.length(words.flat_values, unit="UTF8_CHAR")
  spans = words.with_flat_values(lengths + 1)
  starts = tf.math.cumsum(spans, axis=1, exclusive=True)
  ends = starts.with_flat_values(starts.flat_values + lengths)
  return tf.strings.reduce_join(words, axis=1, separator=" "), starts, ends
