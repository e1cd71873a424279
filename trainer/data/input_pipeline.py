"""Splits -> host preprocessing -> fixed-shape int32 batches.

All text work (cleaning, WordPiece, packing) runs here, in tf.data on the
host CPU, so the replicas only ever receive int32 tensors of static shape
[batch, seq_length]. Data order is a pure function of (seed, epoch,
position): a run resumed at step s sees exactly the batches an uninterrupted
run would see from step s on, in any process (`shuffled`). Nothing here
holds the corpus in memory: rows stream from the source through a bounded
shuffle window.
"""

import tensorflow as tf

from trainer.data import row_layout
from trainer.data import splits
from trainer.foundation import features


def usable_rows(split, stripes=1):
  """(text, label) of the usable rows, one element per row: text a string
  (one text field) or a [2] vector (a pair); label int32 (float32 for
  regression), or for tagged sentences {"tags": the tag ids joined by
  spaces, "index": the sentence's place in its source}."""

  def usable(chunk):
    mask = tf.equal(chunk["reason"], 0)
    texts = tf.boolean_mask(splits.one_text(chunk)["text"], mask)
    if "tags" in chunk:  # tagged sentences: the tags and each one's place
      return texts, dict(
          tags=tf.boolean_mask(chunk["tags"], mask),
          index=tf.boolean_mask(chunk["index"], mask))
    label = tf.boolean_mask(chunk["label"], mask)
    if not label.dtype.is_floating:
      label = tf.cast(label, tf.int32)
    return texts, label

  return split.chunks(stripes).map(usable).unbatch()


# How an epoch's rows are shuffled, as config.json records it ("shuffle"):
# "windows" (`shuffled`); "buffer", tf.data's shuffle buffer, which a run
# recorded without the key used and resumes with. That order mixed in the
# process's global seed (tf.random.set_seed, as --deterministic calls it),
# so it was the same only from one fresh command to the next.
SHUFFLE = "windows"
LEGACY_SHUFFLE = "buffer"


def shuffled(rows, window, seed):
  """`rows` with each run of `window` consecutive ones permuted by
  stateless Philox draws keyed by (int64 `seed`, the run's index): an
  order that is a pure function of them in every process, whatever its
  global seed (on one TensorFlow: a test pins it). The next window is
  gathered while this one is used (up to three windows of rows in memory),
  so within an epoch a window's end does not stall the stream."""

  def permute(index, part):
    keys = tf.random.stateless_uniform(
        tf.shape(tf.nest.flatten(part)[0])[:1],
        tf.stack([tf.cast(seed, tf.int64), index]),
        minval=None,
        maxval=None,
        dtype=tf.int64,
        alg="philox")
    order = tf.argsort(keys, stable=True)
    return tf.nest.map_structure(lambda t: tf.gather(t, order), part)

  return rows.batch(window).enumerate().map(permute).prefetch(1).unbatch()


def _epoch_order(rows, shuffle, window, seed):
  """An epoch's `rows` in their order: `shuffled`, or (LEGACY_SHUFFLE)
  tf.data's buffer of `window` rows."""
  if shuffle == LEGACY_SHUFFLE:
    return rows.shuffle(window, seed=seed, reshuffle_each_iteration=False)
  return shuffled(rows, window, seed)


# Rows tokenized and packed per map call (vectorized; the order is kept).
_PACK_ROWS = 256


def labelled(packer):
  """A classification task's `encode`: (texts, labels) -> the packed
  texts' encoder inputs (`packer`) and `label`. What the streams here take
  as `encode`: (texts [n] or [n, 2], labels [n]) -> a dict of features,
  each per example ([n]) or per token ([n, seq_length]), `label` among
  them (`features`); a tagging task's is `word_pieces.tagged`."""

  def encode(texts, labels):
    features = packer(texts)
    features["label"] = labels
    return features

  return encode


def bucket_of(edges, lengths):
  """int32 edges [buckets] ascending, int32 lengths [n] -> the index of the
  smallest bucket holding each length: where training, eval and serving
  put an example."""
  return tf.searchsorted(edges, lengths, side="left")


