r"""Whether two run folders trained the same model: a table.

    python benchmarks/compare_runs.py RUN_A RUN_B

Compares the newest checkpoint of each (every tensor, bit for bit: the
model, AdamW's slots, the data position, the step counters), their
summary.json (every key but the timing: `examples_per_second`,
`export_dir`) and their config.json (every key but `model_dir`). What a
refactor that must not change behaviour is held to: the same flags with
`--deterministic`, before and after, give "identical" on all three rows.
Exits 1 when anything differs.
"""

import argparse
import json
import os
import sys

import numpy as np

TIMING = ("examples_per_second", "export_dir")


def _tensors(model_dir):
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  path = tf.train.latest_checkpoint(os.path.join(model_dir, "checkpoints"))
  if not path:
    sys.exit(f"{model_dir} holds no checkpoint")
  reader = tf.train.load_checkpoint(path)
  names = reader.get_variable_to_shape_map()
  return os.path.basename(path), {k: reader.get_tensor(k) for k in names}


def _json(model_dir, name):
  with open(os.path.join(model_dir, name), encoding="utf-8") as f:
    return json.load(f)


def _differing(a, b, skip=()):
  """The keys whose values differ, a level down inside dicts ("config.seed");
  a key only one side has is marked "(only A)" or "(only B)": a field
  added since is not a change of what it held."""
  out = []
  for k in sorted(set(a) | set(b)):
    if k in skip or a.get(k) == b.get(k):
      continue
    if k not in b or k not in a:
      out.append(f"{k} (only {'A' if k in a else 'B'})")
    elif isinstance(a[k], dict) and isinstance(b[k], dict):
      out += [f"{k}.{inner}" for inner in _differing(a[k], b[k])]
    else:
      out.append(k)
  return out


def compare(run_a, run_b):
  """[(what, verdict)] of the two runs."""
  (name_a, a), (name_b, b) = _tensors(run_a), _tensors(run_b)
  if name_a != name_b or sorted(a) != sorted(b):
    tensors = f"other checkpoints: {name_a} ({len(a)}), {name_b} ({len(b)})"
  else:
    differ = [k for k in a if not np.array_equal(a[k], b[k])]
    tensors = (f"identical ({len(a)} tensors of {name_a})"
               if not differ else f"{len(differ)} differ, e.g. {differ[0]}")
  summary = _differing(
      _json(run_a, "summary.json"), _json(run_b, "summary.json"), TIMING)
  configs = [_json(r, "config.json") for r in (run_a, run_b)]
  for c in configs:
    c["config"].pop("model_dir", None)
  config = _differing(*configs)
  return [("checkpoint", tensors), ("summary.json", _verdict(summary)),
          ("config.json", _verdict(config))]


def _verdict(keys):
  """'identical', 'identical but fields only one run has: ...', or the
  keys that differ."""
  changed = [k for k in keys if not k.endswith(")")]
  if changed:
    return "differ: " + ", ".join(keys)
  return "identical" + (f" (fields only one run has: {', '.join(keys)})"
                        if keys else "")


def main():
  parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
  parser.add_argument("run_a")
  parser.add_argument("run_b")
  args = parser.parse_args()
  rows = compare(args.run_a, args.run_b)
  print("| what | verdict |\n| --- | --- |")
  for what, verdict in rows:
    print(f"| {what} | {verdict} |")
  return 0 if all(v.startswith("identical") for _, v in rows) else 1


if __name__ == "__main__":
  sys.exit(main())
