"""`python -m trainer.export`: see trainer/commands/export.py."""

from trainer.commands import cli
from trainer.commands import export

if __name__ == "__main__":
  cli.run(export.COMMAND)
