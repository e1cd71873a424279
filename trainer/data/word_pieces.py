"""Words to pieces on the host, for tagging: each word's WordPiece pieces,
its tag on its first piece.

A tagged sentence is a list of words (as CoNLL and Hugging Face `datasets`
give them) and a tag per word. `make_word_packer` tokenizes every word with
the run's preprocessor (TF Text tokenizes a tensor of words, so each piece
knows its word), packs `[CLS] pieces [SEP]` at --seq_length as the
preprocessor packs a text, and writes per token the word's tag on its
first piece (`label`) with weight 1 there (`weight`); other pieces,
`[CLS]`, `[SEP]` and padding carry weight 0 (Hugging Face's -100). Whole
words only: a sentence longer than --seq_length pieces keeps the words that
fit and counts the words cut (`words_cut`); `sentence_windows` cuts such
a sentence into consecutive windows of whole words instead, so that eval,
evaluate and predict (one function for all three) score every word once.
A word of more than --seq_length - 2 pieces keeps its first ones
(`capped`), everywhere: it trains, is evaluated and is served alone in its
row, on its first piece.

A word that tokenizes to no piece (only control or format characters, which
BERT's clean-up removes) is given one unknown piece, so it is still
predicted: the same for every word, whatever the tokenizer drops.

Every op here is a string or lookup-table op: host only, in tf.data.
"""

import tensorflow as tf
import tensorflow_text as text

from trainer.data import preprocessing

# What a word of no piece is tokenized as: a private-use character, in no
# WordPiece vocabulary, so the tokenizer gives it its unknown token.
NO_PIECE = "\ue000"


def split_words(sentences):
  """string [n] of words joined by single spaces -> RaggedTensor string
  [n, (words)] (the tagged sources' `text`)."""
  return tf.strings.split(sentences, sep=" ")


def word_pieces(preprocessor, words):
  """int32 RaggedTensor [n, (words), (pieces)]: each word's pieces (at
  least one: a word of none gets the unknown piece, `NO_PIECE`).

  Args:
    preprocessor: a loaded TF Hub style preprocessor (its `tokenize`).
    words: RaggedTensor string [n, (words)].
  """
  flat = preprocessing.clean_text(words.flat_values)
  pieces = tf.cast(preprocessor.tokenize(flat).merge_dims(1, 2), tf.int32)
  # Tokenized once: a word of no piece gets NO_PIECE's (the unknown piece)
  # appended, every other word nothing.
  unknown = tf.cast(
      preprocessor.tokenize(tf.constant([NO_PIECE])).flat_values[:1], tf.int32)
  empty = tf.equal(pieces.row_lengths(), 0)
  filler = tf.RaggedTensor.from_row_lengths(
      tf.repeat(unknown, tf.reduce_sum(tf.cast(empty, tf.int32))),
      tf.cast(empty, tf.int64))
  pieces = tf.concat([pieces, filler], axis=1)
  return tf.RaggedTensor.from_row_lengths(pieces, words.row_lengths())


def capped(pieces, budget):
  """`pieces` (int32 RaggedTensor [n, (words), (pieces)]) with each word's
  pieces cut to its first `budget`: a word longer than a row holds keeps
  the pieces that fit, alone in its row, and is tagged on its first piece
  (training, evals and serving alike). A no-op on words that fit."""
  return pieces.with_values(pieces.values[:, :budget])


def fitting_words(pieces, budget):
  """bool RaggedTensor [n, (words)]: the words whose pieces end within
  `budget` pieces of their sentence's start (the words kept whole)."""
  ends = tf.math.cumsum(pieces.row_lengths(axis=2), axis=1)
  return ends <= budget


