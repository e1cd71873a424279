r"""Predict with an exported model: raw text in, classes and probabilities out
(a tagging export: each word's tag and the entities, `tagged_rows`).

`predict(export_dir, ...)` (`trainer.predict` in Python) yields one row per
text, streamed; `python -m trainer.predict` writes them (its usage:
trainer/commands/predict.py).

`--tfds_name` predicts every row of a TFDS split (`--split`, default test:
GLUE's, whose labels are hidden), its text fields from `--text_key` or the
task's (sentence1,sentence2 for glue/mrpc).

`--input_file` holds one text per line, or is a CSV/TSV whose `--text_column`
(name or 0-based index; two comma-separated for a sentence-pair model) is
read. Output is JSON lines (stdout by default) or CSV when `--output_file`
ends in .csv: class id, name and probabilities, or a regression model's
score; for a tagging export the text, its words and its entities (each
list one cell, as JSON). Input is streamed in batches of `--batch_size`;
nothing is held in memory beyond one batch.
"""

import csv
import itertools
import json
import sys

from absl import logging
import tensorflow as tf
import tensorflow_text  # noqa: F401  (registers the preprocessor's ops)

from trainer.data import files
from trainer.data import sources
from trainer.data import splits
from trainer.foundation import config
from trainer.foundation import errors
from trainer.foundation import tasks
from trainer.serving import exported
from trainer.serving import tagged_rows

# Bad input flags or files: one line, exit code 2 (trainer.cli).
PredictError = errors.ConfigError


class Tally:
  """The rows an input yielded: `read` counts those read (skipped ones
  too), as the reader goes."""

  def __init__(self):
    self.read = 0

  def count(self, rows):
    for row in rows:
      self.read += 1
      yield row


def read_texts(input_file,
               text_column="text",
               quoting="csv",
               header="auto",
               encoding="",
               file_format="auto",
               tally=None):
  """Yields the texts of `input_file` one by one (streamed): strings, or
  (text, text_pair) tuples when `text_column` names two columns.

  A CSV/TSV (by name or --file_format, Sentiment140's layout included) is
  read by the reader training and `trainer.evaluate` use, labels not read:
  the same encoding, header, quoting and layout rules, the same rows
  skipped (malformed, empty text: counted, and said at the end). Another
  file holds one text per line. `tally` (a `Tally`) counts the rows read,
  those skipped too."""
  tally = tally or Tally()
  if not tf.io.gfile.exists(input_file):
    raise PredictError(f"--input_file={input_file} does not exist")
  names = [n.strip() for n in text_column.split(",")]
  lower = input_file.lower().removesuffix(".gz")
  if file_format == "auto" and not lower.endswith((".csv", ".tsv")):
    if len(names) > 1:
      raise PredictError(f"--input_file={input_file}: sentence pairs need "
                         "a CSV/TSV with --text_column=a,b")
    yield from tally.count(_lines(input_file, encoding))
    return
  source = sources.FileSource(input_file, {}, file_format, text_column, "",
                              encoding, "", header, quoting)
  logging.info("%s: %s", input_file, source.layout().describe())
  skipped = {}
  for chunk in splits.Split("input", source).chunks().as_numpy_iterator():
    for texts, reason in tally.count(zip(chunk["text"], chunk["reason"])):
      if reason:
        name = sources.REASONS[reason]
        skipped[name] = skipped.get(name, 0) + 1
        continue
      texts = tuple(t.decode("utf-8") for t in texts)
      yield texts if len(texts) > 1 else texts[0]
  if skipped:
    logging.warning("%s: %d rows skipped, as training skips them (%s)",
                    input_file, sum(skipped.values()),
                    ", ".join(f"{k} {v}" for k, v in sorted(skipped.items())))


