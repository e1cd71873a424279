r"""Check a configuration without training: one line per check.

    python -m trainer.doctor [the same flags as trainer.main]

Checks the TensorFlow stack, the strategy, the handles and their fit, the
data's first --doctor_rows rows, model_dir, and how training would lay its
batches out (--shared_rows) and what it would do about XLA
(`trainer.commands.doctor_checks.run_checks`). Exits 1 when a check fails.
"""

import sys

from trainer.commands import cli


def main(flag_values):
  # Imported here, so --help does not load TensorFlow.
  # pylint: disable-next=g-import-not-at-top
  from trainer.commands import doctor_checks as doctor
  checks = doctor.run_checks(
      cli.config_from_flags(flag_values), flag_values.doctor_rows)
  for check in checks:
    print(check.line())
  failed = [ch.name for ch in checks if not ch.ok]
  print(f"{len(checks) - len(failed)} passed, {len(failed)} failed" +
        (f": {', '.join(failed)}" if failed else ""))
  if failed:
    sys.exit(1)


# Its first line reports the stack: no check before it.
COMMAND = cli.Command(
    "trainer.doctor",
    main,
    config_flags=None,
    command_flags=("doctor_rows",),
    check_stack=False)
