r"""Export a training run's classifier: a SavedModel serving raw strings, or
a Hugging Face folder.

    python -m trainer.export --model_dir=RUN [--checkpoint=RUN/.../ckpt-N]
    python -m trainer.export --model_dir=RUN --format=huggingface \
        --output_dir=DIR

The first writes RUN/export/<step>/ (`--export_base_dir` elsewhere) from
the run's config.json and its best checkpoint (else the newest, or
--checkpoint), read from RUN/checkpoints (`--checkpoint_dir` elsewhere):
wherever the run folder now is. The same as `trainer.export(model_dir=...)`
in Python. `--format=huggingface` writes DIR for
`transformers.AutoModelForSequenceClassification` (a tagging run's for
`AutoModelForTokenClassification`) and `AutoTokenizer`
(`trainer.serving.huggingface`; `trainer.export_huggingface(...)`).
"""

import contextlib
import os

from trainer.commands import cli
from trainer.foundation import errors

FORMATS = ("savedmodel", "huggingface")


def main(flag_values):
  # Imported here, so --help does not load TensorFlow.
  from trainer.runtime import run_lock  # pylint: disable=g-import-not-at-top
  from trainer.serving import export  # pylint: disable=g-import-not-at-top
  from trainer.serving import run_folder  # pylint: disable=g-import-not-at-top
  from trainer.serving import huggingface  # pylint: disable=g-import-not-at-top
  f = flag_values
  if f.format not in FORMATS:
    raise errors.ConfigError(f"--format={f.format} is invalid; use one of "
                             f"{', '.join(FORMATS)}")
  if f.format == "savedmodel" and f.output_dir:
    raise errors.ConfigError("--output_dir is for --format=huggingface; a "
                             "SavedModel goes to --export_base_dir")
  # A run's folder, or a clear error before anything is written.
  run_folder.read_run_config(f.model_dir, f.checkpoint_dir)
  demo_cache_dir = f.demo_cache_dir if f["demo_cache_dir"].present else None
  target = f.output_dir if f.format == "huggingface" else (
      f.export_base_dir or os.path.join(f.model_dir, "export"))
  # A training run holds its model_dir until it has exported itself: an
  # export into the run waits its turn; one elsewhere only reads the run
  # (which may be read-only, or still training), so it takes no lock.
  lock = run_lock.Lock(f.model_dir, "trainer.export") if _inside(
      target, f.model_dir) else contextlib.nullcontext()
  with lock:
    if f.format == "huggingface":
      print(
          huggingface.export_run(
              f.model_dir,
              f.output_dir,
              checkpoint=f.checkpoint,
              checkpoint_dir=f.checkpoint_dir,
              demo_cache_dir=demo_cache_dir))
      return
    print(
        export.export_run(
            f.model_dir,
            checkpoint=f.checkpoint,
            checkpoint_dir=f.checkpoint_dir,
            export_base_dir=f.export_base_dir,
            demo_cache_dir=demo_cache_dir))


def _inside(path, folder):
  """Whether `path` is `folder` or below it (local paths made absolute)."""

  def norm(p):
    p = p.rstrip("/")
    return p if "://" in p else os.path.abspath(p)

  path, folder = norm(path), norm(folder)
  return path == folder or path.startswith(folder + "/")


COMMAND = cli.Command(
    "trainer.export",
    main,
    config_flags=("model_dir", "checkpoint_dir", "export_base_dir",
                  "demo_cache_dir"),
    command_flags=("checkpoint", "format", "output_dir"),
    required=("model_dir",))
