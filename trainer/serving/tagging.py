"""A tagging run's export: raw text in, each word's tag and the entities out.

`TaggingModule` is what `trainer.serving.export` saves for a tagging run
(both routes: `finish`'s live model and `trainer.export --model_dir`). Its
signatures:

    serving_default(text: [batch] tf.string)
    serve_words(words: [batch, max_words] tf.string, "" = padding)
    serve_shared_rows(text), serve_words_shared_rows(words): the same
        outputs, several windows a row (only where the encoder is this
        project's, rebuilt in Python; what `trainer.predict` and
        `trainer.evaluate` use when they are there)

`text` is split into words as BERT's basic tokenizer splits it
(`word_split`: whitespace, and each punctuation character a word of its
own), with each word's character offsets. `words` are taken as given (a
CoNLL file's, one word each, invalid UTF-8 repaired as text is; every ""
is dropped), their offsets those in
the words joined by single spaces. Each word is cut into pieces by the
run's preprocessor as training cuts it (`word_pieces.word_pieces`: a word
of no piece gets the unknown piece), the words packed in windows of whole
words of --seq_length tokens (`word_pieces.sentence_windows`: a long
sentence is never cut), and each word takes its first piece's prediction
(Hugging Face's `aggregation_strategy="first"`, `run_ner`'s labelling).

Outputs, padded to the longest of the call (strings "", ints -1, floats 0):

    word_count [batch] int32; words [batch, W] string;
    starts, ends [batch, W] int32: character offsets, end exclusive;
    tag_ids [batch, W] int32; tags [batch, W] string;
    scores [batch, W] float32: the tag's probability;
    probabilities [batch, W, num_tags] float32;
    entity_count [batch] int32; entity_types [batch, E] string (PER, ...);
    entity_texts [batch, E] string: text[start:end];
    entity_starts, entity_ends [batch, E] int32: character offsets;
    entity_word_starts, entity_word_ends [batch, E] int32: word positions,
        end exclusive;
    entity_scores [batch, E] float32: the mean of its words' scores.

Entities are read from the tags by conlleval's chunking (the eval's,
`evaluation.tagging`, and Hugging Face's grouping: an entity opens at
`B-X` or at an `I-X` that does not continue one of type X).
"""

import tensorflow as tf

from trainer.data import input_pipeline
from trainer.data import preprocessing
from trainer.data import row_layout
from trainer.data import tag_sets
from trainer.data import tagged_sources
from trainer.data import word_pieces
from trainer.data import word_split
from trainer.encoders import native
from trainer.foundation import features
from trainer.serving import exported

TEXT = tf.TensorSpec([None], tf.string, name="text")
WORDS = tf.TensorSpec([None, None], tf.string, name="words")


