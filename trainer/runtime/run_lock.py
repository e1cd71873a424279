"""A run folder's lock: `Lock` gives `model_dir` to one command at a time.

On a local disk an `fcntl` lock on model_dir/.lock, released by the kernel
when its holder dies; on an object store (gs://, ram://), where no file
lock exists, a lease: the holder writes who it is to .lock and refreshes a
heartbeat, and a newcomer takes over a lease whose heartbeat is stale.
Either way a second command on a busy folder stops with one line naming
the holder.
"""

import fcntl
import json
import os
import socket
import threading
import time
import uuid

from absl import logging
import tensorflow as tf

from trainer.foundation import errors
from trainer.runtime import run_dir

# A lease on an object store (gs://, ram://) is stale this long after its
# holder's last heartbeat; the holder refreshes it every _HEARTBEAT seconds.
_LEASE_TTL = 120.0
_HEARTBEAT = 30.0


def _holder(command):
  return dict(
      id=uuid.uuid4().hex,
      command=command,
      host=socket.gethostname(),
      pid=os.getpid(),
      started=time.time(),
      heartbeat=time.time())


def _describe(holder):
  started = time.strftime("%Y-%m-%d %H:%M:%S UTC",
                          time.gmtime(holder.get("started", 0)))
  return (f"{holder.get('command', '?')} (pid {holder.get('pid', '?')} on "
          f"{holder.get('host', '?')}, since {started})")


def _alive(holder):
  """Whether the holder may still run: a process of this host that is gone
  is dead at once; one elsewhere, until its lease runs out."""
  if holder.get("host") == socket.gethostname():
    try:
      os.kill(int(holder.get("pid", -1)), 0)
    except ProcessLookupError:
      return False
    except (PermissionError, ValueError, OverflowError):
      pass
  return time.time() - holder.get("heartbeat", 0) < _LEASE_TTL


class Lock:
  """`model_dir` owned by one command at a time: `model_dir/.lock`.

  A local folder is locked with flock(2), which the kernel releases when
  the holder dies, even by SIGKILL: a killed run's lock is taken over at
  once. Object stores (gs://) have no locks: there the file is a lease the
  holder refreshes every 30 s; a lease whose holder is a dead process of
  this host, or whose heartbeat is over 2 minutes old, is taken over. Two
  commands starting within the same second on different hosts can both
  write the lease; the one that reads back the other's loses (best effort,
  BUILD_NOTES.md).
  """

  def __init__(self, model_dir, command):
    self.model_dir, self.command = model_dir, command
    self.path = os.path.join(model_dir, ".lock")
    self.holder = _holder(command)
    self._file = self._thread = None
    self._stop = threading.Event()

  def _busy(self, holder):
    return errors.ConfigError(
        f"--model_dir={self.model_dir} is in use by {_describe(holder)}; "
        "wait for it to end or stop it (a run that was killed releases it" +
        ("" if "://" not in self.model_dir else ", on gs:// within 2 "
         "minutes") + f"), or delete {self.path} if that run is gone")

  def _open(self):
    try:
      return open(self.path, "a+", encoding="utf-8")
    except OSError as e:
      raise errors.ResourceError(
          f"--model_dir={self.model_dir}: cannot write its lock file "
          f"{self.path} ({e.strerror}); a run's folder must be writable "
          "(an export to a folder outside it needs no lock)") from None

  def _acquire_local(self):
    for _ in range(3):
      f = self._open()
      try:
        fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
      except OSError:
        f.seek(0)
        text = f.read()
        f.close()
        raise self._busy(_parse(text)) from None
      # The holder before us may have removed the file between our open and
      # our lock: then we locked a file nobody else will see; again.
      try:
        same = os.fstat(f.fileno()).st_ino == os.stat(self.path).st_ino
      except FileNotFoundError:
        same = False
      if same:
        break
      f.close()
    f.seek(0)
    f.truncate()
    f.write(json.dumps(self.holder) + "\n")
    f.flush()
    self._file = f

  def _acquire_lease(self):
    current = run_dir.read_json(self.path)
    if current and _alive(current):
      raise self._busy(current)
    run_dir.write_json(self.path, self.holder)
    time.sleep(0.5)  # another starting now wrote too: the last write wins
    current = run_dir.read_json(self.path)
    if not current or current.get("id") != self.holder["id"]:
      raise self._busy(current or {})
    self._thread = threading.Thread(
        target=self._beat, daemon=True, name="model-dir-lease")
    self._thread.start()

  def _beat(self):
    while not self._stop.wait(_HEARTBEAT):
      self.holder["heartbeat"] = time.time()
      try:
        run_dir.write_json(self.path, self.holder)
      except tf.errors.OpError as e:  # the next beat tries again
        logging.warning("Cannot refresh %s: %s", self.path, e)

  def __enter__(self):
    if "://" in self.model_dir:
      self._acquire_lease()
    else:
      self._acquire_local()
    return self

  def __exit__(self, *exc):
    if self._file:
      os.remove(self.path)  # while locked: a newcomer then sees a new file
      self._file.close()
    if self._thread:
      self._stop.set()
      self._thread.join()
      current = run_dir.read_json(self.path)
      if current and current.get("id") == self.holder["id"]:
        tf.io.gfile.remove(self.path)


def _parse(text):
  try:
    return json.loads(text)
  except ValueError:
    return {}
