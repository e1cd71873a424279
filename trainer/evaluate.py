"""`python -m trainer.evaluate`: see trainer/commands/evaluate.py."""

from trainer.commands import cli
from trainer.commands import evaluate

if __name__ == "__main__":
  cli.run(evaluate.COMMAND)
