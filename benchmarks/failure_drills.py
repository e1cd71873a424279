r"""Failure drills: what a user gets for each way a command can go wrong.

    python benchmarks/failure_drills.py [--only=NAME,...] [--output=FILE]

Each drill prepares its files, runs a real command (`python -m trainer.X`)
in a fresh process, and reports its exit code, its seconds, the one line it
printed (`error: ...` / `preempted: ...`, the doctor's `[FAIL] ...`; for a
command that ends well but must say something, that log line, once), and,
for drills aimed at a finished run, whether that run's files were left
intact (every file that existed before is byte for byte the same; for a
refused command, also no file added or removed). A drill passes when the
exit code and the line are the expected ones, no traceback was printed,
nothing hung (a time limit per drill) and the run is intact. Prints a
markdown table; exits 1 if a drill failed.
"""

import argparse
import dataclasses
import fcntl
import hashlib
import json
import os
import resource
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TIME_LIMIT = 240  # seconds: more is a hang


@dataclasses.dataclass
class Result:
  name: str
  exit_code: int
  seconds: float
  line: str
  intact: bool | None
  ok: bool


def _env(**extra):
  env = dict(os.environ, PYTHONPATH=ROOT, TF_CPP_MIN_LOG_LEVEL="2")
  env.pop("TF_CONFIG", None)
  env.update(extra)
  return env


def _command(module, *args):
  return [sys.executable, "-m", f"trainer.{module}", *args]


def _line(stderr):
  lines = [
      s for s in stderr.splitlines()
      if s.startswith(("error:", "preempted:", "[FAIL]"))
  ]
  return lines[-1] if lines else ""


def _said(stderr, message):
  """The log lines holding `message` (what a command that ends well must
  say, once), without absl's prefix."""
  return [
      s.split("] ", 1)[-1]
      for s in stderr.splitlines()
      if message and message in s and not s.startswith(("error:", "preempted:",
                                                        "[FAIL]"))
  ]


def _snapshot(folder):
  """{relative path: sha256} of every file under `folder`."""
  out = {}
  for root, _, names in os.walk(folder):
    for name in names:
      path = os.path.join(root, name)
      with open(path, "rb") as f:
        out[os.path.relpath(path,
                            folder)] = hashlib.sha256(f.read()).hexdigest()
  return out


def _intact(before, folder, exact=False):
  """Every file of `before` byte for byte as it was; `exact`: and no file
  added (a refused command writes nothing)."""
  after = _snapshot(folder)
  if exact:
    return after == before
  return all(after.get(path) == digest for path, digest in before.items())


class Work:
  """A drill's folder, with a copy of the finished demo run when asked."""

  def __init__(self, root, base):
    self.root, self.base = root, base

  def path(self, *parts):
    return os.path.join(self.root, *parts)

  def write(self, name, data):
    path = self.path(name)
    with open(path, "wb" if isinstance(data, bytes) else "w") as f:
      f.write(data)
    return path

  def run_copy(self):
    target = self.path("run")
    shutil.copytree(self.base, target)
    return target


def _demo(*args):
  return [
      "--encoder_handle=demo", "--preprocessor_handle=demo", "--seq_length=32",
      "--batch_size=16", "--steps_per_loop=5", *args
  ]


def run_command(argv, env=None, preexec_fn=None, timeout=TIME_LIMIT):
  """(exit code, seconds, stderr); exit code None on a hang."""
  start = time.monotonic()
  try:
    out = subprocess.run(
        argv,
        cwd=ROOT,
        env=env or _env(),
        capture_output=True,
        text=True,
        timeout=timeout,
        preexec_fn=preexec_fn,
        check=False)
    return out.returncode, time.monotonic() - start, out.stderr
  except subprocess.TimeoutExpired as e:
    stderr = e.stderr.decode() if isinstance(e.stderr, bytes) else e.stderr
    return None, time.monotonic() - start, stderr or ""


