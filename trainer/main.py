r"""Fine-tunes a TF Hub BERT encoder for text classification.

  python -m trainer.main                       # offline demo (built-in model)
  python -m trainer.main --flagfile=flags/sentiment140_expertbert_tpu.flags

Flags (one per `trainer.config.Config` field) -> Config -> `train_lib.run`;
`--helpfull` lists them. In Python: `trainer.fit(trainer.Config(...))`.
"""

from trainer import cli


def main(argv):
  del argv
  # Imported after flag parsing, so --help does not load TensorFlow.
  from trainer.loop import train_lib  # pylint: disable=g-import-not-at-top
  train_lib.run(cli.config_from_flags())


if __name__ == "__main__":
  cli.define_config_flags()
  cli.run(main)
