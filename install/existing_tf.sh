#!/usr/bin/env bash
# Installs this package into an environment that already has TensorFlow (a
# Cloud TPU VM's tensorflow-tpu, Colab, a Vertex AI container) without
# changing the TensorFlow there or what it depends on. Run from a clone:
#
#   bash install/existing_tf.sh            # PYTHON=python3.11 to pick one
#
# - tensorflow-text and tf-keras (which tensorflow-hub needs) declare the CPU
#   `tensorflow` distribution as a dependency: pip would install it beside the
#   platform's, and the two overwrite each other's files. They go in with
#   --no-deps, at the versions tested with the TensorFlow found.
# - Everything else is installed with the packages TensorFlow requires
#   (protobuf, numpy, grpcio, keras, libtpu, ...) pinned to their installed
#   versions, so pip cannot lift one past what that TensorFlow declares (it
#   would, e.g., move protobuf past TF 2.17's < 5 for googleapis-common-protos).
# trainer/runtime/stack.py holds the table and computes the pins from package
# metadata; it never imports TensorFlow.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
python="${PYTHON:-python3}"
stack="$root/trainer/runtime/stack.py"

pinned="$(mktemp)"
trap 'rm -f "$pinned"' EXIT
no_deps="$("$python" "$stack" companions)"
with_deps="$("$python" "$stack" companions --with-deps)"
"$python" "$stack" pins >"$pinned"

"$python" -m pip install --no-deps $no_deps
"$python" -m pip install -c "$pinned" $with_deps
# This package declares no TensorFlow (only its `tf` extra does).
"$python" -m pip install -c "$pinned" -e "$root"
"$python" "$stack" check
