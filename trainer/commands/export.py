r"""Export a training run's classifier as a SavedModel serving raw strings.

    python -m trainer.export --model_dir=RUN [--checkpoint=RUN/.../ckpt-N]

writes RUN/export/<step>/ (`--export_base_dir` elsewhere) from the run's
config.json and its best checkpoint (else the newest, or --checkpoint),
read from RUN/checkpoints (`--checkpoint_dir` elsewhere): wherever the run
folder now is. The same as `trainer.export(model_dir=...)` in Python.
"""

from trainer.commands import cli


def main(flag_values):
  # Imported here, so --help does not load TensorFlow.
  from trainer.base import run_dir  # pylint: disable=g-import-not-at-top
  from trainer.serving import export  # pylint: disable=g-import-not-at-top
  f = flag_values
  export.read_run_config(f.model_dir)  # a run's folder, or a clear error
  # A training run holds its model_dir until it has exported itself.
  with run_dir.Lock(f.model_dir, "trainer.export"):
    print(
        export.export_run(
            f.model_dir,
            checkpoint=f.checkpoint,
            checkpoint_dir=f.checkpoint_dir,
            export_base_dir=f.export_base_dir,
            demo_cache_dir=f.demo_cache_dir
            if f["demo_cache_dir"].present else None))


COMMAND = cli.Command(
    "trainer.export",
    main,
    config_flags=("model_dir", "checkpoint_dir", "export_base_dir",
                  "demo_cache_dir"),
    command_flags=("checkpoint",),
    required=("model_dir",))