def make_word_packer(preprocessor, seq_length):
  """Returns pack(sentences, tags) -> dict of int32 [n, seq_length]
  `input_word_ids`, `input_mask`, `input_type_ids`, `label` (each word's
  tag on its first piece, 0 elsewhere), float32 [n, seq_length] `weight`
  (1 on a word's first piece, 0 elsewhere), and int32 [n] `words_cut` (the
  words that did not fit, dropped whole).

  Args:
    preprocessor: a loaded TF Hub style preprocessor.
    seq_length: tokens per example, [CLS] and [SEP] included.

  pack's args: `sentences` string [n], words joined by single spaces;
  `tags` int32 RaggedTensor [n, (words)], one tag id per word.
  """
  special = preprocessing.special_tokens(preprocessor)
  budget = seq_length - 2

  def pack(sentences, tags):
    pieces = capped(word_pieces(preprocessor, split_words(sentences)), budget)
    keep = fitting_words(pieces, budget)
    kept = tf.ragged.boolean_mask(pieces, keep)
    kept_tags = tf.ragged.boolean_mask(tags, keep)
    # Per piece: its word's tag, and whether it is the word's first piece.
    per_word = kept.values  # [words kept, (pieces)]
    first = tf.ragged.range(per_word.row_lengths()).flat_values == 0
    tag = tf.gather(kept_tags.flat_values, per_word.value_rowids())
    ids = kept.merge_dims(1, 2)
    out = _packed(
        ids,
        dict(
            label=ids.with_flat_values(tf.where(first, tag, 0)),
            weight=ids.with_flat_values(tf.cast(first, tf.float32))), special,
        seq_length, sentences.shape[0])
    out["words_cut"] = tf.cast(
        tf.reduce_sum(tf.cast(tf.logical_not(keep), tf.int32), axis=1),
        tf.int32)
    return out

  return pack


def _packed(ids, per_piece, special, seq_length, static_rows=None):
  """`[CLS] ids [SEP]` padded to seq_length: int32 [n, seq_length]
  `input_word_ids`, `input_mask`, `input_type_ids`, and each of
  `per_piece` (RaggedTensors [n, (pieces)] like `ids`) beside its pieces,
  0 on [CLS], [SEP] and padding."""
  n = ids.nrows(out_type=tf.int32)
  start = tf.fill([n, 1], special["start_of_sequence_id"])
  end = tf.fill([n, 1], special["end_of_segment_id"])
  word_ids, mask = text.pad_model_inputs(
      tf.concat([start, ids, end], axis=1),
      max_seq_length=seq_length,
      pad_value=special["padding_id"])
  static = [static_rows, seq_length]
  out = dict(
      input_word_ids=tf.ensure_shape(tf.cast(word_ids, tf.int32), static),
      input_mask=tf.ensure_shape(tf.cast(mask, tf.int32), static),
      input_type_ids=tf.zeros_like(tf.cast(mask, tf.int32)))
  for key, values in per_piece.items():
    zeros = tf.zeros([n, 1], values.dtype)
    padded, _ = text.pad_model_inputs(
        tf.concat([zeros, values, zeros], axis=1), max_seq_length=seq_length)
    out[key] = tf.ensure_shape(padded, static)
  return out


def window_ids(pieces, budget):
  """int32 RaggedTensor [n, (words)]: each word's window in its sentence:
  consecutive whole words, greedily, each window at most `budget` pieces
  (a longer word alone in its own, its pieces truncated when packed).

  One `tf.while_loop` step per window, vectorized over the sentences."""
  lengths = tf.cast(pieces.row_lengths(axis=2), tf.int32)
  ends = tf.math.cumsum(lengths, axis=1).flat_values
  sentence = lengths.value_rowids()
  first_of_row = tf.cast(lengths.row_starts(), tf.int32)
  n = tf.shape(first_of_row)[0]

  def body(k, window, opened):
    # `opened`: where each sentence's current window starts, in pieces.
    free = window < 0
    room = ends - tf.gather(opened, sentence) <= budget
    # A sentence's first free word always opens the window (a word longer
    # than `budget` goes alone).
    first_free = tf.math.unsorted_segment_min(
        tf.where(free, tf.range(tf.size(window)), tf.size(window)), sentence, n)
    leads = tf.equal(tf.range(tf.size(window)), tf.gather(first_free, sentence))
    take = free & (room | leads)
    window = tf.where(take, k, window)
    last_end = tf.math.unsorted_segment_max(
        tf.where(take, ends, -1), sentence, n)
    opened = tf.where(last_end >= 0, last_end, opened)
    return k + 1, window, opened

  window = tf.fill(tf.shape(ends), -1)
  _, window, _ = tf.while_loop(
      lambda k, window, _: tf.reduce_any(window < 0), body,
      (tf.constant(0), window, tf.zeros([n], tf.int32)))
  return lengths.with_flat_values(window)


