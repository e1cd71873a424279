"""A run's folder: its locations, atomic JSON, the lock, what a resume may
change."""

import json
import os
import socket
import subprocess
import sys
import time

import pytest
import tensorflow as tf

from trainer.foundation import config as config_lib
from trainer.foundation import errors
from trainer.runtime import run_dir
from trainer.runtime import run_lock


def test_json_state_is_replaced_whole(tmp_path):
  path = str(tmp_path / "state.json")
  run_dir.write_json(path, dict(a=1))
  run_dir.write_json(path, dict(b=[1, 2]))
  assert os.listdir(tmp_path) == ["state.json"]  # no temporary left
  assert run_dir.read_json(path) == dict(b=[1, 2])
  (tmp_path / "broken.json").write_text('{"a": ')
  assert run_dir.read_json(str(tmp_path / "broken.json")) is None
  assert run_dir.read_json(str(tmp_path / "missing.json")) is None


def test_a_record_is_required_only_beside_checkpoints(tmp_path):
  """`read_record`: what is wrong with config.json, as a reason where the
  folder holds no checkpoint (a new run starts), as a ConfigError where it
  does; JSON that is not a run's record (no "config" object) is
  unreadable too. The copy beside the checkpoints is what it points to."""
  where = run_dir.locations(str(tmp_path))
  cases = [(None, run_dir.MISSING),
           ("[]", "is unreadable (not a training "
            "run's record: no \"config\" object)"),
           ('{"config": ', "is unreadable (not valid JSON)")]
  for text, why in cases:
    if text is not None:
      (tmp_path / "config.json").write_text(text)
    assert run_dir.read_record(where, False) == (None, why)
    with pytest.raises(errors.ConfigError) as e:
      run_dir.read_record(where, True)
    assert f"but its config.json {why}, so this run's flags" in str(e.value)
    assert "restore it from a backup" in str(e.value)
  run_dir.write_json(where.config_json, dict(config=dict(seed=7)))
  run_dir.copy_record(where)
  assert run_dir.read_record(where, True) == (dict(config=dict(seed=7)), "")
  os.remove(where.config_json)
  with pytest.raises(
      errors.ConfigError,
      match=r"restore it \(the run keeps a "
      r"copy: cp \S+/checkpoints/run_config.json \S+/config"):
    run_dir.read_record(where, True)


def _writer(files):

  def write(tmp):
    tf.io.gfile.makedirs(os.path.join(tmp, "sub"))
    for name, data in files.items():
      with tf.io.gfile.GFile(os.path.join(tmp, name), "w") as f:
        f.write(data)

  return write


@pytest.mark.parametrize("base", ["local", "ram://publish"])
def test_publish_folder_moves_a_whole_folder_and_leaves_no_temporary(
    base, tmp_path):
  """A local folder is renamed; on ram:// (an object store's semantics)
  the files are copied. Either way the remains of an interrupted copy (no
  marker file) are replaced, and a complete folder is never overwritten."""
  parent = str(tmp_path) if base == "local" else f"{base}-{time.time_ns()}"
  final = f"{parent}/out"
  tf.io.gfile.makedirs(final)
  with tf.io.gfile.GFile(f"{final}/stale.txt", "w") as f:
    f.write("half")
  files = {"a.txt": "a", "sub/b.txt": "b", "DONE": "ok"}
  assert run_dir.publish_folder(_writer(files), final + "/", "DONE") == final
  got = {
      os.path.relpath(os.path.join(d, n), final)
      for d, _, names in tf.io.gfile.walk(final)
      for n in names
  }
  assert got == set(files)
  assert tf.io.gfile.listdir(parent) in (["out"], ["out/"])
  with pytest.raises(errors.ExportError) as e:
    run_dir.publish_folder(_writer({"DONE": "other"}), final, "DONE")
  assert str(e.value) == (f"{final} was written by another process "
                          "meanwhile; remove it to write it again")
  with tf.io.gfile.GFile(f"{final}/DONE") as f:
    assert f.read() == "ok"
  assert tf.io.gfile.listdir(parent) in (["out"], ["out/"])


def test_locations():
  where = run_dir.locations("gs://b/r", summary_dir="gs://b/tb")
  assert (where.checkpoints, where.best, where.summaries,
          where.export_dir(7)) == ("gs://b/r/checkpoints",
                                   "gs://b/r/checkpoints/best", "gs://b/tb",
                                   "gs://b/r/export/7")
  worker = run_dir.for_worker("gs://b/r", 2)
  assert worker.model_dir == "gs://b/r/.worker-2-tmp"
  assert worker.checkpoints == "gs://b/r/.worker-2-tmp/checkpoints"