def _lines(input_file, encoding):
  """One text per line, decoded as data files are (a UTF-8 byte-order mark
  skipped; --encoding, else UTF-8 unless the start says ISO-8859-1)."""
  with files.open_binary(input_file) as f:
    sample = f.read(1 << 20)
  start = 3 if sample.startswith(b"\xef\xbb\xbf") else 0
  encoding = encoding or files.detect_encoding(sample[start:])
  with files.open_binary(input_file) as f:
    f.read(start)
    for line in f:
      yield line.decode(encoding, errors="replace").rstrip("\r\n")


def read_tfds(name, split, text_key="", data_dir=""):
  """Yields the texts of every row of a TFDS split (strings, or pairs)."""
  keys = tasks.tfds_text_fields(name, text_key)
  ds = sources.load_tfds(name, split, data_dir or None, keys)
  for example in ds.as_numpy_iterator():
    texts = tuple(example[k].decode("utf-8", errors="replace") for k in keys)
    yield texts if len(texts) > 1 else texts[0]


# Texts read ahead and sorted by length before batching, so a batch holds
# texts of like length and the export packs it to a small bucket; the rows
# still come out in the input's order.
_SORT_BATCHES = 8


def _words(text):
  """A text's length in words (both texts of a pair): the sort key."""
  return sum(len(t.split()) for t in text) if isinstance(text, tuple) else len(
      text.split())


def _rows(batch, out, pairs):
  for i, text in enumerate(batch):
    row = dict(text=text[0], text_pair=text[1]) if pairs else dict(text=text)
    if "scores" in out:
      row["score"] = round(float(out["scores"][i]), 6)
    else:
      row.update(
          class_id=int(out["class_ids"][i]),
          class_name=out["class_names"][i].numpy().decode(),
          probabilities=[
              round(float(x), 6) for x in out["probabilities"][i].numpy()
          ])
    yield row


def _serve(serve, batch, pairs):
  if pairs:
    return serve(
        text=tf.constant([t[0] for t in batch]),
        text_pair=tf.constant([t[1] for t in batch]))
  return serve(text=tf.constant(batch))


def _said(rows, what, tally):
  """`rows` (the predictions), then one line: the rows of `what` read and
  scored; a warning when none was, since no output at all would otherwise
  be all an empty input gives."""
  scored = 0
  for row in rows:
    scored += 1
    yield row
  (logging.info if scored else logging.warning)("%s: %d rows read, %d scored",
                                                what, tally.read, scored)


def predictions(serve, texts, batch_size=256):
  """Yields one dict per text (a string, or a (text, text_pair) tuple for
  a pair model), in the order of `texts`: text[, text_pair], class_id,
  class_name, probabilities (a regression model: score), batched by
  length (`in_order`)."""
  pairs = exported.pairs(serve)

  def rows_of(batch):
    if pairs != isinstance(batch[0], tuple):
      raise PredictError("this export takes " +
                         ("sentence pairs: give --text with "
                          "--text_pair, or --text_column=a,b"
                          if pairs else "one text: give one --text_column"))
    return _rows(batch, _serve(serve, batch, pairs), pairs)

  return in_order(texts, batch_size, rows_of)


def in_order(texts, batch_size, rows_of):
  """Yields one row per text of `texts`, in their order: the texts read
  `_SORT_BATCHES` batches ahead, sorted by length (`_words`) and handed to
  `rows_of` (a list of at most `batch_size` texts -> one row per text, in
  its order) in batches of like length."""
  texts = iter(texts)
  while True:
    window = list(itertools.islice(texts, batch_size * _SORT_BATCHES))
    if not window:
      return
    order = sorted(range(len(window)), key=lambda i: _words(window[i]))
    rows = [None] * len(window)
    for start in range(0, len(order), batch_size):
      picked = order[start:start + batch_size]
      for i, row in zip(picked, rows_of([window[i] for i in picked])):
        rows[i] = row
    yield from rows


