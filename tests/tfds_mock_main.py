"""`python -m trainer.main` under `tfds.testing.mock_data`:

    python tests/tfds_mock_main.py NUM_EXAMPLES --tfds_name=glue/mrpc ...

TFDS's mock serves NUM_EXAMPLES random examples per split, shaped by the
dataset's real features (its builder, feature spec and split names are the
real ones), so a GLUE task runs end to end offline in a real process.
"""

import sys

import tensorflow_datasets as tfds

from trainer import cli
from trainer import main

if __name__ == "__main__":
  num_examples = int(sys.argv.pop(1))
  with tfds.testing.mock_data(num_examples=num_examples):
    cli.define_config_flags()
    cli.run(main.main)
