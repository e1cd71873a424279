"""A run's handles loaded: checked against each other and the flags, the
encoder rebuilt for shared rows where they apply, and prepared for the
precision and XLA route `precision.choose` decides (`load_model`, which
`launch.setup` calls; `prepare`, which `trainer.doctor` reports)."""

from absl import logging

from trainer.encoders import handles
from trainer.model import precision as precision_lib
from trainer.runtime import distribute
from trainer.runtime import host
from trainer.training import inputs


def prepare(strategy, encoder, *, precision, jit_compile, encoder_handle):
  """(the encoder prepared for its Route, the Route) on `strategy`:
  precision and XLA as `precision.choose` decides from the flags and the
  facts (device, CPU, whether the encoder is this project's)."""
  device = distribute.device_kind(strategy)
  facts = dict(
      jit_compile=jit_compile,
      device=device,
      own_encoder=handles.is_own_encoder(encoder),
      cpu_flags=host.cpu_flags(),
      encoder_handle=encoder_handle,
      xla_cpu_problem=host.xla_cpu_problem)
  if precision == "auto":
    route = precision_lib.choose_auto(
        gpu_capability=distribute.gpu_capability() if device == "gpu" else None,
        **facts)
  else:
    route = precision_lib.choose(precision, **facts)
  return handles.prepare_encoder(encoder, route, strategy), route


def load_model(c, task, strategy, saved=None):
  """The handles, checked against each other and the flags, the encoder
  rebuilt for shared rows if they apply (`inputs.rows_encoder`; as the run
  of config.json `saved` began) and prepared for its route; returns
  (preprocessor, encoder, route, whether batches go in shared rows)."""
  preprocessor, encoder = handles.load_checked(
      c.encoder_handle,
      c.preprocessor_handle,
      strategy,
      seq_length=c.seq_length,
      pairs=task.pairs,
      io_device=distribute.io_device(strategy),
      demo_cache_dir=c.demo_cache_dir)
  encoder, rows = inputs.rows_encoder(c, encoder, strategy, saved)
  encoder, route = prepare(
      strategy,
      encoder,
      precision=c.precision,
      jit_compile=c.jit_compile,
      encoder_handle=c.encoder_handle)
  logging.info("%s", route.note)
  return preprocessor, encoder, route, rows