def cut_to_bucket(inputs, buckets):
  """Serving: per-token features [n, seq_length] (with `input_mask`) cut to
  the smallest of `buckets` (ascending, the last --seq_length) that holds
  the longest example: a request of short texts pays for their length, not
  for --seq_length. Only padding is cut, so an example gets the same
  outputs whichever bucket it lands in (up to float rounding)."""
  edges = tf.constant(buckets, tf.int32)
  longest = tf.reduce_max(
      tf.concat([tf.reduce_sum(inputs["input_mask"], axis=1), [0]], 0))
  length = tf.gather(edges, bucket_of(edges, [longest]))[0]
  return {k: v[:, :length] for k, v in inputs.items()}


def _measured(encode, buckets):
  """(texts, labels) -> the encoded rows (at --seq_length) with `length`
  (tokens incl. [CLS]/[SEP]) and `bucket`, the index of the smallest bucket
  that holds them."""
  edges = tf.constant(buckets, tf.int32)

  def fn(texts, labels):
    features = encode(texts, labels)
    length = row_layout.lengths_of(features)
    features["length"] = length
    features["bucket"] = tf.cast(bucket_of(edges, length), tf.int64)
    return features

  return fn


def _measure_all(rows, measure):
  """Rows -> `measure`d examples, one element each (packed in parallel
  batches of _PACK_ROWS)."""
  return rows.batch(_PACK_ROWS).map(
      measure, num_parallel_calls=tf.data.AUTOTUNE,
      deterministic=True).unbatch()


def length_histogram(split, encode, seq_length):
  """int64 [seq_length + 1]: the usable rows of `split` per packed length
  (tokens incl. [CLS] and [SEP], at most `seq_length`): one pass that
  tokenizes every row, what --seq_buckets needs to know before training."""
  measure = _measured(encode, (seq_length,))
  ds = usable_rows(split).batch(_PACK_ROWS).map(
      lambda t, y: tf.math.bincount(
          measure(t, y)["length"],
          minlength=seq_length + 1,
          maxlength=seq_length + 1,
          dtype=tf.int64),
      num_parallel_calls=tf.data.AUTOTUNE)
  return ds.reduce(tf.zeros([seq_length + 1], tf.int64), tf.add).numpy()


def _group(rows, batch, group_size, length, pad_rows, static_length=None):
  """A window of rows of one bucket -> a group: each feature [batch,
  group_size, length] (batch-major, so a strategy splits the batch axis
  over its replicas), batch g of the group at [:, g]; `count` batches are
  real, the rest zeros. `pad_rows`: the last batch is filled with rows of
  weight 0 (eval); else the rows past the last full batch are dropped.
  `static_length`: the length when there is one bucket (a fully static
  shape then)."""
  n = tf.shape(rows["label"])[0]
  count = (n + batch - 1) // batch if pad_rows else n // batch
  out = {}
  for key, value in rows.items():
    if key in ("length", "bucket"):
      continue
    per_token = len(value.shape) == 2  # [rows, seq_length]
    value = value[:, :length] if per_token else value
    used = count * batch
    value = value[:used] if not pad_rows else tf.pad(value, [[0, used - n]] +
                                                     [[0, 0]] *
                                                     (len(value.shape) - 1))
    value = tf.reshape(value, tf.concat(
        [[count, batch], tf.shape(value)[1:]], 0))
    perm = [1, 0] + list(range(2, len(value.shape)))
    value = tf.transpose(value, perm)
    value = tf.pad(value, [[0, 0], [0, group_size - count]] + [[0, 0]] *
                   (len(value.shape) - 2))
    static = [static_length] if per_token else []
    out[key] = tf.ensure_shape(value, [batch, group_size] + static)
  return out, count