def free_ports(n):
  """`n` loopback ports free now (for a cluster of local processes)."""
  socks = [socket.socket() for _ in range(n)]
  for s in socks:
    s.bind(("127.0.0.1", 0))
  ports = [s.getsockname()[1] for s in socks]
  for s in socks:
    s.close()
  return ports


# --------------------------------------------------------------- special ---
def _second_trainer(work):
  """A trainer on a model_dir another trainer holds."""
  model_dir = work.path("shared")
  first = subprocess.Popen(
      _command("main", f"--model_dir={model_dir}",
               *_demo("--train_steps=5000")),
      cwd=ROOT,
      env=_env(),
      stderr=subprocess.PIPE,
      text=True)
  lock = os.path.join(model_dir, ".lock")
  deadline = time.monotonic() + 120
  while not os.path.exists(lock) and time.monotonic() < deadline:
    time.sleep(0.2)
  time.sleep(2)
  code, seconds, stderr = run_command(
      _command("main", f"--model_dir={model_dir}", *_demo("--train_steps=10")))
  first.send_signal(signal.SIGTERM)
  first_stderr = first.communicate(timeout=TIME_LIMIT)[1]
  first_ok = first.returncode == 75 and _line(first_stderr).startswith(
      "preempted:")
  return code if first_ok else -1, seconds, stderr


def _signal_during(after_line, signals=(signal.SIGTERM,)):
  """A run that gets `signals` (0.2 s apart) once its log shows
  `after_line`, then resumes."""

  def drill(work):
    model_dir = work.path("run")
    argv = _command("main", f"--model_dir={model_dir}",
                    *_demo("--train_steps=40", "--checkpoint_every=0"))
    start = time.monotonic()
    proc = subprocess.Popen(
        argv, cwd=ROOT, env=_env(), stderr=subprocess.PIPE, text=True)
    seen = []
    for line in proc.stderr:
      seen.append(line)
      if after_line in line:
        for i, sig in enumerate(signals):
          time.sleep(0.2 if i else 0)
          proc.send_signal(sig)
        break
    seen.append(proc.communicate(timeout=TIME_LIMIT)[1])
    seconds = time.monotonic() - start
    code, _, resumed = run_command(argv)
    with open(os.path.join(model_dir, "summary.json")) as f:
      finished = json.load(f)["final_step"] == 40
    return (proc.returncode if code == 0 and finished else -1, seconds,
            "".join(seen))

  return drill


def _missing_peer(work):
  ports = free_ports(2)
  tf_config = json.dumps(
      dict(
          cluster=dict(worker=[f"127.0.0.1:{p}" for p in ports]),
          task=dict(type="worker", index=0)))
  return run_command(
      _command("main", f"--model_dir={work.path('mw')}",
               "--strategy=multi_worker_mirrored", "--cluster_timeout=5",
               *_demo("--train_steps=4")),
      env=_env(TF_CONFIG=tf_config))


def _disk_full(work):
  """A file-size limit (ulimit -f: EFBIG) stands in for a full disk."""
  model_dir = work.run_copy()

  def limit():
    resource.setrlimit(resource.RLIMIT_FSIZE, (300_000, 300_000))

  return run_command(
      _command("main", f"--model_dir={model_dir}",
               *_demo("--train_steps=20", "--checkpoint_every=5")),
      preexec_fn=limit)


def _grown_file(work):
  """A run on a file of 300 rows, resumed after it grew to 600."""
  rows = [
      f"review {i} {'good' if i % 2 else 'bad'},{i % 2}\n" for i in range(600)
  ]
  path = work.write("d.csv", "text,label\n" + "".join(rows[:300]))
  argv = _command("main", f"--model_dir={work.path('m')}",
                  f"--train_file={path}", "--validation_fraction=0.2",
                  *_demo("--train_steps=5", "--export=false"))
  code, _, stderr = run_command(argv)
  if code != 0:
    return -1, 0.0, stderr
  work.write("d.csv", "text,label\n" + "".join(rows))
  return run_command(argv[:-2] + ["--train_steps=10", "--export=false"])


