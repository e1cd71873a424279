"""The strategy and the facts about it: TPU addresses, TF_CONFIG, remote
TPU paths, two worker processes."""

import json
import os
import subprocess
import sys

import numpy as np
import pytest
import tensorflow as tf

from conftest import ROOT
from conftest import with_project
from trainer.foundation import errors
from trainer.runtime import distribute

sys.path.insert(0, os.path.join(ROOT, "benchmarks"))
import failure_drills  # noqa: E402  pylint: disable=g-import-not-at-top


def test_unreachable_tpu_is_a_clear_error():
  with pytest.raises(distribute.StrategyError, match="cannot reach"):
    distribute.build_strategy(tpu="grpc://127.0.0.1:1")


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


def test_cluster_spec_becomes_tf_config(monkeypatch):
  spec = dict(
      cluster=dict(
          workerpool0=["host0:2222"], workerpool1=["host1:2222", "host2:2222"]),
      task=dict(type="workerpool1", index=1))
  monkeypatch.delenv("TF_CONFIG", raising=False)
  monkeypatch.setenv("CLUSTER_SPEC", json.dumps(spec))
  distribute.ensure_tf_config()
  assert json.loads(os.environ["TF_CONFIG"]) == dict(
      cluster=dict(chief=["host0:2222"], worker=["host1:2222", "host2:2222"]),
      task=dict(type="worker", index=1))


def test_remote_tpu_rejects_local_data_paths():
  with pytest.raises(
      distribute.StrategyError,
      match=r"--train_file=/data/t.csv is a local path.*gs://"):
    distribute.check_paths_for_tpu("grpc://10.0.0.2:8470",
                                   dict(train_file="/data/t.csv"))
  distribute.check_paths_for_tpu("grpc://10.0.0.2:8470",
                                 dict(train_file="gs://b/t.csv", data_dir=""))
  distribute.check_paths_for_tpu("local", dict(train_file="/data/t.csv"))


def _args(demo_paths, encoder, model_dir, strategy):
  return [
      f"--model_dir={model_dir}",
      f"--strategy={strategy}",
      f"--encoder_handle={encoder}",
      f"--preprocessor_handle={demo_paths['preprocessor']}",
      f"--train_file={demo_paths['train']}",
      f"--eval_file={demo_paths['validation']}",
      "--dropout_rate=0",
      "--train_steps=6",
      "--batch_size=16",
      "--seq_length=32",
      "--seq_buckets=auto",  # the bucketed path, as set up on every worker
      "--steps_per_loop=3",
      "--checkpoint_every=3",
      "--learning_rate=1e-3",
      "--export=false",
      "--jit_compile=false"
  ]


def _weights(model_dir):
  reader = tf.train.load_checkpoint(os.path.join(model_dir, "checkpoints"))
  return {
      name: reader.get_tensor(name)
      for name in reader.get_variable_to_shape_map()
      if name.startswith(("model/", "encoder_variables/"))
  }


@pytest.mark.slow
def test_two_worker_processes_equal_one_process(tmp_path, demo_paths,
                                                no_dropout_encoder, command):
  env = with_project(TF_CPP_MIN_LOG_LEVEL="2")
  env.pop("TF_CONFIG", None)
  reference = str(tmp_path / "single")
  # The one process is this one (one replica, the same global batch).
  single = command("main",
                   *_args(demo_paths, no_dropout_encoder, reference, "auto"))
  assert single.returncode == 0, single.stderr[-3000:]

  shared = str(tmp_path / "multi")
  ports = failure_drills.free_ports(2)
  cluster = {"worker": [f"127.0.0.1:{p}" for p in ports]}
  procs = []
  for index in range(2):
    worker_env = dict(
        env,
        TF_CONFIG=json.dumps({
            "cluster": cluster,
            "task": {
                "type": "worker",
                "index": index
            }
        }))
    procs.append(
        subprocess.Popen(
            [sys.executable, "-m", "trainer.main"] +
            _args(demo_paths, no_dropout_encoder, shared,
                  "multi_worker_mirrored"),
            env=worker_env,
            cwd=ROOT,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True))
  outputs = [p.communicate(timeout=600) for p in procs]
  for p, (_, err) in zip(procs, outputs):
    assert p.returncode == 0, err[-3000:]
  assert "Replicas: 2" in outputs[0][1]

  # Only the chief wrote into model_dir; the other worker's folder is gone.
  assert sorted(os.listdir(shared)) == [
      "checkpoints", "config.json", "data_stats.json", "length_stats.json",
      "summaries", "summary.json", "train.log"
  ]
  summary = json.load(open(os.path.join(shared, "summary.json")))
  assert summary["replicas"] == 2 and summary["final_step"] == 6
  multi, one = _weights(shared), _weights(reference)
  assert sorted(multi) == sorted(one)
  # Every encoder variable and the head are in the checkpoint.
  encoder = tf.saved_model.load(no_dropout_encoder)
  assert sum(k.startswith("encoder_variables/") for k in one) == len(
      encoder.variables)
  assert "model/kernel/.ATTRIBUTES/VARIABLE_VALUE" in one
  for name in one:
    np.testing.assert_allclose(multi[name], one[name], atol=1e-5, err_msg=name)
