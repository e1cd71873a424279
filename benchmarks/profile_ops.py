r"""Where the time goes: a table of a `--profile_steps` trace, by op type.

    python -m trainer.main ... --profile_steps=20,30 --model_dir=DIR
    python benchmarks/profile_ops.py --logdir=DIR/summaries/train [--top=15]

Reads the newest `plugins/profile/*/*.xplane.pb` under --logdir (the trace
TensorBoard's Profile tab shows) and prints two markdown tables: time by
phase (forward, backward, optimizer, input, the XLA cluster, the host's
tf.data threads) and by op type. XLA's ops (`--jit_compile`) are the
events that carry an `hlo_op` stat: listed as `xla:` + the HLO
instruction's name without its number (`xla:MatMul` for dots,
`xla:multiply_add_fusion`); AdamW's kernel (one per variable and step,
off TPUs) is `xla:adamw_update` in the optimizer phase, counted in
launches. An op's time is its wall time on the thread that ran it, Eigen's
helper threads included; the shares are of all op time in the window,
which can exceed the window's wall time when ops run side by side.
--output writes the numbers as JSON.
"""

import argparse
import collections
import glob
import json
import os
import re
import sys

# TensorFlow's own copy of the profiler protos (no extra dependency).
from tensorflow.tsl.profiler.protobuf import xplane_pb2

# A TensorFlow op's event: "scope/op_name:OpType". Runtime events
# ("ExecutorState::Process", "Iterator::Root", function calls) are not ops.
_OP = re.compile(r"^([^\s:]+):([A-Za-z_][A-Za-z0-9_]*)$")

# An XLA instruction's event name: "MatMul_2.14", "select_add_fusion.3"
# (TF 2.21); "dot.12", "add_reduce_fusion.3.clone" (TF 2.20).
_XLA_SUFFIX = re.compile(r"(\.\d+|\.clone)+$")
_XLA_MATMUL = re.compile(r"^(MatMul(_\d+)?|dot)$")
# XLA instructions that only run others (TF 2.20 traces its call thunks).
_XLA_CONTAINERS = {"call", "while", "conditional"}

# The XLA module of AdamW's update of one variable (CPUs and GPUs:
# `optimization.adamw_update`).
OPTIMIZER_MODULE = "adamw_update"

# Ops that only run others: their time is their children's.
_CONTAINERS = {
    "While", "StatelessWhile", "If", "StatelessIf", "PartitionedCall",
    "StatefulPartitionedCall", "_Send", "_Recv"
}


def newest_trace(logdir):
  paths = glob.glob(
      os.path.join(logdir, "plugins", "profile", "*", "*.xplane.pb"))
  if not paths:
    raise FileNotFoundError(
        f"no profile under {logdir}/plugins/profile: run trainer.main with "
        "--profile_steps=FIRST,LAST and pass its summaries/train folder")
  return max(paths, key=os.path.getmtime)


def phase(name, op_type):
  """Backward, optimizer, input or forward (with the loop's own few ops).

  Gradients are named after the tape ("gradient_tape/...") or, inside a
  loaded SavedModel's function, "gradients/..."; an encoder traced from
  Python (bfloat16) keeps no module scopes, so forward ops are what is left.
  """
  if op_type.startswith("ResourceApply") or "global_norm" in name:
    return "optimizer"
  if "gradient_tape/" in name or "gradients/" in name:
    return "backward"
  if op_type in ("IteratorGetNext", "IteratorGetNextAsOptional"):
    return "input (waiting for the next batch)"
  return "forward (and the loop's own ops)"


def xla_type(name):
  """`xla:` + the HLO instruction's name without its number."""
  name = _XLA_SUFFIX.sub("", name)
  return "xla:" + ("MatMul" if _XLA_MATMUL.match(name) else name)