def _grouped(rows, buckets, batch, group_size, pad_rows):
  """Packed rows (`_measured`) -> groups of up to `group_size` batches of
  one bucket, in the order their bucket's window fills (a pure function of
  the rows' order); each with its `count` of real batches."""
  lengths = tf.constant(buckets, tf.int32)
  static = buckets[0] if len(buckets) == 1 else None

  def reduce(key, window):

    def one(rows):
      group, count = _group(rows, batch, group_size, lengths[key], pad_rows,
                            static)
      return dict(group, count=count, bucket=tf.cast(key, tf.int32))

    return window.batch(batch * group_size).map(one)

  groups = rows.group_by_window(
      key_func=lambda r: r["bucket"],
      reduce_func=reduce,
      window_size=batch * group_size)
  return groups.filter(lambda g: g["count"] > 0)


def _with_meta(groups, batch, first):
  """Numbers each group's batches: `meta` int32 [batch, 2] = (position of
  its first batch in the stream, its count), one row per example so that a
  strategy splits it with the batch."""

  def number(start, group):
    count = tf.cast(group["count"], tf.int64)
    meta = tf.tile(tf.stack([start, count])[tf.newaxis], [batch, 1])
    out = {k: v for k, v in group.items() if k not in ("count", "bucket")}
    out["meta"] = tf.cast(meta, tf.int32)
    return start + count, out

  return groups.scan(tf.cast(first, tf.int64), number)


def train_groups(split,
                 encode,
                 layout,
                 steps_per_epoch,
                 start_step=0,
                 seed=0,
                 shuffle_buffer=100_000,
                 read_stripes=1,
                 shuffle=SHUFFLE):
  """The endless training stream in groups, from batch position `start_step`.

  Epoch e is the split's usable rows (read at `read_stripes` places in
  round-robin) shuffled with seed (seed, e) in windows of `shuffle_buffer`
  rows (`shuffle`: see SHUFFLE), tokenized, packed, and cut into full
  batches of the `layout`'s batch size (a remainder is dropped: shapes
  never change), `steps_per_epoch` in all (`Layout.steps_per_epoch`); the
  order is a pure function of (seed, epoch, position). How they lie is
  the `Layout`'s (`trainer.foundation.layout`): each example routed to the
  smallest of its bucket lengths that holds it and cut per bucket into
  batches, in groups of up to `layout.train_group` batches of one bucket;
  or in shared rows the same batches laid out in rows, a group being a run
  of batches at one row count (`row_layout.stream`).

  Returns:
    Dataset of groups: `input_word_ids`, `input_mask`, `input_type_ids`
    int32 [batch, group, bucket], `label` int32 (float32 for regression)
    [batch, group], `meta` int32 [batch, 2] (the stream position of the
    group's first batch, its count of real batches, on every row); in
    shared rows the features `row_layout` names, rows first.
  """
  start_epoch, offset = divmod(start_step, steps_per_epoch)
  batch, group_size = layout.batch_size, layout.train_group
  base = usable_rows(split, read_stripes)
  measure = _measured(encode, layout.lengths)
  # Batches per block: a group's, or those laid out at once in shared rows.
  block = group_size
  if layout.rows:
    block = row_layout.block_batches(batch, group_size)
  rows_per_group = batch * block

  @tf.autograph.experimental.do_not_convert  # builds datasets: no
  def epoch(e, skip_groups):  # Python control flow on tensors
    ordered = _epoch_order(base, shuffle, shuffle_buffer, _epoch_seed(seed, e))
    ordered = ordered.skip(skip_groups * rows_per_group)
    first = tf.cast(e, tf.int64) * steps_per_epoch + skip_groups * block
    if layout.rows:
      return row_layout.stream(ordered, encode, layout.ladder,
                               layout.seq_length, batch, group_size, False,
                               first)
    groups = _grouped(
        _measure_all(ordered, measure), layout.lengths, batch, group_size,
        False)
    return _with_meta(groups, batch, first)

  # One bucket: groups of the first epoch before `offset` skipped as raw
  # rows (cheap); several: every group is built, then the ones before the
  # position are dropped (their rows' buckets need tokenizing). Shared rows
  # skip whole blocks the same way.
  skip = offset // block if len(layout.lengths) == 1 else 0
  return _endless(epoch, start_epoch, skip, start_step)


