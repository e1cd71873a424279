"""Fine-tune TF Hub BERT encoders for text classification on TPUs, GPUs, CPUs.

The Python API, for notebooks (Colab) where absl flags are not parsed:

    from trainer import Config, fit, export, predict, evaluate
    from trainer import export_huggingface
    summary = fit(Config(model_dir="/tmp/demo"))   # the embedded demo
    export_dir = export("/tmp/demo")               # again, from the run folder
    hf_dir = export_huggingface("/tmp/demo", "/tmp/demo_hf")  # transformers
    rows = list(predict(summary["export_dir"], ["what a day"]))
    metrics = evaluate(Config(model_dir="/tmp/demo"), split="validation")

Each does what the command of the same name (`python -m trainer.main`,
`trainer.export`, `trainer.predict`, `trainer.evaluate`) does with those
values as its flags; `export_huggingface(model_dir, output_dir)` is
`trainer.export --format=huggingface --output_dir=...`.
"""

import sys

from trainer.foundation import errors
from trainer.runtime import logs as _logs

# What every command and API call raises (one line each; README "Python
# API"): `except trainer.UserError`. `errors` imports nothing.
UserError = errors.UserError
Preempted = errors.Preempted

# `python -m trainer.X`: while Python imports this package to find X, its
# argv[0] is "-m" (documented). Only then, before anything imports
# TensorFlow, are TensorFlow's native start-up lines filtered (trainer.logs);
# importing `trainer` in a notebook changes nothing of the process.
if sys.argv[:1] == ["-m"]:
  _logs.quiet_startup()


def __getattr__(name):
  # Loaded on first use, so `python -m trainer.main --help` and the
  # command-line tools do not import TensorFlow before they need it.
  if name == "Config":
    from trainer.foundation import config  # pylint: disable=g-import-not-at-top
    return config.Config
  if name == "fit":
    # pylint: disable-next=g-import-not-at-top
    from trainer.training import train_lib
    return train_lib.fit
  if name == "export":
    from trainer.serving import export  # pylint: disable=g-import-not-at-top
    return export.export_run
  if name == "export_huggingface":
    # pylint: disable-next=g-import-not-at-top
    from trainer.serving import huggingface
    return huggingface.export_run
  if name == "predict":
    from trainer.serving import predict  # pylint: disable=g-import-not-at-top
    return predict.predict
  if name == "evaluate":
    from trainer.serving import evaluate  # pylint: disable=g-import-not-at-top
    return evaluate.evaluate
  raise AttributeError(f"module 'trainer' has no attribute {name!r}")


__all__ = [
    "Config", "fit", "export", "export_huggingface", "predict", "evaluate",
    "UserError", "Preempted", "errors"
]