def _other_runs_checkpoint(work):
  """Export a run with the checkpoint of a run of another head."""
  other = work.path("other")
  code, _, stderr = run_command(
      _command("main", f"--model_dir={other}", "--num_classes=3",
               "--label_map=0:0,1:1", "--label_names=a,b,c",
               *_demo("--train_steps=5", "--export=false")))
  if code != 0:
    return -1, 0.0, stderr
  return run_command(
      _command("export", f"--model_dir={work.run_copy()}",
               f"--checkpoint={other}/checkpoints/ckpt-5",
               f"--export_base_dir={work.path('out')}"))


def _export_while_held(inside):
  """An export while a trainer holds the run (its lock, taken here): into
  the run it waits its turn; elsewhere it goes ahead."""

  def drill(work):
    model_dir = work.run_copy()
    target = (f"--export_base_dir={model_dir}/export"
              if inside else f"--export_base_dir={work.path('elsewhere')}")
    with open(os.path.join(model_dir, ".lock"), "w") as lock:
      json.dump(
          dict(
              command="trainer.main",
              pid=os.getpid(),
              host=socket.gethostname(),
              started=time.time()), lock)
      lock.flush()
      fcntl.flock(lock, fcntl.LOCK_EX)
      return run_command(_command("export", f"--model_dir={model_dir}", target))

  return drill


def _killed_export(work):
  """An export SIGKILLed while it writes its temporary folder; the next
  export removes what it left and finishes."""
  model_dir = work.run_copy()
  base = f"--export_base_dir={work.path('again')}"
  argv = _command("export", f"--model_dir={model_dir}", base)
  proc = subprocess.Popen(argv, cwd=ROOT, env=_env(), stderr=subprocess.PIPE)
  target = work.path("again")
  deadline = time.monotonic() + TIME_LIMIT
  while time.monotonic() < deadline and proc.poll() is None:
    if os.path.isdir(target) and any(
        n.startswith(".tmp-") for n in os.listdir(target)):
      break
    time.sleep(0.05)
  proc.kill()
  proc.communicate()
  left = [n for n in os.listdir(target) if n.startswith(".tmp-")]
  code, seconds, stderr = run_command(argv)
  still = [n for n in os.listdir(target) if n.startswith(".tmp-")]
  return (code if left and not still else -1), seconds, stderr


def _opaque_encoder(work):
  """A TF Hub style encoder SavedModel this trainer cannot rebuild (a BERT
  behind a plain module, without this project's config), written by a
  process of its own (this program does not import TensorFlow)."""
  path = work.path("opaque")
  script = ("import sys, tensorflow as tf\n"
            "from trainer.encoders import bert, demo, native\n"
            "encoder = bert.BertEncoder(bert.BertConfig(\n"
            "    vocab_size=len(demo.vocabulary()), **demo.DEMO_BERT))\n"
            "tf.saved_model.save(native.reusable_root(encoder)[0], "
            "sys.argv[1])\n")
  code, _, stderr = run_command([sys.executable, "-c", script, path])
  if code != 0:
    raise RuntimeError(f"cannot write the opaque encoder: {stderr[-2000:]}")
  return path


def _opaque_with_rows(module):
  """trainer.doctor (exit 1, its [FAIL] line on stdout) or trainer.main on
  an encoder it cannot rebuild with --shared_rows=14,16: the same line."""

  def drill(work):
    encoder = _opaque_encoder(work)
    argv = _command(module, f"--model_dir={work.path('m')}",
                    f"--encoder_handle={encoder}",
                    f"--preprocessor_handle={work.base}/../demo/preprocessor",
                    "--seq_length=32", "--batch_size=32", "--shared_rows=14,16")
    start = time.monotonic()
    out = subprocess.run(
        argv,
        cwd=ROOT,
        env=_env(),
        capture_output=True,
        text=True,
        timeout=TIME_LIMIT,
        check=False)
    return (out.returncode, time.monotonic() - start, out.stderr + out.stdout)

  return drill


