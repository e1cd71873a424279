"""--precision=bfloat16: oneDNN's rewrite of the float32 graphs on CPU.

Runs in a fresh process: the rewrite is a process-wide grappler option that
must not leak into the other tests' exact float32 comparisons.
"""

import json
import os
import subprocess
import sys

from conftest import ROOT

_PROBE = r"""
import json, sys
import tensorflow as tf
from trainer import config as config_lib, distribute, train_lib
c = config_lib.Config(precision=sys.argv[1], jit_compile=False)
note = train_lib.apply_precision(c, distribute.build_strategy("", "auto"),
                                 False)
options = tf.config.optimizer.get_experimental_options()
x = tf.random.stateless_normal([64, 256], seed=[1, 2])
w = tf.random.stateless_normal([256, 64], seed=[3, 4])
y = tf.function(lambda x, w: tf.nn.softmax(tf.matmul(x, w)))(x, w)
exact = tf.nn.softmax(tf.matmul(x, w))
print(json.dumps(dict(
    note=note, rewrite=options.get("auto_mixed_precision_onednn_bfloat16",
                                   False),
    dtype=y.dtype.name, max_diff=float(tf.reduce_max(tf.abs(y - exact))),
    native=train_lib.cpu_has_native_bfloat16())))
"""


def _probe(tmp_path, precision):
  script = tmp_path / "probe.py"
  script.write_text(_PROBE)
  out = subprocess.run([sys.executable, str(script), precision],
                       cwd=ROOT,
                       env=dict(
                           os.environ,
                           PYTHONPATH=ROOT,
                           TF_CPP_MIN_LOG_LEVEL="2"),
                       capture_output=True,
                       text=True,
                       timeout=300,
                       check=True)
  return json.loads(out.stdout.strip().splitlines()[-1])


def test_float32_leaves_the_graphs_alone(tmp_path):
  result = _probe(tmp_path, "float32")
  assert result["note"] == "precision: float32"
  assert not result["rewrite"]
  assert result["max_diff"] == 0.0


def test_bfloat16_turns_on_the_onednn_rewrite_and_keeps_float32_outputs(
    tmp_path):
  result = _probe(tmp_path, "bfloat16")
  assert result["rewrite"] is True
  assert result["note"].startswith("precision: bfloat16 via oneDNN")
  assert result["dtype"] == "float32"
  # bfloat16 products carry ~3 significant digits; softmax outputs stay
  # probabilities within that error.
  assert result["max_diff"] < 0.05
  if not result["native"]:
    assert "expect no speedup" in result["note"]
