"""Counts: one pass over each split of a run, every row counted by its fate.

`count_splits` gives each split's rows read, used and rejected by reason
(and per class), checks them against --max_bad_fraction and caches them in
the run's folder; `check_counts` stops a run whose splits leave nothing to
learn from, naming why. Each count carries a digest of the rows' content:
`fingerprint` is what config.json keeps of a run's data and
`check_same_data` what a resume compares.
"""

from absl import logging
import tensorflow as tf

from trainer.data import sources
from trainer.data import tagged_sources
from trainer.foundation import errors
from trainer.runtime import run_dir

_HEAD_ROWS = 2000


def _row_digests(chunk):
  """int64 [rows]: a fingerprint of each row as a run sees it (its index,
  texts, label, fate and, for tagged sentences, tags); their sum (order-free,
  wrapping) is the split's content digest. A chunk without tags digests as
  it always has."""
  label = tf.strings.as_string(chunk["label"])
  fields = tf.strings.reduce_join(chunk["text"], axis=1, separator="\x1f")
  parts = [
      tf.strings.as_string(chunk["index"]), fields, label,
      tf.strings.as_string(chunk["reason"])
  ]
  if "tags" in chunk:
    parts.append(chunk["tags"])
  keys = tf.strings.join(parts, separator="\x1e")
  return tf.bitcast(tf.fingerprint(keys), tf.int64)


def count(split, limit=None, num_classes=0):
  """One pass over a split (or its first `limit` rows): rows read, used and
  rejected per reason, (with `num_classes`) the usable rows per class id,
  as {"0": n, ...}, and `digest`, a hash of every row's content (what a
  resume checks the data against). Counted a chunk at a time (a bincount
  and a fingerprint per chunk)."""
  n, k = len(sources.REASONS), max(num_classes, 1)
  chunks = split.chunks()
  if limit:
    chunks = chunks.unbatch().take(limit).batch(512)

  @tf.autograph.experimental.do_not_convert  # Python `if`s on dtypes only
  def per_chunk(chunk):
    reasons = tf.math.bincount(
        chunk["reason"], minlength=n, maxlength=n, dtype=tf.int64)
    digest = tf.reduce_sum(_row_digests(chunk))
    if chunk["label"].dtype.is_floating or num_classes < 2:
      return reasons, tf.zeros([k], tf.int64), digest
    usable = tf.boolean_mask(chunk["label"], tf.equal(chunk["reason"], 0))
    classes = tf.math.bincount(
        tf.cast(usable, tf.int32), minlength=k, maxlength=k, dtype=tf.int64)
    return reasons, classes, digest

  zeros = (tf.zeros([n],
                    tf.int64), tf.zeros([k],
                                        tf.int64), tf.constant(0, tf.int64))
  add = tf.autograph.experimental.do_not_convert(
      lambda a, b: tuple(x + y for x, y in zip(a, b)))
  totals, classes, digest = chunks.map(
      per_chunk, num_parallel_calls=tf.data.AUTOTUNE).reduce(zeros, add)
  totals, classes = totals.numpy(), classes.numpy()
  rejected = {
      sources.REASONS[i]: int(totals[i]) for i in range(1, n) if totals[i]
  }
  counts = dict(
      rows_read=int(totals.sum()),
      rows_used=int(totals[0]),
      rejected=rejected,
      digest=f"{int(digest.numpy()) & (1 << 64) - 1:016x}")
  if num_classes > 1:
    counts["classes"] = {str(i): int(c) for i, c in enumerate(classes) if c}
  return counts


def fingerprint(counts):
  """What a run's training and validation data were ({split: rows read,
  used, digest}), saved in config.json and checked on resume."""
  return {
      name: {
          k: counts[name].get(k) for k in ("rows_read", "rows_used", "digest")
      } for name in ("train", "validation") if name in counts
  }


def check_same_data(saved, counts, model_dir):
  """Raises ConfigError when the data differ from `saved` (a run's
  `fingerprint`); a run from before fingerprints (None) passes."""
  if not saved:
    return
  now = fingerprint(counts)
  changes = []
  for name in sorted(set(saved) | set(now)):
    old, new = saved.get(name, {}), now.get(name, {})
    for key in ("rows_read", "rows_used", "digest"):
      if old.get(key) != new.get(key):
        changes.append(f"{name} {key} {old.get(key)} -> {new.get(key)}")
        break
  if changes:
    raise errors.ConfigError(
        f"--model_dir={model_dir} holds the checkpoints of a run trained on "
        f"other data ({'; '.join(changes)}): resuming would change its "
        "splits, order and validation set. Restore the data the run began "
        "with, or use a new --model_dir; nothing was changed")


# Rejections that mean "this input is broken"; labels outside the map (e.g.
# Sentiment140's neutral test rows) are an expected exclusion instead. A
# tagged sentence's are all broken input, a tag outside the tag set too (a
# tag training never saw).
BAD_REASONS = ("label_not_a_number", "empty_text", "malformed_row",
               "invalid_utf8", "field_too_long", "empty_text_pair",
               "tag_not_in_set", "column_count_differs", "word_without_tag",
               "malformed_json", "tag_count_differs", "word_with_whitespace")
_TAGGED_HINT = (
    " Check the file's format (CoNLL: a word and its tag a line, the same "
    "columns on every line, a blank line between sentences; JSON lines: "
    "an object a line with equally long lists of words and tags), the tag "
    "column and the tag set.")