def _evaluate_a_file_run(work):
  """evaluate --model_dir of a run on a CSV file (not the demo): its log
  names the checkpoint scored and never the demo's defaults."""
  rows = [
      f"review {i} {'good' if i % 2 else 'bad'},{i % 2}\n" for i in range(300)
  ]
  path = work.write("d.csv", "text,label\n" + "".join(rows))
  model_dir = work.path("m")
  code, _, stderr = run_command(
      _command("main", f"--model_dir={model_dir}", f"--train_file={path}",
               "--validation_fraction=0.2",
               *_demo("--train_steps=5", "--export=false")))
  if code != 0:
    return -1, 0.0, stderr
  code, seconds, stderr = run_command(
      _command("evaluate", f"--model_dir={model_dir}", "--split=validation"))
  return (-1 if "Embedded demo" in stderr else code), seconds, stderr


def _lose_config(how):
  """Damages a run copy's config.json: gone, or cut as a kill mid-write of
  an older version left it."""

  def damage(model_dir):
    path = os.path.join(model_dir, "config.json")
    if how == "missing":
      os.remove(path)
    else:
      with open(path, "w") as f:
        f.write('{"model_dir": ')

  return damage


@dataclasses.dataclass
class Drill:
  """`argv(work)` -> the command; or `special(work)` -> (code, s, stderr).

  `message`: in the one line of a failure; for exit code 0, in exactly one
  log line (what a command that ends well must say), if given.
  """

  name: str
  exit_code: int
  message: str
  argv: object = None
  special: object = None
  on_run: bool = False  # aimed at a copy of a finished run: intact?
  continues_run: bool = False  # a resume that may (must) change the run
  damage: object = None  # damage(run copy) before the snapshot


def _main_on_run(*args):
  return lambda w: _command("main", f"--model_dir={w.path('run')}",
                            *_demo("--train_steps=10", *args))


def _main_with_file(name, data, *args):

  def argv(w):
    return _command("main", f"--model_dir={w.path('m')}",
                    f"--train_file={w.write(name, data)}", *_demo(*args))

  return argv


def _export_dir(w):
  """The base run's export (its only one)."""
  folder = os.path.join(w.path("run"), "export")
  return os.path.join(folder, sorted(os.listdir(folder))[-1])