def write(predictions, output_file):
  out = tf.io.gfile.GFile(output_file, "w") if output_file else sys.stdout
  try:
    if output_file.lower().endswith(".csv"):
      writer = csv.writer(out, lineterminator="\n")
      header = None
      for p in predictions:
        if header is None:
          header = list(p)
          writer.writerow(header)
        writer.writerow([_cell(k, p[k]) for k in header])
    else:
      for p in predictions:
        out.write(json.dumps(p, ensure_ascii=False) + "\n")
  finally:
    if output_file:
      out.close()


def _cell(key, value):
  """A CSV cell: probabilities joined by spaces, a tagging row's words and
  entities as JSON."""
  if key == "probabilities":
    return " ".join(map(str, value))
  if isinstance(value, list):
    return json.dumps(value, ensure_ascii=False)
  return value


def _texts(name, values):
  """`values` as a list of strings; a PredictError for one string where a
  list belongs (it would be read as its characters) or a non-string."""
  if isinstance(values, (str, bytes)):
    raise PredictError(f"{name} must be a list of texts, not one string: give "
                       f"[{values[:40]!r}]")
  values = list(values)
  for i, v in enumerate(values):
    if not isinstance(v, str):
      raise PredictError(
          f"{name}[{i}] is {type(v).__name__} ({v!r:.40}), not a string")
  return values


def predict(export_dir,
            texts=None,
            text_pairs=(),
            *,
            input_file="",
            text_column=config.default("text_column"),
            quoting=config.default("quoting"),
            header=config.default("header"),
            encoding=config.default("encoding"),
            file_format=config.default("file_format"),
            tfds_name="",
            split="test",
            text_key=config.default("text_key"),
            data_dir=config.default("data_dir"),
            batch_size=256):
  """Predicts with the export at `export_dir`; yields one dict per text
  (`predictions`), streamed. The texts are `texts` (with `text_pairs`, one
  per text, for a pair model), or every row of `input_file` (one text per
  line, or a CSV/TSV's `text_column`: two comma-separated for pairs), or of
  the TFDS split `split` of `tfds_name` (its `text_key` fields, '' = the
  task's). Exactly one of the three; an empty list of texts yields no
  rows."""
  if ((texts is not None) + bool(input_file) + bool(tfds_name)) != 1:
    raise PredictError("give --text (one or more), --input_file or "
                       "--tfds_name")
  texts = _texts("texts", texts) if texts is not None else []
  text_pairs = _texts("text_pairs", text_pairs)
  if batch_size < 1:
    raise PredictError(f"--batch_size={batch_size} is invalid: must be >= 1")
  if text_pairs and len(text_pairs) != len(texts):
    raise PredictError(f"give one --text_pair per --text ({len(texts)} "
                       f"--text, {len(text_pairs)} --text_pair)")
  loaded = exported.load(export_dir)
  tagger = exported.load_tagger(
      export_dir, loaded=loaded) if exported.is_tagging(loaded) else None
  if tagger and (text_pairs or ("," in text_column and input_file)):
    raise PredictError(f"--export_dir={export_dir} is a tagging export: it "
                       "takes one text, not sentence pairs (no --text_pair, "
                       "one --text_column)")
  if tagger and tfds_name:
    raise PredictError(f"--export_dir={export_dir} is a tagging export: give "
                       "it texts (--text, --input_file), not --tfds_name")
  serve = tagger or exported.load_serving(export_dir, loaded=loaded)[0]
  tally = Tally()
  if tfds_name:
    what = f"--tfds_name={tfds_name} --split={split or 'test'}"
    rows = tally.count(
        read_tfds(tfds_name, split or "test", text_key, data_dir))
  elif input_file:
    what = f"--input_file={input_file}"
    rows = read_texts(input_file, text_column, quoting, header, encoding,
                      file_format, tally)
  else:
    what = "--text"
    rows = tally.count(list(zip(texts, text_pairs)) if text_pairs else texts)
  if tagger:
    tag = lambda batch: tagged_rows.rows(
        tagger.text(text=tf.constant(batch, tf.string)), batch)
    return _said(in_order(rows, batch_size, tag), what, tally)
  return _said(predictions(serve, rows, batch_size), what, tally)
