"""Splits -> host preprocessing -> fixed-shape int32 batches.

All text work (cleaning, WordPiece, packing) runs here, in tf.data on the
host CPU, so the replicas only ever receive int32 tensors of static shape
[batch, seq_length]. Data order is a pure function of (seed, epoch,
position): a run resumed at step s sees exactly the batches an uninterrupted
run would see from step s on. Nothing here holds the corpus in memory: rows
stream from the source through a bounded shuffle buffer.
"""

import tensorflow as tf


def _one_text(chunk):
  """A chunk whose text [rows, 1] is squeezed to [rows]."""
  if chunk["text"].shape[1] != 1:
    return chunk
  return dict(chunk, text=chunk["text"][:, 0])


def usable_rows(split, stripes=1):
  """(text, label) of the usable rows, one element per row: text a string
  (one text field) or a [2] vector (a pair); label int32 (float32 for
  regression)."""

  def usable(chunk):
    mask = tf.equal(chunk["reason"], 0)
    texts = tf.boolean_mask(_one_text(chunk)["text"], mask)
    label = tf.boolean_mask(chunk["label"], mask)
    if not label.dtype.is_floating:
      label = tf.cast(label, tf.int32)
    return texts, label

  return split.chunks(stripes).map(usable).unbatch()


def _pack_batch(packer):

  def fn(texts, labels):
    features = packer(texts)
    features["label"] = labels
    return features

  return fn


def train_dataset(split,
                  packer,
                  global_batch_size,
                  steps_per_epoch,
                  start_step=0,
                  seed=0,
                  shuffle_buffer=100_000,
                  read_stripes=1):
  """The endless training stream, positioned at `start_step`.

  Epoch e is the split's usable rows (a file read at `read_stripes` places
  in round-robin) shuffled with seed (seed, e) through a bounded buffer, cut
  into `steps_per_epoch` full batches (the remainder is dropped so shapes
  never change). The first `start_step` batches are skipped
  before any tokenization.

  Returns:
    Dataset of dicts: int32 `input_word_ids`, `input_mask`, `input_type_ids`
    [global_batch_size, seq_length] and int32 `label` [global_batch_size].
  """
  start_epoch, offset = divmod(start_step, steps_per_epoch)
  base = usable_rows(split, read_stripes)

  def epoch(e):
    epoch_seed = tf.bitwise.bitwise_xor(
        tf.cast(seed, tf.int64) * 1_000_003, tf.cast(e, tf.int64))
    return base.shuffle(
        shuffle_buffer, seed=epoch_seed, reshuffle_each_iteration=False).batch(
            global_batch_size, drop_remainder=True).take(steps_per_epoch)

  ds = tf.data.Dataset.range(start_epoch, 1 << 62).flat_map(epoch).skip(offset)
  ds = ds.map(
      _pack_batch(packer),
      num_parallel_calls=tf.data.AUTOTUNE,
      deterministic=True)
  return ds.prefetch(tf.data.AUTOTUNE)


def eval_dataset(split, packer, global_batch_size):
  """Every usable row exactly once, in full batches padded with weight 0.

  Returns:
    Dataset of dicts as `train_dataset` plus float32 `weight`
    [global_batch_size] (1 for real rows, 0 for padding).
  """
  pack = _pack_batch(packer)

  def pad(texts, labels):
    features = pack(texts, labels)
    real = tf.shape(labels)[0]
    missing = global_batch_size - real
    out = {}
    for key, value in features.items():
      padding = [[0, missing]] + [[0, 0]] * (len(value.shape) - 1)
      padded = tf.pad(value, padding)
      out[key] = tf.ensure_shape(padded, [global_batch_size] +
                                 value.shape[1:].as_list())
    out["weight"] = tf.ensure_shape(
        tf.concat([tf.ones([real]), tf.zeros([missing])], axis=0),
        [global_batch_size])
    return out

  ds = usable_rows(split).batch(global_batch_size).map(
      pad, num_parallel_calls=tf.data.AUTOTUNE, deterministic=True)
  return ds.prefetch(tf.data.AUTOTUNE)


def check_int_features(element_spec):
  """Raises TypeError unless every feature is int32 (weight and a
  regression label float32) and fully static: the contract that keeps
  strings and tables off the TPU."""
  for key, spec in element_spec.items():
    want = tf.float32 if key == "weight" else tf.int32
    if key == "label" and spec.dtype == tf.float32:
      want = tf.float32
    if spec.dtype != want or not spec.shape.is_fully_defined():
      raise TypeError(f"feature {key!r} is {spec}; replicas accept only "
                      f"{want.name} of static shape")