DRILLS = [
    Drill("bad flag value", 2, "--warmup_fraction=1.5 is invalid",
          lambda w: _command("main", "--warmup_fraction=1.5")),
    Drill("unknown flag", 2, "Unknown command line flag 'epoch'",
          lambda w: _command("main", "--epoch=3")),
    Drill("infinite learning rate", 2, "--learning_rate=inf is invalid",
          lambda w: _command("main", "--learning_rate=inf")),
    Drill("NaN weight decay", 2, "--weight_decay=nan is invalid",
          lambda w: _command("main", "--weight_decay=nan")),
    Drill("model_dir is a file", 2, "is a file; give a folder",
          lambda w: _command("main", f"--model_dir={w.write('f', 'x')}")),
    Drill("model_dir under a file", 2, "cannot create --model_dir=",
          lambda w: _command("main", f"--model_dir={w.write('f', 'x')}/run")),
    Drill("gs:// model_dir offline", 2, "cannot create --model_dir=gs://",
          lambda w: _command("main", "--model_dir=gs://no-bucket-xyz/run")),
    Drill(
        "missing handle folder", 2, "--encoder_handle='/nonexistent'",
        lambda w: _command("main", "--encoder_handle=/nonexistent",
                           "--preprocessor_handle=/nonexistent")),
    Drill(
        "handles swapped", 2, "are the two handles swapped?",
        lambda w: _command("main", f"--model_dir={w.path('m')}",
                           f"--encoder_handle={w.base}/../demo/preprocessor",
                           f"--preprocessor_handle={w.base}/../demo/encoder")),
    Drill(
        "TF Hub URL offline", 2, "cannot load --preprocessor_handle=https://",
        lambda w: _command(
            "main", f"--model_dir={w.path('m')}", "--encoder_handle=https://"
            "tfhub.dev/google/experts/bert/wiki_books/sst2/2",
            "--preprocessor_handle=https://tfhub.dev/tensorflow/"
            "bert_en_uncased_preprocess/3")),
    Drill("missing data file", 2, "no such file",
          lambda w: _command("main", "--train_file=/nonexistent.csv")),
    Drill("folder as data file", 2, "is a folder; give a CSV/TSV file",
          lambda w: _command("main", f"--train_file={w.root}")),
    Drill("binary data file", 2, "is not a text file",
          _main_with_file("d.csv", b"text,label\n" + bytes(range(256)) * 40)),
    Drill("UTF-16 data file", 2, "is UTF-16 text; convert it to UTF-8",
          _main_with_file("d.csv", "text,label\nhi,1\n".encode("utf-16"))),
    Drill("wrong column", 2, "no column 'text' (--text_column)",
          _main_with_file("d.csv", "sentence,label\nhi,1\n")),
    Drill("mostly malformed rows", 2, "rejected (malformed_row",
          _main_with_file("d.csv", "text,label\n" + "a,1,x\n" * 100)),
    Drill("one class only", 2, "examples of class 1 only",
          _main_with_file("d.csv", "text,label\n" + "good,1\n" * 200)),
    Drill("empty validation carve", 2, "holds no usable row",
          _main_with_file("d.csv", "text,label\n" + "a,1\nb,0\n" * 5)),
    Drill(
        "unknown TFDS name", 2, "--tfds_name=no_such_dataset",
        lambda w: _command("main", f"--model_dir={w.path('m')}",
                           "--tfds_name=no_such_dataset")),
    Drill(
        "sentiment140 not prepared (offline)", 2,
        "is not prepared in --data_dir=", lambda w: _command(
            "main", f"--model_dir={w.path('m')}", "--tfds_name=sentiment140",
            f"--data_dir={w.path('tfds')}", *_demo())),
    Drill("TPU address without port", 2, "cannot reach 127.0.0.1:8470",
          lambda w: _command("main", "--tpu=grpc://127.0.0.1")),
    Drill("TPU name off Google Cloud", 2, "cannot look up this TPU name",
          lambda w: _command("main", "--tpu=my-tpu")),
    Drill(
        "no TPU here", 2, "this machine has no TPU", lambda w: _command(
            "main", f"--model_dir={w.path('m')}", "--tpu=local")),
    Drill(
        "multi-worker peer never starts",
        2,
        "worker 1 (127.0.0.1:",
        special=_missing_peer),
    Drill(
        "resume with other num_classes",
        2,
        "--num_classes: 2 -> 3",
        _main_on_run("--num_classes=3"),
        on_run=True),
    Drill(
        "resume with another encoder",
        2,
        "--encoder_handle:",
        lambda w: _command(
            "main", f"--model_dir={w.path('run')}",
            *_demo("--train_steps=10",
                   f"--encoder_handle={w.base}/../demo/encoder",
                   f"--preprocessor_handle={w.base}/../demo/preprocessor")),
        on_run=True),
    Drill(
        "resume with more steps (allowed)",
        0,
        "",
        _main_on_run("--train_steps=15"),
        on_run=True,
        continues_run=True),
    Drill(
        "second trainer on one model_dir",
        2,
        "is in use by trainer.main",
        special=_second_trainer),
    Drill(
        "SIGTERM while counting the data",
        75, "received: stopped after "
        "step 0",
        special=_signal_during("Split train:")),
    Drill(
        "SIGTERM mid-training",
        75,
        "received: stopped after step",
        special=_signal_during("step 10/40")),
    Drill(
        "disk full while saving (file size limit)",
        2,
        "no room to write",
        special=_disk_full),
    Drill(
        "predict batch size 0",
        2,
        "--batch_size=0 is invalid",
        lambda w: _command("predict", f"--export_dir={_export_dir(w)}",
                           "--text=hi", "--batch_size=0"),
        on_run=True),
    Drill("predict on a non-export folder", 2, "holds no saved_model.pb",
          lambda w: _command("predict", f"--export_dir={w.root}", "--text=hi")),
    Drill(
        "predict into a missing folder",
        2,
        "does not exist; create it",
        lambda w: _command("predict", f"--export_dir={_export_dir(w)}",
                           "--text=hi", f"--output_file={w.root}/no/o.csv"),
        on_run=True),
    Drill(
        "evaluate with other num_classes",
        2,
        "does not match the export",
        lambda w: _command("evaluate", f"--export_dir={_export_dir(w)}",
                           f"--model_dir={w.path('run')}", "--num_classes=3",
                           "--label_names=a,b,c", "--split=validation"),
        on_run=True),
    Drill(
        "evaluate with no usable row",
        2,
        "no usable row to score",
        lambda w: _command(
            "evaluate", f"--export_dir={_export_dir(w)}", "--train_file=" + w.
            write("d.csv", "text,label\nx,7\ny,9\n"), "--split=train"),
        on_run=True),
    Drill(
        "evaluate a run by --model_dir",
        0,
        "",
        lambda w: _command("evaluate", f"--model_dir={w.path('run')}",
                           "--split=validation"),
        on_run=True),
    Drill("export without checkpoints", 2, "no checkpoint to export",
          lambda w: _command("export", f"--model_dir={w.path('empty')}")),
    # Issue 36: what a new user met.
    Drill("class names not distinct", 2, "each class needs a name of its own",
          lambda w: _command("main", "--label_names=pos,pos")),
    Drill(
        "a bucket list over the cap", 2, "9 lengths; give at most 8",
        lambda w: _command("main", "--seq_length=128",
                           "--seq_buckets=8,16,24,32,40,48,56,64,72")),
    # The base run lays its batches in shared rows (--seq_buckets=none, the
    # default since issue 44): a resume may change the loop, and may spell
    # the run's own choices otherwise.
    Drill(
        "resume with another --steps_per_loop (allowed)",
        0,
        "",
        _main_on_run("--steps_per_loop=3", "--train_steps=15"),
        on_run=True,
        continues_run=True),
    Drill(
        "resume with --seq_buckets spelled ' NONE' (allowed)",
        0,
        "",
        _main_on_run("--seq_buckets= NONE", "--train_steps=15"),
        on_run=True,
        continues_run=True),
    Drill(
        "resume on a grown training file",
        2,
        "trained on other data (train rows_read 2",
        special=_grown_file),
    Drill(
        "export a checkpoint of another run",
        2,
        "does not fit the run in --model_dir=",
        special=_other_runs_checkpoint),
    Drill(
        "export into a run a trainer holds",
        2,
        "is in use by trainer.main",
        special=_export_while_held(inside=True)),
    Drill(
        "export elsewhere while a trainer holds the run",
        0,
        "",
        special=_export_while_held(inside=False)),
    Drill("a killed export's leftovers", 0, "", special=_killed_export),
    Drill(
        "Ctrl-C twice mid-training",
        75,
        "SIGINT received: stopped after",
        special=_signal_during("step 10/40", (signal.SIGINT, signal.SIGINT))),
    Drill("gs:// training file offline", 2,
          "--train_file=gs://no-bucket-xyz/d.csv: cannot reach it",
          lambda w: _command("main", "--train_file=gs://no-bucket-xyz/d.csv")),
    Drill(
        "predict from gs:// offline", 2,
        "--export_dir=gs://no-bucket-xyz/e: cannot reach it", lambda w:
        _command("predict", "--export_dir=gs://no-bucket-xyz/e", "--text=hi")),
    Drill(
        "Hugging Face export into a file",
        2,
        "is a file; give a new or empty folder",
        lambda w:
        _command("export", f"--model_dir={w.path('run')}",
                 "--format=huggingface", f"--output_dir={w.write('f', 'x')}"),
        on_run=True),
    Drill("every label outside the map", 2,
          "has no usable rows (3 read, rejected: label_not_in_map 3)",
          _main_with_file("d.csv", "text,label\na,7\nb,9\nc,8\n")),
    Drill("a header-only data file", 2, "holds no data rows (a header only",
          _main_with_file("d.csv", "text,label\n")),
    # Issue 58: a folder that lost its record; the doctor as training;
    # silent empty results; a wrong reason or a fix that does not exist.
    Drill(
        "resume a run whose config.json is missing",
        2, "but its config.json is missing, so this run's flags cannot be "
        "checked against them; restore it (the run keeps a copy: cp ",
        _main_on_run("--batch_size=8", "--seed=7"),
        on_run=True,
        damage=_lose_config("missing")),
    Drill(
        "resume a run whose config.json is cut short",
        2, "but its config.json is unreadable (not valid JSON), so this run's "
        "flags cannot be checked",
        _main_on_run("--batch_size=8", "--seed=7"),
        on_run=True,
        damage=_lose_config("truncated")),
    Drill(
        "evaluate a run whose config.json is missing",
        2, "but its config.json is missing, so this run's flags cannot be "
        "checked",
        lambda w: _command("evaluate", f"--model_dir={w.path('run')}",
                           "--split=validation"),
        on_run=True,
        damage=_lose_config("missing")),
    Drill(
        "export a run whose config.json is cut short",
        2,
        "but its config.json is unreadable (not valid JSON)",
        lambda w: _command("export", f"--model_dir={w.path('run')}"),
        on_run=True,
        damage=_lose_config("truncated")),
    Drill(
        "doctor on an opaque encoder with a row list",
        1, "[FAIL] shared_rows: --shared_rows=14,16 cannot apply: "
        "--encoder_handle=",
        special=_opaque_with_rows("doctor")),
    Drill(
        "training on an opaque encoder with a row list",
        2,
        "error: --shared_rows=14,16 cannot apply: --encoder_handle=",
        special=_opaque_with_rows("main")),
    Drill(
        "predict an empty text file",
        0,
        "0 rows read, 0 scored",
        lambda w: _command("predict", f"--export_dir={_export_dir(w)}",
                           f"--input_file={w.write('empty.txt', '')}"),
        on_run=True),
    Drill(
        "predict a header-only CSV",
        0,
        "0 rows read, 0 scored",
        lambda w: _command("predict", f"--export_dir={_export_dir(w)}",
                           "--input_file=" + w.write("h.csv", "text,label\n")),
        on_run=True),
    Drill(
        "a row list no batch fits (trains and warns)", 0,
        "Shared rows: no batch fits --shared_rows=4,8 (batches of 32 at "
        "--seq_length=16 need more rows), so every step runs one example a "
        "row; --shared_rows=auto would choose 16,17,18,20", lambda w: _command(
            "main", f"--model_dir={w.path('m')}",
            *_demo("--batch_size=32", "--seq_length=16", "--shared_rows=4,8",
                   "--train_steps=5", "--export=false"))),
    Drill(
        "batch of one turns rows off (says why)", 0,
        "off, one example a row (a batch of one example (--batch_size=1) has "
        "no other to share a row with)", lambda w: _command(
            "main", f"--model_dir={w.path('m')}",
            *_demo("--batch_size=1", "--train_steps=5", "--export=false"))),
    Drill(
        "a row list at batch one", 2,
        "--shared_rows=1 is invalid: a batch of one example (--batch_size=1) "
        "has no other to share a row with; use --shared_rows=none",
        lambda w: _command("main", f"--model_dir={w.path('m')}",
                           *_demo("--batch_size=1", "--shared_rows=1"))),
    Drill(
        "a row list over accumulation steps", 2,
        "3 rows do not split over 1 replica x 2 accumulation steps; use "
        "multiples of 2", lambda w: _command(
            "main", f"--model_dir={w.path('m')}",
            *_demo("--grad_accumulation_steps=2", "--shared_rows=3"))),
    Drill(
        "encoder handle is a file", 2, "is invalid: it is a file, not a folder",
        lambda w: _command(
            "main", f"--model_dir={w.path('m')}",
            f"--encoder_handle={w.write('enc.tar.gz', 'x')}",
            f"--preprocessor_handle={w.base}/../demo/"
            "preprocessor")),
    Drill(
        "evaluate a run names the checkpoint it scored",
        0,
        "(step 10) of the run in ",
        lambda w: _command("evaluate", f"--model_dir={w.path('run')}",
                           "--split=validation"),
        on_run=True),
    Drill(
        "evaluate a run on a file: no demo defaults",
        0,
        "(step 5) of the run in ",
        special=_evaluate_a_file_run),
]


