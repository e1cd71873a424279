r"""Evaluate an exported model (or a checkpoint) on any data the trainer reads.

    python -m trainer.evaluate --export_dir=DIR --input_file=test.csv
    python -m trainer.evaluate --export_dir=DIR --tfds_name=sentiment140 \
        --split=test
    python -m trainer.evaluate --model_dir=RUN [--checkpoint=PATH] \
        --split=validation --output_file=metrics.json --tensorboard_dir=TB
    python -m trainer.evaluate --task=tagging --export_dir=NER_EXPORT \
        --input_file=dev.txt   # CoNLL or JSON lines: entity F1, per type

`trainer.serving.evaluate.evaluate` does the work (`trainer.evaluate` in
Python); this prints the metrics as JSON. The trainer's data flags read
the data; with --model_dir the run's config.json supplies them and the
flags given here override it.
"""

import json

from trainer.commands import cli


def main(flag_values):
  # Imported here, so --help does not load TensorFlow.
  from trainer.serving import evaluate  # pylint: disable=g-import-not-at-top
  f = flag_values
  result = evaluate.evaluate(
      # Completed there: with --model_dir the run's config.json supplies
      # the flags not given, not the demo's or a task's defaults.
      cli.config_from_flags(f, complete=False),
      cli.given(f),
      export_dir=f.export_dir,
      checkpoint=f.checkpoint,
      split=f.split,
      input_file=f.input_file,
      output_file=f.output_file,
      tensorboard_dir=f.tensorboard_dir)
  print(json.dumps(result, indent=2, sort_keys=True))


COMMAND = cli.Command(
    "trainer.evaluate",
    main,
    config_flags=None,
    command_flags=("export_dir", "checkpoint", "input_file", "split",
                   "tensorboard_dir", "output_file"))
