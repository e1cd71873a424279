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
    python -m trainer.predict --export_dir=NER_EXPORT \
        --text="EU rejects German call."   # words, tags and entities

`trainer.serving.predict.predict` does the work (`trainer.predict` in
Python); this writes its rows as JSON lines (stdout by default) or CSV.
"""

from trainer.commands import cli


def main(flag_values):
  # Imported here, so --help does not load TensorFlow.
  from trainer.runtime import run_dir  # pylint: disable=g-import-not-at-top
  from trainer.serving import predict  # pylint: disable=g-import-not-at-top
  f = flag_values
  if f.output_file:
    run_dir.check_output_file("output_file", f.output_file)
  rows = predict.predict(
      f.export_dir,
      f.text or None,
      f.text_pair or (),
      input_file=f.input_file,
      text_column=f.text_column,
      quoting=f.quoting,
      header=f.header,
      encoding=f.encoding,
      file_format=f.file_format,
      tfds_name=f.tfds_name,
      split=f.split,
      text_key=f.text_key,
      data_dir=f.data_dir,
      batch_size=f.batch_size)
  predict.write(rows, f.output_file)


COMMAND = cli.Command(
    "trainer.predict",
    main,
    config_flags=("text_column", "quoting", "header", "encoding", "file_format",
                  "tfds_name", "text_key", "data_dir", "batch_size"),
    command_flags=("export_dir", "text", "text_pair", "input_file", "split",
                   "output_file"),
    required=("export_dir",),
    defaults=dict(batch_size=256))