def _prepare(drill, work):
  if drill.name == "export without checkpoints":
    os.makedirs(work.path("empty"))
    with open(work.path("empty", "config.json"), "w") as f:
      json.dump(dict(config=dict(model_dir=work.path("empty"))), f)


def run_drill(drill, work):
  """Runs one drill in `work`; returns its Result."""
  _prepare(drill, work)
  before = None
  if drill.on_run:
    work.run_copy()
    if drill.damage:
      drill.damage(work.path("run"))
    before = _snapshot(work.path("run"))
  if drill.special:
    code, seconds, stderr = drill.special(work)
  else:
    code, seconds, stderr = run_command(drill.argv(work))
  line = _line(stderr)
  said = _said(stderr, drill.message) if drill.exit_code == 0 else []
  heard = drill.message in line if drill.exit_code else (not drill.message or
                                                         len(said) == 1)
  refused = drill.exit_code != 0 and not drill.continues_run
  intact = _intact(
      before, work.path("run"), exact=refused) if drill.on_run else None
  ok = (
      code == drill.exit_code and heard and "Traceback" not in stderr and
      (intact is not False or drill.continues_run))
  line = line or (said[0] if said else "")
  shown = line or ("" if code == 0 else stderr.strip()[-300:])
  return Result(drill.name, code, seconds, shown[:300], intact, ok)


