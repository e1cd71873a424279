"""Failures a user can cause: one line, the right exit code, nothing lost.

A few drills of benchmarks/failure_drills.py run here as real processes;
the program runs them all (BUILD_NOTES.md has the table). Below them, the
pieces alone: the error translation, the model_dir lock, the resume rule,
TPU addresses.
"""

import errno
import json
import os
import socket
import sys
import time

import pytest
import tensorflow as tf

from conftest import ROOT
from trainer.base import config as config_lib
from trainer.base import distribute
from trainer.base import errors
from trainer.base import run_dir

sys.path.insert(0, os.path.join(ROOT, "benchmarks"))
import failure_drills  # noqa: E402  pylint: disable=g-import-not-at-top

# The drills whose failure only a real process shows (an exit code, a lock
# between processes, a hang, a changed folder); the binary file and an
# allowed resume are covered in-process (data_formats_test, main_test).
QUICK = ("unknown flag", "resume with other num_classes",
         "second trainer on one model_dir", "multi-worker peer never starts",
         "TPU address without port", "evaluate with other num_classes")


@pytest.fixture(scope="module")
def drills(tmp_path_factory, demo_paths):
  return {
      r.name: r for r in failure_drills.run_drills(
          QUICK, str(tmp_path_factory.mktemp("drills")), demo_paths["root"])
  }


@pytest.mark.slow
@pytest.mark.parametrize("name", QUICK)
def test_drill(drills, name):
  result = drills[name]
  assert result.ok, result


def test_errors_of_the_environment_become_one_line():
  missing = errors.translate(
      tf.errors.NotFoundError(None, None, "/data/x.csv; No such file"))
  assert str(missing) == ("not found: /data/x.csv; No such file; check the "
                          "path")
  full = errors.translate(OSError(errno.ENOSPC, "No space left on device"))
  assert str(full).startswith("no room to write: ")
  assert errors.translate(KeyError("a bug of ours")) is None
  framed = tf.errors.UnavailableError(
      None, None, "Graph execution error:\n\nDetected at node x\nreal cause")
  assert "unavailable: real cause;" in str(errors.translate(framed))


def test_the_lock_names_its_holder_and_is_released(tmp_path):
  first = run_dir.Lock(str(tmp_path), "trainer.main").__enter__()
  with pytest.raises(errors.ConfigError) as info:
    run_dir.Lock(str(tmp_path), "trainer.export").__enter__()
  message = str(info.value)
  assert f"--model_dir={tmp_path} is in use by trainer.main (pid " in message
  assert f"{os.getpid()} on {socket.gethostname()}" in message
  first.__exit__(None, None, None)
  assert not os.path.exists(tmp_path / ".lock")
  with run_dir.Lock(str(tmp_path), "trainer.export"):
    assert json.load(open(tmp_path / ".lock"))["command"] == "trainer.export"


def test_a_lease_on_an_object_store_is_taken_over_when_stale(monkeypatch):
  folder = "ram://lease_test/run"
  tf.io.gfile.makedirs(folder)
  monkeypatch.setattr(run_dir.time, "sleep", lambda s: None)
  with run_dir.Lock(folder, "trainer.main"):
    with pytest.raises(errors.ConfigError, match="is in use by trainer.main"):
      run_dir.Lock(folder, "trainer.main").__enter__()
  # A holder on another host that stopped beating 3 minutes ago is gone.
  stale = dict(
      id="x",
      command="trainer.main",
      host="elsewhere",
      pid=1,
      started=0,
      heartbeat=time.time() - 180)
  run_dir.write_json(f"{folder}/.lock", stale)
  with run_dir.Lock(folder, "trainer.main") as lock:
    assert run_dir.read_json(f"{folder}/.lock")["id"] == lock.holder["id"]
  stale["heartbeat"] = time.time()  # a live one elsewhere is respected
  run_dir.write_json(f"{folder}/.lock", stale)
  with pytest.raises(errors.ConfigError, match="on elsewhere"):
    run_dir.Lock(folder, "trainer.main").__enter__()


def test_what_a_resume_may_change():
  saved = dict(
      config_lib.Config(train_steps=20, model_dir="/r").__dict__,
      jit_compile=None)
  allowed = run_dir.check_resume(
      saved,
      config_lib.Config(train_steps=30, learning_rate=1e-4, model_dir="/r"))
  assert allowed == [
      "--train_steps: 20 -> 30", "--learning_rate: 5e-05 -> 0.0001"
  ]
  with pytest.raises(errors.ConfigError) as info:
    run_dir.check_resume(
        saved,
        config_lib.Config(
            train_steps=30, num_classes=3, seed=1, model_dir="/r"))
  assert str(info.value).startswith(
      "--model_dir=/r holds the checkpoints of a run with other flags "
      "(--num_classes: 2 -> 3; --seed: 42 -> 1): resuming would not "
      "continue that run.")
  # A config.json of an older version lacks new fields: their defaults.
  del saved["cluster_timeout"]
  assert run_dir.check_resume(saved,
                              config_lib.Config(train_steps=20,
                                                model_dir="/r")) == []


@pytest.mark.parametrize("tpu,want", [
    ("grpc://10.0.0.2", "grpc://10.0.0.2:8470"),
    ("grpc://10.0.0.2:8470", "grpc://10.0.0.2:8470"),
    ("grpc://10.0.0.2:", "grpc://10.0.0.2:8470"),
    ("local", "local"),
    ("my-tpu", "my-tpu"),
])
def test_tpu_addresses_get_the_default_port(tpu, want):
  assert distribute.tpu_address(tpu) == want


def test_a_malformed_tpu_address_is_named():
  with pytest.raises(errors.StrategyError, match="is not a TPU address"):
    distribute.tpu_address("grpc://10.0.0.2:84/70")
