"""BERT text preprocessing: a TF Hub style preprocessor and its host-side use.

`BertPreprocessor` builds a SavedModel with the interface of
`bert_en_uncased_preprocess`:

    preprocessor = hub.load(path)
    tokens = preprocessor.tokenize(tf.constant(["hello world"]))
    # int32 RaggedTensor [batch, (words), (wordpieces)]
    inputs = preprocessor.bert_pack_inputs([tokens], seq_length=128)
    # dict of int32 input_word_ids / input_mask / input_type_ids [batch, 128]
    preprocessor.tokenize.get_special_tokens_dict()

`make_packer` is the one function that turns a batch of raw strings into
encoder inputs; training (in tf.data, on the host) and export use the same.
Every op here is a string or lookup-table op, which is why none of it may run
inside the replicated (TPU/XLA) step.
"""

import tensorflow as tf
import tensorflow_text as text

from trainer.foundation import features

SPECIAL_TOKENS = ("[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]")
# The TF Hub BERT interface: what the preprocessor packs and the encoder
# takes, int32 [batch, seq_length] each.
ENCODER_INPUTS = features.ENCODER_INPUTS


class _Tokenize(tf.Module):
  """`tokenize` sub-object: callable plus `get_special_tokens_dict()`."""

  def __init__(self, tokenizer, special, lower_case, strip_accents):
    super().__init__(name="tokenize")
    self._tokenizer = tokenizer
    self._special = special
    self._lower_case = lower_case
    self._strip_accents = strip_accents

  @tf.function(
      input_signature=[tf.TensorSpec([None], tf.string)], autograph=False)
  def __call__(self, strings):
    strings = normalize(strings, self._lower_case, self._strip_accents)
    return tf.cast(self._tokenizer.tokenize(strings), tf.int32)

  @tf.function(input_signature=[], autograph=False)
  def get_special_tokens_dict(self):
    return {k: tf.constant(v, tf.int32) for k, v in self._special.items()}


# What BERT's clean-up turns into a space (`normalize`), and what separates
# words in raw text (`word_split`): tab, newline, carriage return and
# Unicode's space separators.
WHITESPACE = r"[\t\n\r\p{Zs}]"


def normalize(strings, lower_case, strip_accents):
  """The text clean-up of BERT's tokenizer, as Hugging Face's implements it.

  Tabs, newlines and Unicode space separators become spaces; control and
  format characters (zero-width joiners, BOMs, NUL) and U+FFFD are removed;
  then optional lower-casing, one character at a time, and accent stripping
  (NFD, drop combining marks). Done here rather than by
  `text.BertTokenizer(lower_case=True)`, whose NFKC case folding also
  rewrites full-width letters and ligatures ("ｈｉ" -> "hi", "ß" -> "ss")
  where BERT's tokenizer does not.

  Args:
    strings: [batch] tf.string, UTF-8.
    lower_case: bool, lower-case the text.
    strip_accents: bool, strip accents.

  Returns:
    [batch] tf.string.
  """
  strings = tf.strings.regex_replace(strings, WHITESPACE, " ")
  strings = tf.strings.regex_replace(strings, r"[\p{Cc}\p{Cf}\x{FFFD}]", "")
  if lower_case:
    # ICU would write a word-final capital sigma as the final form "ς";
    # the Hugging Face tokenizer lower-cases each character on its own.
    strings = tf.strings.regex_replace(strings, "\u03a3", "\u03c3")
    strings = tf.strings.lower(strings, encoding="utf-8")
  if strip_accents:
    strings = text.normalize_utf8(strings, "NFD")
    strings = tf.strings.regex_replace(strings, r"\p{Mn}", "")
  return strings


class _PackInputs(tf.Module):
  """`bert_pack_inputs`: trims, adds [CLS]/[SEP], pads to `seq_length`."""

  def __init__(self, special):
    super().__init__(name="bert_pack_inputs")
    self._special = special

  @tf.function(autograph=False)
  def __call__(self, segments, seq_length):
    return pack_segments(segments, seq_length, self._special)

  def trace(self, max_segments=2):
    """Traces the signatures a SavedModel keeps: 1..`max_segments`
    segments, as TF Hub's preprocessors take one text or a pair."""
    tokens = tf.RaggedTensorSpec([None, None, None], tf.int32)
    for n in range(1, max_segments + 1):
      self.__call__.get_concrete_function([tokens] * n,
                                          tf.TensorSpec([], tf.int32))


def pack_segments(segments, seq_length, special):
  """Packs tokenized segments into fixed-length BERT inputs.

  Args:
    segments: list of int32 RaggedTensor [batch, (words), (wordpieces)].
    seq_length: int32 scalar, total length including [CLS] and [SEP]s.
    special: dict with `start_of_sequence_id`, `end_of_segment_id`,
      `padding_id`.

  Returns:
    dict of int32 `input_word_ids`, `input_mask`, `input_type_ids`, each
    [batch, seq_length].
  """
  flat = [s.merge_dims(-2, -1) for s in segments]
  budget = seq_length - len(flat) - 1
  trimmed = text.RoundRobinTrimmer(max_seq_length=budget).trim(flat)
  ids, type_ids = text.combine_segments(
      trimmed,
      start_of_sequence_id=special["start_of_sequence_id"],
      end_of_segment_id=special["end_of_segment_id"])
  word_ids, mask = text.pad_model_inputs(
      ids, max_seq_length=seq_length, pad_value=special["padding_id"])
  type_ids, _ = text.pad_model_inputs(type_ids, max_seq_length=seq_length)
  return dict(
      input_word_ids=tf.cast(word_ids, tf.int32),
      input_mask=tf.cast(mask, tf.int32),
      input_type_ids=tf.cast(type_ids, tf.int32))