def base_run(root, cache=None):
  """A finished demo run (10 steps, exported) and the demo's assets (built
  under `root`, or those of the demo cache folder `cache`)."""
  cache = cache or os.path.join(root, "cache")
  model_dir = os.path.join(root, "base")
  code, _, stderr = run_command(
      _command("main", f"--model_dir={model_dir}", f"--demo_cache_dir={cache}",
               *_demo("--train_steps=10", "--checkpoint_every=5")))
  if code != 0:
    raise RuntimeError(f"the base run failed: {stderr[-2000:]}")
  # Drills reach the demo's handles as <base>/../demo/{encoder,preprocessor}.
  os.symlink(cache, os.path.join(root, "demo"))
  return model_dir


def run_drills(names=None, root=None, demo_cache=None, base=None):
  """Runs the drills named (all by default); returns their Results.
  `demo_cache`: a demo cache folder already built (else one is built);
  `base`: a finished, exported demo run of it to aim at (else one is
  trained)."""
  root = root or tempfile.mkdtemp(prefix="drills_")
  selected = [d for d in DRILLS if not names or d.name in names]
  if base:
    os.symlink(demo_cache, os.path.join(root, "demo"))
  else:
    base = base_run(root, demo_cache)
  results = []
  for i, drill in enumerate(selected):
    work = Work(os.path.join(root, f"drill-{i}"), base)
    os.makedirs(work.root)
    results.append(run_drill(drill, work))
  return results


def main():
  parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
  parser.add_argument("--only", default="", help="comma-separated names")
  parser.add_argument("--output", default="")
  args = parser.parse_args()
  names = set(filter(None, args.only.split(",")))
  results = run_drills(names)
  print("| drill | exit | seconds | what it printed | run intact | ok |")
  print("| --- | --- | --- | --- | --- | --- |")
  for r in results:
    intact = "-" if r.intact is None else ("yes" if r.intact else "NO")
    line = r.line.replace("|", "\\|")
    print(f"| {r.name} | {r.exit_code} | {r.seconds:.1f} | {line} | {intact} "
          f"| {'yes' if r.ok else 'NO'} |")
  passed = sum(r.ok for r in results)
  print(f"\n{passed}/{len(results)} drills as expected")
  if args.output:
    with open(args.output, "w") as f:
      json.dump([dataclasses.asdict(r) for r in results], f, indent=2)
  sys.exit(0 if passed == len(results) else 1)


if __name__ == "__main__":
  main()
