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
repaired (each bad byte U+FFFD, as `preprocessing.clean_text` does) and the
offsets are those of the repaired text, which is what a Python caller that
decodes with errors="replace" holds. Words are substrings of the text: an
HTML entity is not decoded here, so "&amp;" is three words ("&", "amp",
";").
"""

import tensorflow as tf
import tensorflow_text as text

WHITESPACE = r"[\t\n\r\p{Zs}]"
# BERT's punctuation (ASCII's symbol ranges and Unicode's P categories) and
# CJK ideographs: each a word of its own (TF Text's BasicTokenizer ranges).
_ALONE = "|".join([
    r"[!-/]", r"[:-@]", r"[\[-`]", r"[{-~]", r"[\p{P}]", r"[\x{4E00}-\x{9FFF}]",
    r"[\x{3400}-\x{4DBF}]", r"[\x{20000}-\x{2A6DF}]", r"[\x{2A700}-\x{2B73F}]",
    r"[\x{2B740}-\x{2B81F}]", r"[\x{2B820}-\x{2CEAF}]", r"[\x{F900}-\x{FAFF}]",
    r"[\x{2F800}-\x{2FA1F}]"
])


def repair(texts):
  """string [n] -> the same, each invalid UTF-8 byte U+FFFD."""
  return tf.strings.unicode_transcode(texts, "UTF-8", "UTF-8", errors="replace")


def split_with_offsets(texts):
  """Words of raw texts and where each lies.

  Args:
    texts: string [n], UTF-8 (repaired here: `repair`).

  Returns:
    (words string RaggedTensor [n, (words)], starts and ends int32
    RaggedTensor [n, (words)]: character offsets in the repaired text, end
    exclusive; the repaired texts string [n]). A text of only whitespace
    has no word.
  """
  texts = repair(texts)
  # The split stops at a NUL byte (its text is read as a C string): split
  # with NUL as U+0001, another control character of one byte (the same
  # words), and read each word from the text itself.
  split = tf.strings.regex_replace(texts, "\x00", "\x01")
  spans, begins, ends = text.regex_split_with_offsets(
      split, f"{WHITESPACE}+|{_ALONE}", _ALONE)
  owner = tf.gather(texts, spans.value_rowids())
  begins, ends = begins.flat_values, ends.flat_values
  flat = tf.strings.substr(owner, begins, ends - begins)
  before = tf.strings.substr(owner, tf.zeros_like(begins), begins)
  starts = tf.strings.length(before, unit="UTF8_CHAR")
  ends = starts + tf.strings.length(flat, unit="UTF8_CHAR")
  return (spans.with_flat_values(flat), spans.with_flat_values(starts),
          spans.with_flat_values(ends), texts)


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
