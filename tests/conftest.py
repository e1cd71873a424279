"""Test setup: two logical CPU devices, built before any TF op runs.

Splitting the CPU lets `MirroredStrategy` run `strategy.run` on 2 replicas,
the stand-in for a multi-core TPU. Fixtures build what tests need (the demo
encoder and preprocessor in the TF Hub format, a dropout-free encoder) under
temporary folders: nothing is downloaded.
"""

import fcntl
import json
import os
import sys

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import pytest  # noqa: E402
import tensorflow as tf  # noqa: E402

_cpu = tf.config.list_physical_devices("CPU")[0]
tf.config.set_logical_device_configuration(
    _cpu, [tf.config.LogicalDeviceConfiguration()] * 2)

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)
SHARED_CSV = os.path.join(
    os.path.dirname(ROOT), "shared", "data", "sentiment140_sample.csv")

import subprocess  # noqa: E402

from trainer.model import bert  # noqa: E402
from trainer.model import demo  # noqa: E402
from trainer.base import host  # noqa: E402


def pytest_collection_modifyitems(config, items):
  """Tests marked `xla` need XLA:CPU; they skip, naming why, without it."""
  del config
  xla = [item for item in items if "xla" in item.keywords]
  problem = host.xla_cpu_problem() if xla else None
  if problem:
    skip = pytest.mark.skip(
        reason=f"this TensorFlow build has no XLA:CPU backend ({problem}); "
        "the tensorflow-tpu build compiles XLA for the TPU only")
    for item in xla:
      item.add_marker(skip)


@pytest.fixture(scope="session")
def demo_paths(tmp_path_factory):
  """The embedded demo assets, built once per test run: pytest-xdist's
  workers share one cache in the run's base folder, the first one to take
  the lock builds it (the cache is only read after that)."""
  if "PYTEST_XDIST_WORKER" not in os.environ:
    return demo.ensure_assets(str(tmp_path_factory.mktemp("demo_cache")))
  root = tmp_path_factory.getbasetemp().parent / "demo_cache"
  root.mkdir(exist_ok=True)
  with open(root / ".lock", "w") as lock:
    fcntl.flock(lock, fcntl.LOCK_EX)
    return demo.ensure_assets(str(root))


@pytest.fixture(scope="session")
def no_dropout_encoder(tmp_path_factory, demo_paths):
  """A demo-sized encoder without dropout (replica-count comparisons)."""
  del demo_paths
  path = str(tmp_path_factory.mktemp("enc_nodrop") / "encoder")
  config = bert.BertConfig(
      vocab_size=len(demo.vocabulary()),
      **dict(demo.DEMO_BERT, dropout_rate=0.0))
  bert.save_encoder(bert.BertEncoder(config, seed=7), path)
  return path


def run_process(args, *, cwd=ROOT, env=None, timeout=300):
  """Runs the command `args` to its end, its text output captured; the exit
  status is the caller's to assert (never raised here)."""
  return subprocess.run(
      list(args),
      cwd=cwd,
      env=env,
      capture_output=True,
      text=True,
      timeout=timeout,
      check=False)


def with_project(**extra):
  """This environment with the project importable (PYTHONPATH) and `extra`."""
  return dict(os.environ, PYTHONPATH=ROOT, **extra)


def without_project():
  """This environment without PYTHONPATH: `trainer` is not importable from a
  folder other than the project root unless it is installed."""
  return {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}


def last_json(result):
  """The JSON object a process that succeeded printed on its last line."""
  assert result.returncode == 0, result.stderr[-3000:]
  return json.loads(result.stdout.strip().splitlines()[-1])


def run_outside_project(folder, source):
  """Runs the Python `source` in a fresh process that cannot import the
  project (as a server would load an export): from `folder`, without
  PYTHONPATH. Returns what its last line printed, as JSON."""
  script = os.path.join(str(folder), "outside_project.py")
  with open(script, "w") as f:
    f.write(source)
  return last_json(
      run_process([sys.executable, script],
                  cwd=str(folder),
                  env=without_project()))


def run_module(module, *args, timeout=300):
  """Runs `python -m module args` from the project root, as a user would
  (with no TF_CPP_MIN_LOG_LEVEL: the trainer sets its own)."""
  env = with_project()
  for name in ("TF_CPP_MIN_LOG_LEVEL", "BERT_TRAINER_VERBOSE"):
    env.pop(name, None)
  return run_process([sys.executable, "-m", module, *args],
                     env=env,
                     timeout=timeout)
