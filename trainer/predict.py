r"""Predict with an exported model: raw text in, classes and probabilities out.

    python -m trainer.predict --export_dir=DIR --text="what a day" --text=...
    python -m trainer.predict --export_dir=DIR --input_file=tweets.txt \
        --output_file=predictions.jsonl

`--input_file` holds one text per line, or is a CSV/TSV whose `--text_column`
(name or 0-based index) is read. Output is JSON lines (stdout by default) or
CSV when `--output_file` ends in .csv. Input is streamed in batches of
`--batch_size`; nothing is held in memory beyond one batch.
"""

import csv
import itertools
import json
import sys

from absl import flags
import tensorflow as tf
import tensorflow_text  # noqa: F401  (registers the preprocessor's ops)

from trainer import cli
from trainer import errors
from trainer import export
from trainer import files
from trainer import run_dir

# Bad input flags or files: one line, exit code 2 (trainer.cli).
PredictError = errors.ConfigError


def read_texts(input_file, text_column="text"):
  """Yields the texts of `input_file` one by one (streamed)."""
  if not tf.io.gfile.exists(input_file):
    raise PredictError(f"--input_file={input_file} does not exist")
  lower = input_file.lower().removesuffix(".gz")
  with files.open_binary(input_file) as f:
    lines = (line.decode("utf-8", errors="replace") for line in f)
    if not lower.endswith((".csv", ".tsv")):
      for line in lines:
        yield line.rstrip("\r\n")
      return
    reader = csv.reader(
        lines, delimiter="\t" if lower.endswith(".tsv") else ",")
    header = next(reader, [])
    if text_column in header:
      column = header.index(text_column)
    elif text_column.isdigit():
      column = int(text_column)
    else:
      raise PredictError(f"{input_file}: no column {text_column!r} "
                         f"(--text_column); the header has {header[:8]}")
    for row in reader:
      yield row[column] if column < len(row) else ""


def predict(serve, texts, batch_size=256):
  """Yields one dict per text: text, class_id, class_name, probabilities."""
  texts = iter(texts)
  while True:
    batch = list(itertools.islice(texts, batch_size))
    if not batch:
      return
    out = serve(text=tf.constant(batch))
    probs = out["probabilities"].numpy()
    ids = out["class_ids"].numpy()
    names = out["class_names"].numpy()
    for text, p, i, n in zip(batch, probs, ids, names):
      yield dict(
          text=text,
          class_id=int(i),
          class_name=n.decode(),
          probabilities=[round(float(x), 6) for x in p])


def write(predictions, output_file):
  out = tf.io.gfile.GFile(output_file, "w") if output_file else sys.stdout
  try:
    if output_file.lower().endswith(".csv"):
      writer = csv.writer(out, lineterminator="\n")
      writer.writerow(["text", "class_id", "class_name", "probabilities"])
      for p in predictions:
        writer.writerow([
            p["text"], p["class_id"], p["class_name"],
            " ".join(map(str, p["probabilities"]))
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
  flags.DEFINE_string("input_file", "", "One text per line, or a CSV/TSV.")
  flags.DEFINE_string("text_column", "text", "CSV/TSV text column.")
  flags.DEFINE_string("output_file", "", "'' = stdout (JSON lines); .csv "
                      "writes CSV.")
  flags.DEFINE_integer("batch_size", 256, "Texts per call.")
  flags.mark_flag_as_required("export_dir")


def main(argv):
  del argv
  f = flags.FLAGS
  if bool(f.text) == bool(f.input_file):
    raise PredictError("give --text (one or more) or --input_file")
  if f.batch_size < 1:
    raise PredictError(f"--batch_size={f.batch_size} is invalid: must be >= 1")
  if f.output_file:
    run_dir.check_output_file("output_file", f.output_file)
  serve, _ = export.load_serving(f.export_dir)
  texts = f.text or read_texts(f.input_file, f.text_column)
  write(predict(serve, texts, f.batch_size), f.output_file)


if __name__ == "__main__":
  define_flags()
  cli.run(main)