def check_bad_fraction(split, counts, max_fraction):
  """Raises DataError naming the file, count, reason and example lines when
  more than `max_fraction` of the split's rows are broken."""
  reasons = BAD_REASONS
  tagged = isinstance(split.source, tagged_sources.SOURCES)
  if not tagged and sources.label_kind(split.source.label_map,
                                       split.source.regression) == "word":
    # Every cell is a word: one outside the map is a typo, not a class
    # left out on purpose (Sentiment140's neutral 2).
    reasons += ("label_not_in_map",)
  bad = {r: counts["rejected"].get(r, 0) for r in reasons}
  total_bad = sum(bad.values())
  if not counts["rows_read"] or total_bad <= max_fraction * counts["rows_read"]:
    return
  reason = max(bad, key=bad.get)
  reason_id = sources.REASONS.index(reason)
  lines = [
      int(r["line"]) for r in split.records().filter(
          lambda r: tf.equal(r["reason"], reason_id)).take(3)
  ]
  detail = ", ".join(f"{r}: {n}" for r, n in bad.items() if n)
  raise errors.DataError(
      f"{split.describe()}: {total_bad} of {counts['rows_read']} rows "
      f"rejected ({detail}), more than --max_bad_fraction={max_fraction}; "
      f"most are {reason}, e.g. lines {', '.join(map(str, lines))}." +
      (_TAGGED_HINT if tagged else _hint(split.source, reason)))


def _hint(source, reason):
  """What to check when a text source's rows are broken (`reason`)."""
  return (" Check --file_format, --text_column/--label_column and --encoding" +
          (" (a TSV whose double quotes are plain characters, as GLUE's, "
           "needs --quoting=none)" if reason == "malformed_row" and
           getattr(source, "quoting", "") == "csv" and
           source.layout().delimiter == "\t" else "") + ".")


def count_splits(splits, max_bad_fraction, cache_path, num_classes=0):
  """Row counts per split ({name: count()}, with rows per class), checked
  against `max_bad_fraction` and cached at `cache_path` (a resumed run skips
  them).

  Every split's first rows are counted before any is read whole, so a wrong
  layout fails in seconds rather than after millions of rows; a split
  shorter than that head was read whole by it, and is not read again.
  """
  # The file's size and time are part of the key: an edited file is
  # counted again.
  key = repr((sorted(
      (name, repr(s), s.source.stamp()) for name, s in splits.items()),
              num_classes, "digest"))
  cached = run_dir.read_json(cache_path)
  if cached and cached.get("key") == key:
    return cached["counts"]
  heads = {}
  for name, split in splits.items():
    heads[name] = count(split, limit=_HEAD_ROWS, num_classes=num_classes)
    check_bad_fraction(split, heads[name], max_bad_fraction)
  counts = {}
  for name, split in splits.items():
    if heads[name]["rows_read"] < _HEAD_ROWS:  # the head held every row
      counts[name] = heads[name]
    else:
      counts[name] = count(split, num_classes=num_classes)
      check_bad_fraction(split, counts[name], max_bad_fraction)
    logging.info("Split %s: %d rows read, %d used, rejected %s", name,
                 counts[name]["rows_read"], counts[name]["rows_used"],
                 counts[name]["rejected"] or "none")
  run_dir.write_json(cache_path, dict(key=key, counts=counts))
  return counts


def _no_usable_rows(splits, counts, names, carved):
  """Raises the TrainingError for splits `names` (a source's carve, or one
  split) with no usable row: empty, or every row rejected (by reason)."""
  what = (
      splits[names[0]].source.describe()
      if carved else f"the {names[0]} split ({splits[names[0]].describe()})")
  read = sum(counts[k]["rows_read"] for k in names)
  if not read:
    raise errors.TrainingError(f"{what} holds no data rows (a header only, or "
                               "an empty file); check the data source flags")
  rejected = {}
  for k in names:
    for reason, n in counts[k]["rejected"].items():
      rejected[reason] = rejected.get(reason, 0) + n
  reasons = ", ".join(f"{r} {n}" for r, n in sorted(rejected.items()))
  raise errors.TrainingError(
      f"{what} has no usable rows ({read} read, rejected: {reasons}); check "
      "--label_map (every raw label must map to a class), "
      "--text_column/--label_column and --file_format")


def check_counts(splits, counts, validation_fraction):
  """Stops, saying why, on a split that leaves nothing to learn from."""
  validation = splits["validation"]
  carved = validation.holdout is not None
  # A carve of a source without usable rows is the source's problem.
  groups = [("train", "validation")] if carved else [("train",),
                                                     ("validation",)]
  for group in groups:
    if not sum(counts[k]["rows_used"] for k in group):
      _no_usable_rows(splits, counts, group, carved)
  if counts["validation"]["rows_used"] == 0 and carved:
    raise errors.TrainingError(
        f"the validation split carved from {validation.source.describe()} "
        f"at --validation_fraction={validation_fraction} holds no usable row "
        f"(the file has {counts['train']['rows_used']} usable rows); raise "
        "--validation_fraction or give --eval_file")
  if counts["train"]["rows_used"] == 0:
    raise errors.TrainingError(
        f"the training part of {validation.source.describe()} holds no "
        f"usable row at --validation_fraction={validation_fraction}; lower "
        "it or give --eval_file")
  classes = counts["train"].get("classes", {})
  if len(classes) == 1:
    (only, rows), = classes.items()
    raise errors.TrainingError(
        f"the training split has examples of class {only} only ({rows} "
        "rows): a classifier learns nothing from one class. Check "
        "--label_column and --label_map (each class needs a raw label)")


def flat_counts(counts):
  """{split: count()} -> summary.json's data.<split>.<what> keys."""
  flat = {}
  for split, c in counts.items():
    flat[f"data.{split}.rows_read"] = c["rows_read"]
    flat[f"data.{split}.rows_used"] = c["rows_used"]
    for reason, n in c["rejected"].items():
      flat[f"data.{split}.rejected.{reason}"] = n
  return flat
