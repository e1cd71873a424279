"""--tpu / --strategy -> a tf.distribute strategy, with clear failures.

Also the facts other modules need about it: the device kind, this
process's role in a multi-worker job, and where a TPU does its I/O.
"""

import glob
import json
import os
import re
import signal
import socket
import threading
import time

from absl import logging
import tensorflow as tf

from trainer.foundation import config
from trainer.foundation import errors

StrategyError = errors.StrategyError

# The port of a TPU Node's gRPC server (what `gcloud` lists as the TPU's
# endpoint).
TPU_GRPC_PORT = 8470


def tpu_address(tpu):
  """--tpu with the default port added to a grpc:// address without one."""
  match = re.match(r"^grpc://([^:/]+)(?::(\d*))?/?$", tpu)
  if not match:
    if tpu.startswith("grpc://"):
      raise StrategyError(
          f"--tpu={tpu} is not a TPU address; give grpc://HOST:PORT (the "
          f"TPU Node's port is {TPU_GRPC_PORT})")
    return tpu
  if not match.group(2):
    return f"grpc://{match.group(1)}:{TPU_GRPC_PORT}"
  return tpu


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
  tpu = tpu_address(tpu)
  _check_grpc_reachable(tpu)
  try:
    resolver = tf.distribute.cluster_resolver.TPUClusterResolver(tpu=tpu)
  except OSError as e:  # urllib's URLError: the metadata lookup of a name
    raise StrategyError(
        f"--tpu={tpu}: cannot look up this TPU name ({errors.first_line(e)})"
        ": names resolve through the GCE metadata server, on Google Cloud "
        f"only. Give grpc://IP:{TPU_GRPC_PORT}, or use --tpu=local on the "
        "TPU VM itself") from None
  except ValueError as e:
    raise StrategyError(_no_tpu_message(tpu, e)) from None
  try:
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
    if path and not re.match(r"^(gs|ram)://", path) and path != config.DEMO:
      raise StrategyError(
          f"--{flag}={path} is a local path, but --tpu={tpu} is a remote TPU "
          "whose workers cannot see this machine's disk; put it in Cloud "
          "Storage and pass a gs:// path")


def _coordinated_tasks():
  """(the chief and worker tasks of TF_CONFIG as (job, index, address), this
  task's (job, index))."""
  spec = json.loads(os.environ.get("TF_CONFIG", "{}"))
  cluster, task = spec.get("cluster", {}), spec.get("task", {})
  tasks = [(job, i, address)
           for job in ("chief", "worker")
           for i, address in enumerate(cluster.get(job, []))]
  return tasks, (task.get("type"), int(task.get("index", 0)))


def _listening(address, timeout=0.5):
  host, _, port = address.rpartition(":")
  try:
    with socket.create_connection((host, int(port)), timeout=timeout):
      return True
  except (OSError, ValueError):
    return False


def _listen(address):
  """A plain TCP socket on this task's port, so that peers see it started."""
  port = int(address.rpartition(":")[2])
  listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
  listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
  try:
    listener.bind(("", port))
  except OSError as e:
    listener.close()
    raise StrategyError(
        f"--strategy=multi_worker_mirrored: cannot listen on this task's port "
        f"{port} of TF_CONFIG ({e.strerror or e}); is another process using "
        "it?") from None
  listener.listen(64)
  listener.setblocking(False)
  return listener


def wait_for_cluster(timeout, poll=0.25):
  """Waits, at most `timeout` seconds, until every chief and worker task of
  TF_CONFIG listens on its port; honours SIGTERM/SIGINT meanwhile.

  MultiWorkerMirroredStrategy's constructor blocks inside TensorFlow, with
  the GIL held, until every task has registered: a missing task would hang
  the process for good, deaf to signals. So the tasks meet first in Python:
  each listens on its own port with a plain socket and polls the others'
  (a task already past this point listens with TensorFlow's server).
  """
  tasks, me = _coordinated_tasks()
  mine = [a for job, i, a in tasks if (job, i) == me]
  waiting = {(job, i, a) for job, i, a in tasks if (job, i) != me}
  if not mine or not waiting:
    return
  listener = _listen(mine[0])
  received, previous = [], {}
  if threading.current_thread() is threading.main_thread():
    for sig in (signal.SIGTERM, signal.SIGINT):
      previous[sig] = signal.signal(
          sig, lambda signum, _: received.append(signal.Signals(signum).name))
  deadline = time.monotonic() + timeout
  try:
    while waiting and not received and time.monotonic() < deadline:
      try:
        while True:
          listener.accept()[0].close()  # a peer's probe
      except BlockingIOError:
        pass
      waiting = {t for t in waiting if not _listening(t[2])}
      time.sleep(poll)
  finally:
    listener.close()
    for sig, handler in previous.items():
      signal.signal(sig, handler)
  if received:
    raise errors.Preempted(
        f"{received[0]} received while waiting for the tasks of TF_CONFIG; "
        "nothing was trained: run the same command again")
  if waiting:
    missing = ", ".join(f"{job} {i} ({a})" for job, i, a in sorted(waiting))
    raise StrategyError(
        f"--strategy=multi_worker_mirrored: {missing} did not start within "
        f"--cluster_timeout={timeout}s (nothing listens on its port); start "
        "every task with the same TF_CONFIG, or raise --cluster_timeout")


def build_strategy(tpu="", strategy="auto", cluster_timeout=600):
  """The strategy for --tpu, --strategy and --cluster_timeout."""
  if tpu:
    return tpu_strategy(tpu)
  ensure_tf_config()
  if strategy == "multi_worker_mirrored":
    wait_for_cluster(cluster_timeout)
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
  if os.path.exists("/dev/nvidia0"):
    logging.warning(
        "This machine has an NVIDIA device that TensorFlow cannot use (no "
        "GPU build of TensorFlow, or its CUDA libraries do not load); "
        "BERT_TRAINER_VERBOSE=1 shows TensorFlow's own lines on why")
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


def gpu_capability():
  """(major, minor) compute capability of the first GPU, or None."""
  gpus = tf.config.list_physical_devices("GPU")
  if not gpus:
    return None
  return tf.config.experimental.get_device_details(
      gpus[0]).get("compute_capability")