def _epoch_seed(seed, e):
  return tf.bitwise.bitwise_xor(
      tf.cast(seed, tf.int64) * 1_000_003, tf.cast(e, tf.int64))


def _endless(epoch, start_epoch, skip, start_step):
  """The groups of `epoch(e, skip_groups)` for e = `start_epoch` (its first
  `skip` groups skipped), `start_epoch` + 1, ..., without those that end
  at or before batch position `start_step`."""
  ds = epoch(start_epoch, skip).concatenate(
      tf.data.Dataset.range(start_epoch + 1,
                            1 << 62).flat_map(lambda e: epoch(e, 0)))
  ds = ds.filter(lambda g: tf.cast(g["meta"][0, 0] + g["meta"][0, 1], tf.int64)
                 > start_step)
  return ds.prefetch(2)


def eval_groups(split, encode, layout):
  """Every usable row of `split` exactly once, in groups as `train_groups`
  (in the order of the split) of the `layout`'s eval batches: a bucket's
  last batch is filled with rows of weight 0, and each group carries
  float32 `weight` [batch, group] (1 for real rows, 0 for padding) and
  `meta`'s count of its batches. In shared rows (`layout.eval_ladder`),
  batches of the split's consecutive rows in rows, the last one's empty
  slots of weight 0."""
  batch, group_size = layout.eval_batch, layout.eval_group
  if layout.eval_ladder:
    return row_layout.stream(
        usable_rows(split), encode, layout.eval_ladder, layout.seq_length,
        batch, group_size, True).prefetch(2)

  def weighted(texts, labels):
    features = _measured(encode, layout.lengths)(texts, labels)
    if "weight" not in features:  # per token already for tagging
      features["weight"] = tf.ones_like(features["length"], tf.float32)
    return features

  groups = _grouped(
      _measure_all(usable_rows(split), weighted), layout.lengths, batch,
      group_size, True)
  return _with_meta(groups, batch, 0).prefetch(2)


def batches(groups, start_step=0):
  """The batches of a stream of groups from batch position `start_step`,
  one element each ([batch, bucket] features, as a replica step sees them
  whole): for tests and benchmarks that look at the stream batch by
  batch."""

  def unroll(group):
    first, count = group["meta"][0, 0], group["meta"][0, 1]
    features = {
        k: tf.experimental.numpy.swapaxes(v, 0, 1)
        for k, v in group.items()
        if k != "meta"
    }
    skip = tf.maximum(
        tf.cast(start_step, tf.int64) - tf.cast(first, tf.int64), 0)
    return tf.data.Dataset.from_tensor_slices(features).take(
        tf.cast(count, tf.int64)).skip(skip)

  return groups.flat_map(unroll)


def train_dataset(split, encode, layout, steps_per_epoch, **kwargs):
  """`train_groups` batch by batch ([batch, bucket] features)."""
  return batches(
      train_groups(split, encode, layout, steps_per_epoch, **kwargs),
      kwargs.get("start_step", 0))


def eval_dataset(split, encode, layout):
  """`eval_groups` batch by batch ([batch, bucket] features, `weight`)."""
  return batches(eval_groups(split, encode, layout))


def check_int_features(element_spec):
  """Raises TypeError unless every feature is int32 (weight and a
  regression label float32) of static batch and group sizes (the length is
  a bucket's, static per group; in shared rows the row count is a shape's,
  static per group, and the rest is static): the contract that keeps
  strings and tables off the TPU."""
  rows = features.is_rows(element_spec)
  for key, spec in element_spec.items():
    want = tf.float32 if key == "weight" else tf.int32
    if key == "label" and spec.dtype == tf.float32:
      want = tf.float32
    static = (spec.shape[1:] if rows else spec.shape[:2]).is_fully_defined()
    sizes = "group size and width" if rows else "batch and group sizes"
    if spec.dtype != want or not static:
      raise TypeError(f"feature {key!r} is {spec}; replicas accept only "
                      f"{want.name} of static {sizes}")