def summarize(path):
  """The trace at `path` as a dict.

  Keys: `loops` (train_loop calls traced) and `window_ms` (their wall time),
  `op_ms` (all op time), `by_type` {op type: [ms, count]}, `by_phase`
  {phase: ms}.
  """
  space = xplane_pb2.XSpace()
  with open(path, "rb") as f:
    space.ParseFromString(f.read())
  by_type = collections.defaultdict(lambda: [0.0, 0])
  launches = collections.Counter()  # runs of each optimizer instruction
  by_phase = collections.defaultdict(float)
  window_ms, loops = 0.0, 0
  for plane in space.planes:
    if plane.name != "/host:CPU":
      continue
    hlo_op = {i for i, m in plane.stat_metadata.items() if m.name == "hlo_op"}
    module_stat = {
        i for i, m in plane.stat_metadata.items() if m.name == "hlo_module"
    }
    for line in plane.lines:
      # tf.data's threads tokenize and pack the next batches meanwhile.
      host_input = line.name.startswith("tf_data")
      for event in line.events:
        name = plane.event_metadata[event.metadata_id].name
        ms = event.duration_ps / 1e9
        if name == "train_loop":
          window_ms += ms
          loops += 1
        if any(stat.metadata_id in hlo_op for stat in event.stats):
          module = next(
              (stat.str_value or plane.stat_metadata[stat.ref_value].name
               for stat in event.stats
               if stat.metadata_id in module_stat), "")
          if OPTIMIZER_MODULE in module:
            # AdamW's kernel, one per variable (a few instructions each).
            op_type, where = "xla:" + OPTIMIZER_MODULE, "optimizer"
            launches[name] += 1
          else:
            op_type = xla_type(name)
            where = "XLA cluster (forward and backward)"
          if op_type[len("xla:"):] in _XLA_CONTAINERS:
            continue
        else:
          op = _OP.match(name)
          if not op or op.group(2) in _CONTAINERS:
            continue
          op_type = op.group(2)
          where = ("host input pipeline (tf.data threads, overlapped)"
                   if host_input else phase(op.group(1), op_type))
        by_type[op_type][0] += ms
        by_type[op_type][1] += 1
        by_phase[where] += ms
  if launches:
    # Each of the kernel's instructions runs once a launch: count launches.
    by_type["xla:" + OPTIMIZER_MODULE][1] = max(launches.values())
  return dict(
      trace=path,
      window_ms=window_ms,
      loops=loops,
      op_ms=sum(ms for ms, _ in by_type.values()),
      by_type=dict(by_type),
      by_phase=dict(by_phase))


def main(argv=None):
  parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
  parser.add_argument("--logdir", required=True)
  parser.add_argument("--top", type=int, default=15)
  parser.add_argument("--output", default="")
  args = parser.parse_args(argv)
  try:
    result = summarize(newest_trace(args.logdir))
  except (FileNotFoundError, OSError) as e:
    print(f"error: {e}", file=sys.stderr)
    sys.exit(2)
  total = result["op_ms"] or 1.0
  print(f"trace: {result['trace']}\n{result['loops']} train_loop call(s), "
        f"{result['window_ms']:.1f} ms wall; op time (all threads): "
        f"{result['op_ms']:.1f} ms\n")
  print("| phase | ms | share |\n| --- | --- | --- |")
  for name, ms in sorted(result["by_phase"].items(), key=lambda kv: -kv[1]):
    print(f"| {name} | {ms:.1f} | {ms / total:.1%} |")
  print("\n| op type | ms | share | count |\n| --- | --- | --- | --- |")
  ranked = sorted(result["by_type"].items(), key=lambda kv: -kv[1][0])
  for op_type, (ms, count) in ranked[:args.top]:
    print(f"| {op_type} | {ms:.1f} | {ms / total:.1%} | {count} |")
  rest = sum(ms for _, (ms, _) in ranked[args.top:])
  if rest:
    print(f"| ({len(ranked) - args.top} other types) | {rest:.1f} | "
          f"{rest / total:.1%} | |")
  if args.output:
    with open(args.output, "w") as f:
      json.dump(result, f, indent=2)


if __name__ == "__main__":
  main()
