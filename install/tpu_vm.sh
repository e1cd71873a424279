#!/usr/bin/env bash
# Cloud TPU VM: TensorFlow's TPU build, a libtpu it imports with, then the
# rest without the CPU `tensorflow` distribution. Run from a clone:
#
#   bash install/tpu_vm.sh
#
# tensorflow-tpu 2.20.0 is the newest on PyPI. Left to itself it takes the
# newest libtpu (0.0.52 on 2026-12-01), and then `import tensorflow` aborts
# the process ("ConfigureDistributedTpuOp_DoWork not available in this
# library"); 0.0.21 imports. Off a TPU VM (CI), set TPU_SKIP_MDS_QUERY=1
# before importing TensorFlow, or it queries the GCE metadata server for
# minutes.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
python="${PYTHON:-python3}"

"$python" -m pip install tensorflow-tpu==2.20.0 libtpu==0.0.21
PYTHON="$python" bash "$root/install/existing_tf.sh"