class TaggingModule(tf.Module):
  """Preprocessor + tagger behind string signatures (the module's
  docstring): `serve` (text), `serve_words` (words), and where the encoder
  is this project's `serve_rows`, `serve_words_rows` (shared rows)."""

  def __init__(self, preprocessor, model, seq_length, tag_names, buckets=None):
    super().__init__(name="tagging")
    self.preprocessor = preprocessor
    self.model = model
    self._seq_length = seq_length
    self._buckets = tuple(buckets or (seq_length,))
    self._special = preprocessing.special_tokens(preprocessor)
    self._tags = tag_sets.TagSet(tuple(tag_names))
    names = tf.constant(self._tags.names)
    # The tags by id, for readers of the export (`exported.load_tagger`).
    self.tag_names = tf.function(lambda: names, input_signature=[])
    fn = lambda f, spec: tf.function(f, input_signature=[spec], autograph=False)
    self.serve = fn(lambda text: self._tag_text(text, False), TEXT)
    self.serve_words = fn(lambda words: self._tag_words(words, False), WORDS)
    self.serve_rows = self.serve_words_rows = None
    if isinstance(model.encoder, native.NativeEncoder):
      self.serve_rows = fn(lambda text: self._tag_text(text, True), TEXT)
      self.serve_words_rows = fn(lambda words: self._tag_words(words, True),
                                 WORDS)

  def signatures(self):
    """{name: tf.function} as `tf.saved_model.save` takes them."""
    out = {"serving_default": self.serve, exported.WORDS: self.serve_words}
    if self.serve_rows is not None:
      out[exported.SHARED_ROWS] = self.serve_rows
      out[exported.WORDS_SHARED_ROWS] = self.serve_words_rows
    return out

  def _tag_text(self, text, in_rows):
    words, starts, ends, text = word_split.split_with_offsets(text)
    return self._tag(words, starts, ends, text, in_rows)

  def _tag_words(self, words, in_rows):
    # Repaired as `serving_default` repairs text: the words and offsets
    # served are those of `bytes.decode("utf-8", errors="replace")`.
    words = preprocessing.repair_utf8(words)
    words = tf.ragged.boolean_mask(words, tf.not_equal(words, ""))
    text, starts, ends = word_split.joined_with_offsets(words)
    return self._tag(words, starts, ends, text, in_rows)

  def _tag(self, words, starts, ends, text, in_rows):
    """The outputs (module docstring) of words [n, (words)] with their
    character `starts` and `ends` in `text` [n]."""
    pieces = word_pieces.word_pieces(self.preprocessor, words)
    windows = word_pieces.sentence_windows(pieces, self._special,
                                           self._seq_length)
    logits, word = (self._in_rows if in_rows else self._in_buckets)(windows)
    first = tf.where(word >= 0)[:, 0]
    per_word = tf.scatter_nd(
        tf.gather(word, first)[:, tf.newaxis], tf.gather(logits, first),
        tf.stack([tf.size(words.flat_values),
                  tf.shape(logits)[1]]))
    probabilities = tf.nn.softmax(per_word, axis=-1)
    tag_ids = tf.argmax(probabilities, axis=-1, output_type=tf.int32)
    scores = tf.reduce_max(probabilities, axis=-1)
    ragged = lambda flat: words.with_flat_values(flat)
    out = dict(
        word_count=tf.cast(words.row_lengths(), tf.int32),
        words=words.to_tensor(""),
        starts=starts.to_tensor(-1),
        ends=ends.to_tensor(-1),
        tag_ids=ragged(tag_ids).to_tensor(-1),
        tags=ragged(tf.gather(tf.constant(self._tags.names),
                              tag_ids)).to_tensor(""),
        scores=ragged(scores).to_tensor(0.0),
        probabilities=ragged(probabilities).to_tensor(0.0))
    out.update(
        entities(self._tags, tag_ids, words, starts.flat_values,
                 ends.flat_values, scores, text))
    return out

  def _in_buckets(self, windows):
    """(logits [tokens, num_tags], word [tokens]) of the windows one a row,
    cut to the smallest of the run's lengths that holds the longest."""
    windows = input_pipeline.cut_to_bucket(windows, self._buckets)
    logits = self.model({k: windows[k] for k in features.ENCODER_INPUTS},
                        training=False)
    return (tf.reshape(logits, [-1, tf.shape(logits)[-1]]),
            tf.reshape(windows["word"], [-1]))

  def _in_rows(self, windows):
    """As `_in_buckets`, the windows in shared rows (`row_layout.
    serving_rows`: first-fit decreasing, as many rows as they fill)."""
    # Rows read 0 where no token lies: the word ids shifted past it.
    windows = dict(windows, word=windows["word"] + 1)
    rows, _ = row_layout.serving_rows(windows, self._seq_length, ("word",))
    logits = self.model({k: rows[k] for k in features.ROW_INPUTS},
                        training=False)
    return (tf.reshape(logits, [-1, tf.shape(logits)[-1]]),
            tf.reshape(rows["word"], [-1]) - 1)


def entities(tags, tag_ids, words, starts, ends, scores, text):
  """The entities of tagged words, padded per text (the module docstring's
  `entity_*` outputs).

  Args:
    tags: the `tag_sets.TagSet` the ids index.
    tag_ids: int32 [words]: each word's tag, flat (row-major).
    words: string RaggedTensor [n, (words)] whose flat values they tag.
    starts, ends: int32 [words]: each word's character offsets in its text.
    scores: float32 [words]: each word's tag probability.
    text: string [n]: the texts (valid UTF-8) the offsets point into.
  """
  position = tf.cast(tf.ragged.range(words.row_lengths()).flat_values, tf.int32)
  opens, kind = tagged_sources.entity_openings(tag_ids, position, tags)
  inside = kind >= 0
  count = tf.reduce_sum(tf.cast(opens, tf.int32))
  entity = tf.boolean_mask(tf.cumsum(tf.cast(opens, tf.int32)) - 1, inside)
  span = lambda values: tf.math.unsorted_segment_max(
      tf.boolean_mask(values, inside), entity, count)
  sentence = tf.boolean_mask(tf.cast(words.value_rowids(), tf.int32), opens)
  start, end = tf.boolean_mask(starts, opens), span(ends)
  out = dict(
      entity_types=tf.gather(
          tf.constant(tags.types or ("",)), tf.boolean_mask(kind, opens)),
      entity_texts=word_split.substrings(
          tf.strings.unicode_decode(text, "UTF-8"), sentence, start, end),
      entity_starts=start,
      entity_ends=end,
      entity_word_starts=tf.boolean_mask(position, opens),
      entity_word_ends=span(position) + 1,
      entity_scores=tf.math.unsorted_segment_mean(
          tf.boolean_mask(scores, inside), entity, count))
  n = words.nrows(out_type=tf.int32)
  pad = {tf.string: "", tf.int32: -1, tf.float32: 0.0}
  padded = {
      k:
          tf.RaggedTensor.from_value_rowids(v, sentence,
                                            n).to_tensor(pad[v.dtype])
      for k, v in out.items()
  }
  padded["entity_count"] = tf.math.bincount(
      sentence, minlength=n, maxlength=n, dtype=tf.int32)
  return padded
