"""--tpu / --strategy -> a tf.distribute strategy, with clear failures.

Also the facts other modules need about it: the device kind, this
process's role in a multi-worker job, and where a TPU does its I/O.
"""

import glob
import json
import os
import re
import socket

from absl import logging
import tensorflow as tf

from trainer import errors

StrategyError = errors.StrategyError


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


# TPU chips as a TPU VM's kernel shows them: /dev/accel* (v2-v4),
# /dev/vfio/<n> (v5e and later).
_TPU_DEVICE_GLOBS = ("/dev/accel*", "/dev/vfio/[0-9]*")


def local_tpu_devices():
  return sorted(p for pattern in _TPU_DEVICE_GLOBS for p in glob.glob(pattern))


def _no_tpu_message(tpu, e):
  if tpu == "local" and not local_tpu_devices():
    return (f"--tpu=local: this machine has no TPU (no /dev/accel* or "
            "/dev/vfio devices); --tpu=local works on a Cloud TPU VM or a "
            "Colab TPU runtime. Leave --tpu empty to train on this machine's "
            f"GPUs or CPU. ({errors.first_line(e)})")
  return (
      f"--tpu={tpu}: no usable TPU ({errors.first_line(e)}). On a Cloud TPU "
      "VM use --tpu=local with the tensorflow-tpu stack of install/tpu_vm.sh "
      "(`python -m trainer.doctor` checks it); elsewhere give the TPU "
      "name or grpc:// address, or leave --tpu empty to use GPUs/CPU.")


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
    raise StrategyError(_no_tpu_message(tpu, e)) from None
  return strategy


def tf_config_from_cluster_spec(cluster_spec):
  """Vertex AI's CLUSTER_SPEC JSON -> a TF_CONFIG dict.

  Vertex names its worker pools workerpool0 (the primary replica: our chief),
  workerpool1 (workers) and workerpool2 (parameter servers, unused here).
  """
  spec = json.loads(cluster_spec)
  names = {
      "workerpool0": "chief",
      "workerpool1": "worker",
      "workerpool2": "ps",
      "workerpool3": "evaluator"
  }
  cluster = {
      names.get(pool, pool): hosts
      for pool, hosts in spec.get("cluster", {}).items()
      if hosts
  }
  task = spec.get("task", {})
  return dict(
      cluster=cluster,
      task=dict(
          type=names.get(task.get("type"), task.get("type")),
          index=int(task.get("index", 0))))


def ensure_tf_config():
  """Sets TF_CONFIG from CLUSTER_SPEC when only the latter is given."""
  if "TF_CONFIG" not in os.environ and os.environ.get("CLUSTER_SPEC"):
    tf_config = tf_config_from_cluster_spec(os.environ["CLUSTER_SPEC"])
    os.environ["TF_CONFIG"] = json.dumps(tf_config)
    logging.info("TF_CONFIG from Vertex AI's CLUSTER_SPEC: %s", tf_config)


def device_kind(strategy):
  """"tpu", "gpu" or "cpu": what the replicas run on."""
  if is_tpu(strategy):
    return "tpu"
  return "gpu" if has_gpu() else "cpu"


def io_device(strategy):
  """Where checkpoints, handles and exports are read and written.

  A TPU's workers cannot see the host's disk (on a TPU Node they are other
  machines; on a TPU VM the host is the same job): the host does the I/O,
  "/job:localhost". Elsewhere None, the default placement.
  """
  return "/job:localhost" if is_tpu(strategy) else None


def is_remote_tpu(tpu):
  """A TPU reached over the network (TPU Node, old Colab): its workers run
  the input pipeline and the saves, and cannot see this host's disk."""
  return bool(tpu) and tpu != "local"


def check_paths_for_tpu(tpu, paths):
  """Raises StrategyError naming the first local path a remote TPU can't
  read; `paths` maps flag names to values."""
  if not is_remote_tpu(tpu):
    return
  for flag, path in paths.items():
    if path and not re.match(r"^(gs|ram)://", path) and path != "demo":
      raise StrategyError(
          f"--{flag}={path} is a local path, but --tpu={tpu} is a remote TPU "
          "whose workers cannot see this machine's disk; put it in Cloud "
          "Storage and pass a gs:// path")


def build_strategy(tpu="", strategy="auto"):
  """Returns the strategy for the flags (see trainer/main.py)."""
  if tpu:
    return tpu_strategy(tpu)
  ensure_tf_config()
  if strategy == "multi_worker_mirrored":
    # Before anything initializes the TF context: collectives are configured
    # at start-up.
    return tf.distribute.MultiWorkerMirroredStrategy()
  gpus = tf.config.list_logical_devices("GPU")
  if strategy == "mirrored" or (strategy == "auto" and len(gpus) > 1):
    devices = gpus or tf.config.list_logical_devices("CPU")
    devices = [d.name for d in devices]
    return tf.distribute.MirroredStrategy(devices)
  if strategy == "one_device" or (strategy == "auto" and gpus):
    return tf.distribute.OneDeviceStrategy(gpus[0].name if gpus else "/cpu:0")
  logging.info("No accelerator found: training with the default strategy on "
               "the CPU.")
  return tf.distribute.get_strategy()


def worker_role(strategy):
  """(is_chief, task_id) of this process; single-process runs are chief."""
  resolver = getattr(strategy, "cluster_resolver", None)
  if resolver is None or is_tpu(strategy):
    return True, 0
  cluster = resolver.cluster_spec().as_dict()
  task_type, task_id = resolver.task_type, resolver.task_id or 0
  if not cluster or task_type is None:
    return True, 0
  if "chief" in cluster:
    return task_type == "chief", task_id
  return task_type == "worker" and task_id == 0, task_id


def is_tpu(strategy):
  return isinstance(strategy, tf.distribute.TPUStrategy)


def has_gpu():
  return bool(tf.config.list_logical_devices("GPU"))
