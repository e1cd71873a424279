"""`python -m trainer.doctor`: see trainer/commands/doctor.py."""

from trainer.commands import cli
from trainer.commands import doctor

if __name__ == "__main__":
  cli.run(doctor.COMMAND)
