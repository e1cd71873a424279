r"""Predict with an exported model: raw text in, classes and probabilities out.

    python -m trainer.predict --export_dir=DIR --text="what a day" --text=...
    python -m trainer.predict --export_dir=DIR --input_file=tweets.txt \
        --output_file=predictions.jsonl

    python -m trainer.predict --export_dir=PAIR_EXPORT \
        --text="The cat sat." --text_pair="A cat was sitting."
    python -m trainer.predict --export_dir=PAIR_EXPORT \
        --input_file=dev.tsv --text_column=sentence1,sentence2 --quoting=none
    python -m trainer.predict --export_dir=MRPC_EXPORT --tfds_name=glue/mrpc \
        --split=test --output_file=mrpc_test.jsonl

`--tfds_name` predicts every row of a TFDS split (`--split`, default test:
GLUE's, whose labels are hidden), its text fields from `--text_key` or the
task's (sentence1,sentence2 for glue/mrpc).

`--input_file` holds one text per line, or is a CSV/TSV whose `--text_column`
(name or 0-based index; two comma-separated for a sentence-pair model) is
read. Output is JSON lines (stdout by default) or CSV when `--output_file`
ends in .csv: class id, name and probabilities, or a regression model's
score. Input is streamed in batches of `--batch_size`; nothing is held in
memory beyond one batch.
"""

import csv
import itertools
import json
import sys

from absl import flags
import tensorflow as tf
import tensorflow_text  # noqa: F401  (registers the preprocessor's ops)

from trainer import cli
from trainer.base import errors
from trainer import export
from trainer.data import files
from trainer.base import run_dir
from trainer.data import sources
from trainer.base import tasks

# Bad input flags or files: one line, exit code 2 (trainer.cli).
PredictError = errors.ConfigError


def _column(name, header, input_file):
  if name in header:
    return header.index(name)
  if name.isdigit():
    return int(name)
  raise PredictError(f"{input_file}: no column {name!r} (--text_column); the "
                     f"header has {header[:8]}")


def read_texts(input_file, text_column="text", quoting="csv", header="yes"):
  """Yields the texts of `input_file` one by one (streamed): strings, or
  (text, text_pair) tuples when `text_column` names two columns."""
  if not tf.io.gfile.exists(input_file):
    raise PredictError(f"--input_file={input_file} does not exist")
  lower = input_file.lower().removesuffix(".gz")
  names = [n.strip() for n in text_column.split(",")]
  with files.open_binary(input_file) as f:
    lines = (line.decode("utf-8-sig", errors="replace") for line in f)
    if not lower.endswith((".csv", ".tsv")):
      if len(names) > 1:
        raise PredictError(f"--input_file={input_file}: sentence pairs need "
                           "a CSV/TSV with --text_column=a,b")
      for line in lines:
        yield line.rstrip("\r\n")
      return
    reader = csv.reader(
        lines,
        delimiter="\t" if lower.endswith(".tsv") else ",",
        quoting=csv.QUOTE_NONE if quoting == "none" else csv.QUOTE_MINIMAL)
    header = [c.strip() for c in next(reader, [])] if header == "yes" else []
    columns = [_column(n, header, input_file) for n in names]
    for row in reader:
      texts = tuple(row[i] if i < len(row) else "" for i in columns)
      yield texts if len(texts) > 1 else texts[0]


def read_tfds(name, split, text_key="", data_dir=""):
  """Yields the texts of every row of a TFDS split (strings, or pairs)."""
  task = tasks.tfds_task(name)
  keys = [
      k.strip()
      for k in (text_key or (task.text_keys if task else "text")).split(",")
  ]
  ds = sources.load_tfds(name, split, data_dir or None, keys)
  for example in ds.as_numpy_iterator():
    texts = tuple(example[k].decode("utf-8", errors="replace") for k in keys)
    yield texts if len(texts) > 1 else texts[0]


def predict(serve, texts, batch_size=256):
  """Yields one dict per text (a string, or a (text, text_pair) tuple for
  a pair model): text[, text_pair], class_id, class_name, probabilities
  (a regression model: score)."""
  texts = iter(texts)
  pairs = export.pairs(serve)
  while True:
    batch = list(itertools.islice(texts, batch_size))
    if not batch:
      return
    if pairs != isinstance(batch[0], tuple):
      raise PredictError("this export takes " +
                         ("sentence pairs: give --text with "
                          "--text_pair, or --text_column=a,b"
                          if pairs else "one text: give one --text_column"))
    if pairs:
      out = serve(
          text=tf.constant([t[0] for t in batch]),
          text_pair=tf.constant([t[1] for t in batch]))
    else:
      out = serve(text=tf.constant(batch))
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
        writer.writerow([
            " ".join(map(str, p[k])) if k == "probabilities" else p[k]
            for k in header
        ])
    else:
      for p in predictions:
        out.write(json.dumps(p, ensure_ascii=False) + "\n")
  finally:
    if output_file:
      out.close()


def define_flags():
  flags.DEFINE_string("export_dir", None, "An export from trainer.export.")
  flags.DEFINE_multi_string("text", [], "Text to classify (repeatable).")
  flags.DEFINE_multi_string("text_pair", [],
                            "A pair model's second text, one per --text.")
  flags.DEFINE_string("input_file", "", "One text per line, or a CSV/TSV.")
  flags.DEFINE_string(
      "text_column", "text", "CSV/TSV text column; two comma-separated for "
      "a pair model.")
  flags.DEFINE_enum(
      "quoting", "csv", ["csv", "none"], "none: double quotes "
      "are plain characters (GLUE's TSVs).")
  flags.DEFINE_enum(
      "header", "yes", ["yes", "no"], "Whether a CSV/TSV starts with a "
      "header row (no: --text_column by index, as GLUE's CoLA).")
  flags.DEFINE_string("tfds_name", "", "Predict every row of a TFDS split.")
  flags.DEFINE_string("split", "test", "The TFDS split (--tfds_name).")
  flags.DEFINE_string(
      "text_key", "", "TFDS text feature(s), comma-separated ('' = the "
      "task's).")
  flags.DEFINE_string("data_dir", "", "TFDS data_dir (gs:// works).")
  flags.DEFINE_string("output_file", "", "'' = stdout (JSON lines); .csv "
                      "writes CSV.")
  flags.DEFINE_integer("batch_size", 256, "Texts per call.")
  flags.mark_flag_as_required("export_dir")


def main(argv):
  del argv
  f = flags.FLAGS
  if (bool(f.text) + bool(f.input_file) + bool(f.tfds_name)) != 1:
    raise PredictError("give --text (one or more), --input_file or "
                       "--tfds_name")
  if f.batch_size < 1:
    raise PredictError(f"--batch_size={f.batch_size} is invalid: must be >= 1")
  if f.output_file:
    run_dir.check_output_file("output_file", f.output_file)
  if f.text_pair and len(f.text_pair) != len(f.text):
    raise PredictError(f"give one --text_pair per --text ({len(f.text)} "
                       f"--text, {len(f.text_pair)} --text_pair)")
  serve, _ = export.load_serving(f.export_dir)
  texts = list(zip(f.text, f.text_pair)) if f.text_pair else f.text
  if f.tfds_name:
    texts = read_tfds(f.tfds_name, f.split, f.text_key, f.data_dir)
  texts = texts or read_texts(f.input_file, f.text_column, f.quoting, f.header)
  write(predict(serve, texts, f.batch_size), f.output_file)


if __name__ == "__main__":
  define_flags()
  cli.run(main)
