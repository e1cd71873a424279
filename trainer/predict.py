"""`python -m trainer.predict`: see trainer/commands/predict.py."""

from trainer.commands import cli
from trainer.commands import predict

if __name__ == "__main__":
  cli.run(predict.COMMAND)
