"""`python -m trainer.convert_hf`: see trainer/commands/convert_hf.py."""

from trainer.commands import cli
from trainer.commands import convert_hf

if __name__ == "__main__":
  cli.run(convert_hf.COMMAND)
