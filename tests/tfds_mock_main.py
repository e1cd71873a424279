"""A trainer program under `tfds.testing.mock_data`:

    python tests/tfds_mock_main.py NUM_EXAMPLES [PROGRAM] --tfds_name=... ...

PROGRAM is `trainer.main` (the default), `trainer.evaluate` or
`trainer.predict`. TFDS's mock serves NUM_EXAMPLES random examples per
split, shaped by the dataset's real features (its builder, feature spec and
split names are the real ones), so a GLUE task runs end to end offline in a
real process.
"""

import importlib
import sys

import tensorflow_datasets as tfds

from trainer import cli

if __name__ == "__main__":
  num_examples = int(sys.argv.pop(1))
  name = sys.argv.pop(1) if sys.argv[1:2] and not sys.argv[1].startswith(
      "-") else "trainer.main"
  program = importlib.import_module(name)
  with tfds.testing.mock_data(num_examples=num_examples):
    if hasattr(program, "define_flags"):
      program.define_flags()
    else:
      cli.define_config_flags()
    cli.run(program.main)