class BertPreprocessor(tf.Module):
  """WordPiece preprocessor over a vocab file, saved in the TF Hub format."""

  def __init__(self,
               vocab_file,
               lower_case=True,
               strip_accents=None,
               default_seq_length=128):
    """Builds the preprocessor.

    Args:
      vocab_file: WordPiece vocabulary, one token per line (id = line).
      lower_case: lower-case the text before WordPiece ("uncased" models).
      strip_accents: strip accents; None follows `lower_case`, as in BERT.
      default_seq_length: the length used when the model itself is called.
    """
    super().__init__(name="bert_preprocess")
    if strip_accents is None:
      strip_accents = lower_case
    with tf.io.gfile.GFile(vocab_file) as f:
      vocab = [line.rstrip("\n") for line in f]
    missing = [t for t in SPECIAL_TOKENS if t not in vocab]
    if missing:
      raise ValueError(
          f"vocab file {vocab_file} lacks special tokens {missing}")
    self.vocab_file = tf.saved_model.Asset(vocab_file)
    table = tf.lookup.StaticHashTable(
        tf.lookup.TextFileInitializer(self.vocab_file, tf.string,
                                      tf.lookup.TextFileIndex.WHOLE_LINE,
                                      tf.int64,
                                      tf.lookup.TextFileIndex.LINE_NUMBER),
        default_value=-1,
        # Anonymous: a named table is shared by name within the process, and
        # the name TF derives from an Asset holds the Asset's memory
        # address, so a later preprocessor whose Asset reuses the address
        # of a freed one got the freed one's vocabulary.
        experimental_is_anonymous=True)
    self._table = table
    # Normalization is ours (see `normalize`); the tokenizer only splits.
    tokenizer = text.BertTokenizer(
        table, lower_case=False, unknown_token="[UNK]", token_out_type=tf.int64)
    special = dict(
        vocab_size=len(vocab),
        start_of_sequence_id=vocab.index("[CLS]"),
        end_of_segment_id=vocab.index("[SEP]"),
        padding_id=vocab.index("[PAD]"),
        mask_id=vocab.index("[MASK]"))
    self.tokenize = _Tokenize(tokenizer, special, bool(lower_case),
                              bool(strip_accents))
    self.bert_pack_inputs = _PackInputs(special)
    self.bert_pack_inputs.trace()
    self._default_seq_length = default_seq_length

  @tf.function(
      input_signature=[tf.TensorSpec([None], tf.string)], autograph=False)
  def __call__(self, strings):
    return self.bert_pack_inputs([self.tokenize(strings)],
                                 tf.constant(self._default_seq_length))


def save_preprocessor(preprocessor, export_dir):
  tf.saved_model.save(preprocessor, export_dir)


def special_tokens(preprocessor):
  """The loaded preprocessor's special token ids as Python ints."""
  return {
      k: int(v)
      for k, v in preprocessor.tokenize.get_special_tokens_dict().items()
  }


# HTML entities as Twitter exports them; "&amp;" last so "&amp;lt;" -> "&lt;".
_ENTITIES = (("&quot;", '"'), ("&#39;", "'"), ("&apos;", "'"), ("&lt;", "<"),
             ("&gt;", ">"), ("&nbsp;", " "), ("&amp;", "&"))


def repair_utf8(strings):
  """string [...] -> the same, each invalid UTF-8 sequence U+FFFD: what
  Python's `bytes.decode("utf-8", errors="replace")` gives (one U+FFFD per
  maximal invalid subsequence; a surrogate's or an overlong form's bytes
  each one)."""
  return tf.strings.unicode_transcode(
      strings, "UTF-8", "UTF-8", errors="replace")


def clean_text(strings):
  """Repairs invalid UTF-8 (U+FFFD) and decodes common HTML entities.

  strings: [batch] tf.string -> same shape.
  """
  strings = repair_utf8(strings)
  for entity, char in _ENTITIES:
    strings = tf.strings.regex_replace(strings, entity, char)
  return strings


def vocab_size(preprocessor):
  """The loaded preprocessor's vocabulary size, or None if it does not say."""
  try:
    return special_tokens(preprocessor)["vocab_size"]
  except (AttributeError, KeyError):
    return None


def make_packer(preprocessor, seq_length):
  """Returns f(strings) -> dict of int32 [batch, seq_length].

  `strings` is [batch] tf.string (one text per example) or [batch, 2] (a
  sentence pair per example, packed `[CLS] a [SEP] b [SEP]` with type ids
  0 then 1 and the two trimmed round-robin to fit, TF Hub's semantics).
  Works for this project's preprocessors and for TF Hub's
  `bert_*_preprocess` models (whose `bert_pack_inputs` takes the same
  arguments). The static shape is set here so that downstream code (and the
  TPU compiler) sees fully defined shapes.
  """

  def pack(strings):
    segments = [strings] if strings.shape.rank == 1 else tf.unstack(
        strings, axis=1)
    tokens = [preprocessor.tokenize(clean_text(s)) for s in segments]
    inputs = preprocessor.bert_pack_inputs(tokens, seq_length=seq_length)
    batch = tf.shape(strings)[0]
    return {
        k:
            tf.ensure_shape(
                tf.reshape(tf.cast(inputs[k], tf.int32), [batch, seq_length]),
                [strings.shape[0], seq_length]) for k in ENCODER_INPUTS
    }

  return pack
