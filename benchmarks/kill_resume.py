r"""Kill-and-resume reliability: do killed-and-restarted runs end identical?

    python benchmarks/kill_resume.py --trials=20 [--seed=0] [--steps=120] \
        [--grad_accumulation_steps=K] [--precision=float16] \
        [--shared_rows=auto] [--task=tagging [--sentences=400]] \
        [--encoder_handle=PATH --preprocessor_handle=PATH]

Runs the demo configuration with --deterministic once without interruption,
then K trials: each starts the same run in a fresh model_dir, SIGKILLs it
1 to 3 times (at a random moment, or — for a share of the kills — the
instant a checkpoint write is in progress, seen as a `_temp` entry in the
checkpoint folder), restarts it with the same flags each time, lets the last
restart finish, and compares every variable of the final checkpoint (model,
encoder, optimizer slots, step, data position) bit for bit with the
uninterrupted run. Prints a table and `K/K identical` (or what differed).

`--task=tagging` runs a tagging run instead (the same flags, the per-token
head and loss): on the first `--sentences` sentences of --conll
(../shared/data/conll2003/train.txt), validation carved from them, at
--seq_length=64 in the trainer's default layout (shared rows: a CoNLL
sentence is short).
`--encoder_handle` and `--preprocessor_handle` replace the demo encoder
(e.g. the converted all-MiniLM-L6-v2 under models/).
"""

import argparse
import os
import random
import shutil
import subprocess
import sys
import tempfile
import time

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CONLL = os.path.join(
    os.path.dirname(ROOT), "shared", "data", "conll2003", "train.txt")


def _command(model_dir,
             steps,
             demo_cache_dir,
             accumulation=1,
             precision="float32",
             shared_rows="",
             extra=()):
  """The run's command line; `extra`: flags added or replaced (the tagging
  run's data and --seq_length, another encoder)."""
  cmd = [
      sys.executable, "-m", "trainer.main", f"--model_dir={model_dir}",
      "--deterministic", f"--train_steps={steps}", "--batch_size=16",
      f"--grad_accumulation_steps={accumulation}", f"--precision={precision}",
      "--steps_per_loop=4", "--checkpoint_every=4", "--eval_every=0",
      "--export=false", "--keep_checkpoints=2"
  ]
  if shared_rows:
    cmd.append(f"--shared_rows={shared_rows}")
  if demo_cache_dir:
    cmd.append(f"--demo_cache_dir={demo_cache_dir}")
  if not any(flag.startswith("--seq_length=") for flag in extra):
    cmd.append("--seq_length=32")
  return cmd + list(extra)


def conll_head(source, sentences, path):
  """Writes the first `sentences` sentences of the CoNLL file `source` to
  `path` (its -DOCSTART- lines as they are: the reader skips them);
  returns `path`."""
  kept, count, words = [], 0, 0
  with open(source, encoding="utf-8") as f:
    for line in f:
      kept.append(line)
      if line.strip() and not line.startswith("-DOCSTART-"):
        words += 1
      elif not line.strip() and words:
        count, words = count + 1, 0
        if count == sentences:
          break
  with open(path, "w", encoding="utf-8") as f:
    f.writelines(kept)
  return path


def _extra_flags(args, work):
  """The flags --task and the encoder flags add to every run's command."""
  extra = []
  if args.task == "tagging":
    subset = conll_head(args.conll, args.sentences,
                        os.path.join(work, "conll_head.txt"))
    # At 64 a row the run shares rows, with the MiniLM's vocabulary (a
    # CoNLL sentence in about 20 pieces) or the demo's (more, smaller
    # pieces); at 32, auto keeps one sentence a row.
    extra += [
        "--task=tagging", f"--train_file={subset}", "--validation_fraction=0.1",
        "--seq_length=64"
    ]
  for flag in ("encoder_handle", "preprocessor_handle"):
    if getattr(args, flag):
      extra.append(f"--{flag}={getattr(args, flag)}")
  return extra


def _env():
  return dict(os.environ, PYTHONPATH=ROOT, TF_CPP_MIN_LOG_LEVEL="2")


def _final_weights(model_dir):
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  directory = os.path.join(model_dir, "checkpoints")
  reader = tf.train.load_checkpoint(tf.train.latest_checkpoint(directory))
  return {
      name: reader.get_tensor(name)
      for name in reader.get_variable_to_shape_map()
      if not name.startswith(("save_counter", "_CHECKPOINTABLE"))
  }


def _run_to_end(cmd):
  result = subprocess.run(
      cmd, cwd=ROOT, env=_env(), capture_output=True, text=True, check=False)
  if result.returncode != 0:
    raise RuntimeError(f"run failed: {result.stderr[-2000:]}")


