"""Test setup: two logical CPU devices, built before any TF op runs.

Splitting the CPU lets `MirroredStrategy` run `strategy.run` on 2 replicas,
the stand-in for a multi-core TPU. Fixtures build what tests need (the demo
encoder and preprocessor in the TF Hub format, a dropout-free encoder) under
temporary folders: nothing is downloaded.
"""

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

from trainer import bert  # noqa: E402
from trainer import demo  # noqa: E402
from trainer import host  # noqa: E402


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
  """The embedded demo assets, built once per test session."""
  return demo.ensure_assets(str(tmp_path_factory.mktemp("demo_cache")))


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


def run_module(module, *args, timeout=300):
  """Runs `python -m module args` from the project root, as a user would
  (with no TF_CPP_MIN_LOG_LEVEL: the trainer sets its own)."""
  env = dict(os.environ, PYTHONPATH=ROOT)
  for name in ("TF_CPP_MIN_LOG_LEVEL", "BERT_TRAINER_VERBOSE"):
    env.pop(name, None)
  return subprocess.run([sys.executable, "-m", module, *args],
                        cwd=ROOT,
                        env=env,
                        capture_output=True,
                        text=True,
                        timeout=timeout,
                        check=False)
