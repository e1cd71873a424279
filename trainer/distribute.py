"""--tpu / --strategy -> a tf.distribute strategy, with clear failures."""

import re
import socket

from absl import logging
import tensorflow as tf


class StrategyError(RuntimeError):
  """The requested devices cannot be reached or do not exist."""


def _check_grpc_reachable(tpu, timeout=10.0):
  """Fails fast on a dead grpc:// address instead of letting TF hang on it."""
  match = re.match(r"^grpc://([^:/]+):(\d+)", tpu)
  if not match:
    return
  host, port = match.group(1), int(match.group(2))
  try:
    with socket.create_connection((host, port), timeout=timeout):
      pass
  except OSError as e:
    raise StrategyError(
        f"--tpu={tpu}: cannot reach {host}:{port} ({e.strerror or e}). Check "
        "the TPU address, that the TPU is READY and that this machine is on "
        "its network; on a TPU VM use --tpu=local.") from None


def tpu_strategy(tpu):
  """Connects to `tpu` ('local', a TPU name or grpc:// address)."""
  _check_grpc_reachable(tpu)
  try:
    resolver = tf.distribute.cluster_resolver.TPUClusterResolver(tpu=tpu)
    if tpu != "local":
      tf.config.experimental_connect_to_cluster(resolver)
    tf.tpu.experimental.initialize_tpu_system(resolver)
    strategy = tf.distribute.TPUStrategy(resolver)
  except (ValueError, RuntimeError, tf.errors.OpError) as e:
    lines = str(e).strip().splitlines()
    raise StrategyError(
        f"--tpu={tpu}: no usable TPU ({lines[0] if lines else type(e).__name__}"
        "). On a Cloud TPU VM use --tpu=local and install the tensorflow-tpu "
        "build matching this TensorFlow; elsewhere give the TPU name or "
        "grpc:// address, or leave --tpu empty to use GPUs/CPU.") from None
  return strategy


def build_strategy(tpu="", strategy="auto"):
  """Returns the strategy for the flags (see trainer/main.py)."""
  if tpu:
    return tpu_strategy(tpu)
  gpus = tf.config.list_logical_devices("GPU")
  if strategy == "multi_worker_mirrored":
    return tf.distribute.MultiWorkerMirroredStrategy()
  if strategy == "mirrored" or (strategy == "auto" and len(gpus) > 1):
    devices = gpus or tf.config.list_logical_devices("CPU")
    devices = [d.name for d in devices]
    return tf.distribute.MirroredStrategy(devices)
  if strategy == "one_device" or (strategy == "auto" and gpus):
    return tf.distribute.OneDeviceStrategy(gpus[0].name if gpus else "/cpu:0")
  logging.info("No accelerator found: training with the default strategy on "
               "the CPU.")
  return tf.distribute.get_strategy()


def is_tpu(strategy):
  return isinstance(strategy, tf.distribute.TPUStrategy)


def has_gpu():
  return bool(tf.config.list_logical_devices("GPU"))
