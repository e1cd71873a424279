r"""Fine-tunes a TF Hub BERT encoder for text classification.

  python -m trainer.main                       # offline demo (built-in model)
  python -m trainer.main --flagfile=flags/sentiment140_expertbert_tpu.flags

Flags (one per `trainer.foundation.config.Config` field) -> Config ->
`train_lib.run`; `--helpfull` lists them. In Python:
`trainer.fit(trainer.Config(...))`.
"""

from trainer.commands import cli


def main(flag_values):
  # Imported after flag parsing, so --help does not load TensorFlow.
  from trainer.training import train_lib  # pylint: disable=g-import-not-at-top
  train_lib.run(cli.config_from_flags(flag_values), exiting=True)


COMMAND = cli.Command("trainer.main", main, config_flags=None)
