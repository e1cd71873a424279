#!/usr/bin/env bash
# Installs this package into an environment that already has TensorFlow (a
# Cloud TPU VM's tensorflow-tpu, Colab, a Vertex AI container) without
# changing what is there. Run from a clone:
#
#   bash install/existing_tf.sh            # PYTHON=python3.11 to pick one
#
# - tensorflow-text and tf-keras (which tensorflow-hub needs) declare the CPU
#   `tensorflow` distribution as a dependency: pip would install it beside the
#   platform's, and the two overwrite each other's files. They go in with
#   --no-deps, at the versions tested with the TensorFlow found
#   (trainer/stack.py holds the table; it reads package metadata and never
#   imports TensorFlow).
# - Everything else is installed with every package already present pinned
#   to its version, so pip adds packages but never upgrades one the platform
#   has (it would, e.g., lift protobuf past what TF 2.17 declares).
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
python="${PYTHON:-python3}"

no_deps="$("$python" "$root/trainer/stack.py" companions)"
with_deps="$("$python" "$root/trainer/stack.py" companions --with-deps)"
pinned="$(mktemp)"
trap 'rm -f "$pinned"' EXIT
# Every installed package at its version, but the companions set here.
sed 's/==.*//; p; s/-/_/g' <<<"$no_deps"$'\n'"$with_deps" >"$pinned.names"
"$python" -m pip list --format=freeze 2>/dev/null |
  grep -E '^[A-Za-z0-9_.-]+==' |
  grep -v -i -f <(sed 's/.*/^&==/' "$pinned.names") >"$pinned" || true
rm -f "$pinned.names"

"$python" -m pip install --no-deps $no_deps
"$python" -m pip install -c "$pinned" $with_deps
# This package declares no TensorFlow (only its `tf` extra does).
"$python" -m pip install -c "$pinned" -e "$root"
"$python" "$root/trainer/stack.py" check