def sentence_windows(pieces, special, seq_length):
  """Every word of every sentence in windows of whole words (`window_ids`),
  each window a row: what evals (`tagged`) and a tagging export score, no
  word dropped.

  Args:
    pieces: int32 RaggedTensor [n, (words), (pieces)] (`word_pieces`).
    special: the preprocessor's special token ids
      (`preprocessing.special_tokens`).
    seq_length: tokens per row, [CLS] and [SEP] included.

  Returns:
    dict of int32 [windows, seq_length] `input_word_ids`, `input_mask`,
    `input_type_ids` and `word`: on a word's first piece the word's place
    among all the words of `pieces` (flat, row-major), -1 elsewhere. A
    word of more than seq_length - 2 pieces keeps its first ones, alone
    in its window; a sentence of no word has no window.
  """
  budget = seq_length - 2
  pieces = capped(pieces, budget)
  per_word = pieces.values  # [words, (pieces)]
  window = window_ids(pieces, budget)
  # A sentence of no word has no window (its reduce_max is the lowest int).
  windows = tf.where(pieces.row_lengths() > 0,
                     tf.cast(tf.reduce_max(window, axis=1), tf.int64) + 1, 0)
  base = tf.math.cumsum(windows, exclusive=True)
  group = tf.gather(base, window.value_rowids()) + tf.cast(
      window.flat_values, tf.int64)
  piece_group = tf.gather(group, per_word.value_rowids())
  count = tf.reduce_sum(windows)
  first = tf.ragged.range(per_word.row_lengths()).flat_values == 0
  word = tf.where(first, tf.cast(per_word.value_rowids(), tf.int32), -1)
  ids = tf.RaggedTensor.from_value_rowids(per_word.flat_values, piece_group,
                                          count)
  out = _packed(ids, dict(word=ids.with_flat_values(word + 1)), special,
                seq_length)
  out["word"] -= 1
  return out


def parse_tags(joined):
  """string [n] of tag ids joined by single spaces (the tagged sources'
  `tags`) -> int32 RaggedTensor [n, (words)]."""
  return tf.strings.to_number(tf.strings.split(joined, sep=" "), tf.int32)


def tagged(preprocessor, seq_length, windows_of_words=False):
  """A tagging task's `encode` for the input pipeline's streams: (words
  joined by spaces [n], {"tags": tag ids joined [n], "index": int64 [n]})
  -> per-token features (`make_word_packer`'s, without `words_cut`).

  Training truncates a sentence that does not fit to its whole words that
  do. With `windows_of_words` (eval) a sentence is cut into windows of
  whole words instead (`sentence_windows`, as serving cuts it), each a row
  of its own, and every token also carries its sentence (`sentence`: the
  sentence's `index`) and for a word's first piece its place in the
  sentence (`word`, else -1), so that the eval scores every word once, in
  its sentence."""
  pack = make_word_packer(preprocessor, seq_length)
  special = preprocessing.special_tokens(preprocessor)

  def encode(sentences, labels):
    tags = parse_tags(labels["tags"])
    if not windows_of_words:
      out = pack(sentences, tags)
      del out["words_cut"]
      return out
    words = split_words(sentences)
    out = sentence_windows(
        word_pieces(preprocessor, words), special, seq_length)
    flat = out.pop("word")  # the word among all of `words`, or -1
    first_piece = flat >= 0
    known = tf.maximum(flat, 0)
    owner = tf.cast(tf.gather(words.value_rowids(), known), tf.int32)
    starts = tf.cast(words.row_starts(), tf.int32)
    out["label"] = tf.where(first_piece, tf.gather(tags.flat_values, known), 0)
    out["weight"] = tf.cast(first_piece, tf.float32)
    out["word"] = tf.where(first_piece, known - tf.gather(starts, owner), -1)
    # A window opens with its first word's first piece, after [CLS].
    sentence = tf.cast(tf.gather(labels["index"], owner[:, 1]), tf.int32)
    out["sentence"] = tf.broadcast_to(sentence[:, tf.newaxis],
                                      tf.shape(out["label"]))
    return out

  return encode


def words_cut(split, preprocessor, seq_length):
  """(words, words cut) of `split`'s usable sentences at `seq_length`: one
  pass that tokenizes every sentence."""
  pack = make_word_packer(preprocessor, seq_length)

  def count(chunk):
    usable = tf.equal(chunk["reason"], 0)
    sentences = tf.boolean_mask(chunk["text"][:, 0], usable)
    tags = parse_tags(tf.boolean_mask(chunk["tags"], usable))
    cut = tf.reduce_sum(pack(sentences, tags)["words_cut"])
    return tf.stack([tf.size(tags.values, tf.int64), tf.cast(cut, tf.int64)])

  total = split.chunks().map(count).reduce(
      tf.zeros([2], tf.int64), lambda a, b: a + b).numpy()
  return int(total[0]), int(total[1])
