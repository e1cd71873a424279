"""`python -m trainer.main`: see trainer/commands/main.py."""

from trainer.commands import cli
from trainer.commands import main

if __name__ == "__main__":
  cli.run(main.COMMAND)