def _kill_once(cmd, model_dir, mode, delay):
  """Starts the run and SIGKILLs it; returns what happened."""
  checkpoints = os.path.join(model_dir, "checkpoints")
  # A _temp entry left by an earlier killed save is not a save in progress.
  stale = set(os.listdir(checkpoints)) if os.path.isdir(checkpoints) else set()
  proc = subprocess.Popen(
      cmd,
      cwd=ROOT,
      env=_env(),
      stdout=subprocess.DEVNULL,
      stderr=subprocess.DEVNULL)
  start = time.monotonic()
  while proc.poll() is None:
    elapsed = time.monotonic() - start
    if mode == "random" and elapsed >= delay:
      proc.kill()
      proc.wait()
      return f"killed at {elapsed:.1f}s"
    if mode == "checkpoint" and os.path.isdir(checkpoints):
      try:
        names = os.listdir(checkpoints)
      except FileNotFoundError:
        names = []
      if any("_temp" in n and n not in stale for n in names):
        proc.kill()
        proc.wait()
        return f"killed mid-save at {elapsed:.1f}s"
    time.sleep(0.001 if mode == "checkpoint" else 0.01)
  return "finished before the kill"


def main():
  parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
  parser.add_argument("--trials", type=int, default=20)
  parser.add_argument("--seed", type=int, default=0)
  parser.add_argument("--steps", type=int, default=120)
  parser.add_argument(
      "--checkpoint_share",
      type=float,
      default=0.4,
      help="share of kills aimed at checkpoint writes")
  parser.add_argument(
      "--grad_accumulation_steps",
      type=int,
      default=1,
      help="micro-batches per update (the trainer's flag)")
  parser.add_argument(
      "--precision",
      default="float32",
      help="The run's --precision (float16: the loss scale is resumed too).")
  parser.add_argument(
      "--shared_rows",
      default="",
      help="The run's --shared_rows ('' = the trainer's default).")
  parser.add_argument(
      "--task",
      default="classification",
      choices=("classification", "tagging"),
      help="classification: the demo's reviews; tagging: CoNLL sentences "
      "(--conll, --sentences)")
  parser.add_argument(
      "--conll", default=CONLL, help="the tagging run's CoNLL file")
  parser.add_argument(
      "--sentences",
      type=int,
      default=400,
      help="the tagging run trains on the first this many sentences")
  parser.add_argument("--encoder_handle", default="")
  parser.add_argument("--preprocessor_handle", default="")
  parser.add_argument("--demo_cache_dir", default="")
  parser.add_argument("--work_dir", default="")
  args = parser.parse_args()
  work = args.work_dir or tempfile.mkdtemp(prefix="kill_resume_")
  rng = random.Random(args.seed)
  os.makedirs(work, exist_ok=True)
  extra = _extra_flags(args, work)

  reference = os.path.join(work, "reference")
  started = time.monotonic()
  _run_to_end(
      _command(reference, args.steps, args.demo_cache_dir,
               args.grad_accumulation_steps, args.precision, args.shared_rows,
               extra))
  wall = time.monotonic() - started
  want = _final_weights(reference)
  print(f"reference: {args.steps} steps uninterrupted in {wall:.1f}s, "
        f"{len(want)} tensors\n")
  print("| trial | kills | what happened | identical |")
  print("| --- | --- | --- | --- |")
  identical = 0
  for trial in range(args.trials):
    model_dir = os.path.join(work, f"trial-{trial}")
    cmd = _command(model_dir, args.steps, args.demo_cache_dir,
                   args.grad_accumulation_steps, args.precision,
                   args.shared_rows, extra)
    events = []
    for _ in range(rng.randint(1, 3)):
      mode = "checkpoint" if rng.random() < args.checkpoint_share else "random"
      events.append(_kill_once(cmd, model_dir, mode, rng.uniform(0, wall)))
    _run_to_end(cmd)
    got = _final_weights(model_dir)
    diff = sorted(
        k for k in want if k not in got or not np.array_equal(want[k], got[k]))
    same = not diff and sorted(got) == sorted(want)
    identical += same
    print(f"| {trial} | {len(events)} | {'; '.join(events)} | "
          f"{'yes' if same else 'NO: ' + ', '.join(diff[:3])} |")
    shutil.rmtree(model_dir, ignore_errors=True)
  print(f"\n{identical}/{args.trials} identical")
  if not args.work_dir:
    shutil.rmtree(work, ignore_errors=True)
  sys.exit(0 if identical == args.trials else 1)


if __name__ == "__main__":
  main()