def test_the_lock_names_its_holder_and_is_released(tmp_path):
  first = run_lock.Lock(str(tmp_path), "trainer.main").__enter__()
  with pytest.raises(errors.ConfigError) as info:
    run_lock.Lock(str(tmp_path), "trainer.export").__enter__()
  message = str(info.value)
  assert f"--model_dir={tmp_path} is in use by trainer.main (pid " in message
  assert f"{os.getpid()} on {socket.gethostname()}" in message
  first.__exit__(None, None, None)
  assert not os.path.exists(tmp_path / ".lock")
  with run_lock.Lock(str(tmp_path), "trainer.export"):
    assert json.load(open(tmp_path / ".lock"))["command"] == "trainer.export"


def test_a_lease_on_an_object_store_is_taken_over_when_stale(monkeypatch):
  folder = "ram://lease_test/run"
  tf.io.gfile.makedirs(folder)
  monkeypatch.setattr(run_lock.time, "sleep", lambda s: None)
  with run_lock.Lock(folder, "trainer.main"):
    with pytest.raises(errors.ConfigError, match="is in use by trainer.main"):
      run_lock.Lock(folder, "trainer.main").__enter__()
  # A holder on another host that stopped beating 3 minutes ago is gone.
  stale = dict(
      id="x",
      command="trainer.main",
      host="elsewhere",
      pid=1,
      started=0,
      heartbeat=time.time() - 180)
  run_dir.write_json(f"{folder}/.lock", stale)
  with run_lock.Lock(folder, "trainer.main") as lock:
    assert run_dir.read_json(f"{folder}/.lock")["id"] == lock.holder["id"]
  stale["heartbeat"] = time.time()  # a live one elsewhere is respected
  run_dir.write_json(f"{folder}/.lock", stale)
  with pytest.raises(errors.ConfigError, match="on elsewhere"):
    run_lock.Lock(folder, "trainer.main").__enter__()


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


def test_the_bucket_group_is_kept_only_where_it_orders_the_epoch():
  """--bucket_group_batches fixes a bucketed epoch's batches: a resume may
  not change it; at fixed shapes (one bucket) it orders nothing and may.
  A config.json from before the flag ran with groups of 5."""
  bucketed = config_lib.Config(seq_buckets="auto", model_dir="/r")
  saved = dict(bucketed.__dict__)
  again = config_lib.Config(
      seq_buckets="auto", bucket_group_batches=1, model_dir="/r")
  with pytest.raises(
      errors.ConfigError, match="--bucket_group_batches: 5 -> 1"):
    run_dir.check_resume(saved, again)
  fixed = config_lib.Config(model_dir="/r")
  assert run_dir.check_resume(
      dict(fixed.__dict__),
      config_lib.Config(bucket_group_batches=1, model_dir="/r")) == []
  del saved["bucket_group_batches"]
  assert run_dir.check_resume(saved, bucketed) == []
  with pytest.raises(errors.ConfigError, match="--bucket_group_batches"):
    run_dir.check_resume(saved, again)


def test_publish_removes_what_a_killed_writer_left(tmp_path):
  """A local temporary folder whose writer's lock is free goes at the next
  publish of the same folder, whatever host name it carries (containers
  share one); one whose writer holds its lock (a live process, here a
  child) stays. Without a lock file (an object store's), this host's
  process that is gone (killed here, SIGKILL) tells; another host's stays."""
  child = subprocess.Popen(["sleep", "60"])
  child.kill()
  child.wait()
  host = socket.gethostname()
  left = {
      "dead": f".tmp-out-{host}-{child.pid}-0000aaaa",
      "alive": f".tmp-out-{host}-{os.getpid()}-0000bbbb",
      "elsewhere": ".tmp-out-other-host-1-0000cccc",
      "another folder": f".tmp-other-{host}-{child.pid}-0000dddd",
      "lock free": ".tmp-out-other-host-2-0000eeee",
      "lock held": ".tmp-out-other-host-3-0000ffff",
  }
  for name in left.values():
    os.makedirs(tmp_path / name)
    (tmp_path / name / "variables.data").write_text("x" * 1000)
  for key in ("lock free", "lock held"):
    (tmp_path / left[key] / ".writer.lock").write_text("")
  holder = subprocess.Popen([
      sys.executable, "-c", "import fcntl, sys, time; f = open(sys.argv[1]); "
      "fcntl.flock(f, fcntl.LOCK_EX); print('held', flush=True); "
      "time.sleep(60)",
      str(tmp_path / left["lock held"] / ".writer.lock")
  ],
                            stdout=subprocess.PIPE,
                            text=True)
  try:
    assert holder.stdout.readline() == "held\n"
    run_dir.publish_folder(
        _writer({"DONE": "ok"}), str(tmp_path / "out"), "DONE")
  finally:
    holder.kill()
    holder.wait()
  assert sorted(os.listdir(tmp_path)) == sorted([
      "out", left["alive"], left["elsewhere"], left["another folder"],
      left["lock held"]
  ])
  assert sorted(os.listdir(tmp_path / "out")) == ["DONE", "sub"]  # no lock
