"""The TensorFlow stack: which distribution is installed, and what goes with it.

TensorFlow ships as several distributions that install the same `tensorflow`
package folder: `tensorflow` (CPU/GPU), `tensorflow-cpu` and `tensorflow-tpu`
(Cloud TPU VMs, with `libtpu`). Two of them in one environment overwrite each
other's files. tensorflow-text's ops are built against one TensorFlow minor
version (a mismatch fails at import with undefined symbols), and
tensorflow-hub needs tf-keras of TensorFlow's minor version.

This module reads package metadata only and never imports TensorFlow (the
TPU build's import queries the GCE metadata server for minutes off a TPU
VM), so it can check the stack before anything heavy starts. It imports
nothing of the trainer: `install/existing_tf.sh` runs it as a script to find
the companions of the TensorFlow it finds:

    python trainer/runtime/stack.py companions  # pip requirements, a line each
    python trainer/runtime/stack.py companions --with-deps
    python trainer/runtime/stack.py pins        # what TensorFlow needs, pinned
    python trainer/runtime/stack.py check       # problems, exit code 2 if any
"""

import importlib.metadata
import re
import sys

# Distributions that provide the `tensorflow` package.
TF_DISTRIBUTIONS = ("tensorflow", "tensorflow-cpu", "tensorflow-tpu",
                    "tensorflow-rocm", "tensorflow-macos", "intel-tensorflow",
                    "tensorflow-cpu-aws", "tf-nightly")

# The tested sets, by TensorFlow minor version (BUILD_NOTES.md, "Versions"):
# CI runs 2.21 and the 2.20 TPU VM stack; 2.17-2.19 (Vertex AI's prebuilt
# containers) passed the suite here once. Before 2.17 tensorflow-text and
# tf-keras for Python 3.12 do not exist and the suite was not run.
# 2.20 is the newest tensorflow-tpu on PyPI; its libtpu must be pinned: the
# newest libtpu (0.0.52) aborts `import tensorflow` with
# "ConfigureDistributedTpuOp_DoWork not available in this library".
COMPANIONS = {
    "2.17": {
        "tensorflow-text": "2.17.0",
        "tf-keras": "2.17.0",
        "tensorflow-hub": "0.16.1",
        "tensorboard": "2.17.1",
        # TF 2.17 needs protobuf < 5; tensorflow-metadata 1.18+ (which
        # tensorflow-datasets takes) declares protobuf >= 4.25.2 but imports
        # protobuf 5.26's runtime_version, so `import tensorflow_datasets`
        # fails. 1.17.1 works.
        "tensorflow-metadata": "1.17.1",
    },
    "2.18": {
        "tensorflow-text": "2.18.1",
        "tf-keras": "2.18.0",
        "tensorflow-hub": "0.16.1",
        "tensorboard": "2.18.0",
    },
    "2.19": {
        "tensorflow-text": "2.19.0",
        "tf-keras": "2.19.0",
        "tensorflow-hub": "0.16.1",
        "tensorboard": "2.19.0",
    },
    "2.20": {
        "tensorflow-text": "2.20.1",
        "tf-keras": "2.20.1",
        "tensorflow-hub": "0.16.1",
        "tensorboard": "2.20.0",
    },
    "2.21": {
        "tensorflow-text": "2.21.1",
        "tf-keras": "2.21.0",
        "tensorflow-hub": "0.16.1",
        "tensorboard": "2.21.0",
    },
}
LIBTPU = {"2.20": "0.0.21"}
# Companions that declare no TensorFlow: installed with their dependencies
# (the others declare the CPU `tensorflow` and go in with --no-deps).
WITH_DEPS = ("tensorboard", "tensorflow-metadata")
SUPPORTED = tuple(COMPANIONS)


def _version(name):
  try:
    return importlib.metadata.version(name)
  except importlib.metadata.PackageNotFoundError:
    return None


def installed():
  """{distribution: version} of the TensorFlow stack's packages present."""
  names = TF_DISTRIBUTIONS + ("tensorflow-text", "tf-keras", "tensorflow-hub",
                              "tensorboard", "libtpu")
  found = {name: _version(name) for name in names}
  return {name: v for name, v in found.items() if v}


def minor(version):
  """'2.20.1' -> '2.20'."""
  return ".".join(version.split(".")[:2])


def tensorflow_distributions(found):
  return [name for name in TF_DISTRIBUTIONS if name in found]


def _tensorflow_problem(found):
  """Why the TensorFlow distribution itself is unusable, or None."""
  dists = tensorflow_distributions(found)
  if not dists:
    return ("TensorFlow is not installed; install this package with the `tf` "
            "extra (pip install 'bert-tpu-trainer[tf]'), or TensorFlow "
            f"{SUPPORTED[0]}-{SUPPORTED[-1]} first")
  if len(dists) > 1:
    keep = "tensorflow-tpu" if "tensorflow-tpu" in dists else dists[0]
    return (f"two TensorFlow distributions are installed ({', '.join(dists)})"
            ", which overwrite each other's files; run `pip uninstall -y "
            f"{' '.join(dists)}`, then reinstall {keep} alone and its "
            "companions with --no-deps (install/ has the commands)")
  if minor(found[dists[0]]) not in SUPPORTED:
    return (f"{dists[0]} {found[dists[0]]} is not supported: this trainer "
            f"supports TensorFlow {SUPPORTED[0]}-{SUPPORTED[-1]} (README, "
            "\"Installing\"); install one of those")
  return None


def problems(found=None):
  """What is wrong with the stack: one line each (what, and the fix).

  Returns an empty list for a supported, consistent stack.
  """
  found = installed() if found is None else found
  wrong = _tensorflow_problem(found)
  if wrong:
    return [wrong]
  dists = tensorflow_distributions(found)
  tf_minor = minor(found[dists[0]])
  out = []
  for name in ("tensorflow-text", "tf-keras"):
    want = COMPANIONS[tf_minor][name]
    if name not in found:
      out.append(f"{name} is not installed; install {name}=={want} "
                 f"(it must match TensorFlow {tf_minor}) with --no-deps")
    elif minor(found[name]) != tf_minor:
      out.append(f"{name} {found[name]} does not match {dists[0]} "
                 f"{found[dists[0]]}; install {name}=={want} with --no-deps")
  for name in ("tensorflow-hub", "tensorboard"):
    if name not in found:
      out.append(f"{name} is not installed; install "
                 f"{name}=={COMPANIONS[tf_minor][name]}")
  return out


def notes(found=None):
  """Facts worth a line that are not errors (libtpu off its tested version)."""
  found = installed() if found is None else found
  dists = tensorflow_distributions(found)
  if dists != ["tensorflow-tpu"]:
    return []
  tested = LIBTPU.get(minor(found["tensorflow-tpu"]))
  have = found.get("libtpu")
  if have is None:
    return [
        "tensorflow-tpu without libtpu: no TPU can be used; install "
        f"libtpu=={tested}"
    ]
  if tested and have != tested:
    return [
        f"libtpu {have} is not the version tested with tensorflow-tpu "
        f"{found['tensorflow-tpu']} ({tested}); newer libtpu releases "
        "abort `import tensorflow`. If it does, install libtpu=="
        f"{tested}"
    ]
  return []


def describe(found=None):
  """One line: the distributions and versions found."""
  found = installed() if found is None else found
  return ", ".join(f"{name} {v}" for name, v in found.items()) or "nothing"


def companions(found=None, with_deps=False):
  """pip requirements matching the installed TensorFlow: those that declare
  TensorFlow (to install with --no-deps), or with `with_deps` the others.

  Raises:
    ValueError: no single supported TensorFlow distribution is installed.
  """
  found = installed() if found is None else found
  wrong = _tensorflow_problem(found)
  if wrong:
    raise ValueError(wrong)
  dist = tensorflow_distributions(found)[0]
  return [
      f"{name}=={v}" for name, v in COMPANIONS[minor(found[dist])].items()
      if (name in WITH_DEPS) == with_deps
  ]


# TensorFlow's requirements that an install may change: tensorflow-hub
# needs setuptools < 81 (it imports pkg_resources).
_UNPINNED = ("setuptools",)
_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*")
_VERSION = re.compile(r"^\d+(\.\d+)*((a|b|rc)\d+)?(\.post\d+)?(\.dev\d+)?"
                      r"(\+[A-Za-z0-9.]+)?$")


def _canonical(name):
  return re.sub(r"[-_.]+", "-", name).lower()


def pins(found=None):
  """`name==version` of the installed packages TensorFlow itself requires
  (protobuf, numpy, grpcio, keras, ...): the constraints under which an
  install adds packages around a platform's TensorFlow without changing
  the ones it depends on. Raises ValueError as `companions` does."""
  found = installed() if found is None else found
  wrong = _tensorflow_problem(found)
  if wrong:
    raise ValueError(wrong)
  dist = tensorflow_distributions(found)[0]
  skip = {_canonical(n) for n in _UNPINNED + tuple(COMPANIONS["2.21"])}
  out = set()
  for requirement in importlib.metadata.requires(dist) or []:
    name = _NAME.match(requirement)
    if not name or "extra ==" in requirement or _canonical(
        name.group()) in skip:
      continue
    version = _version(name.group())
    if version and _VERSION.match(version):
      out.add(f"{_canonical(name.group())}=={version}")
  return sorted(out)


def _main(argv):
  if argv[1:2] == ["companions"] and argv[2:] in ([], ["--with-deps"]):
    try:
      print("\n".join(companions(with_deps=bool(argv[2:]))))
    except ValueError as e:
      print(f"error: {e}", file=sys.stderr)
      return 2
    return 0
  if argv[1:] == ["pins"]:
    try:
      print("\n".join(pins()))
    except ValueError as e:
      print(f"error: {e}", file=sys.stderr)
      return 2
    return 0
  if argv[1:] == ["check"]:
    print(describe())
    for line in notes():
      print(f"note: {line}")
    wrong = problems()
    for line in wrong:
      print(f"error: {line}", file=sys.stderr)
    return 2 if wrong else 0
  print(
      f"usage: {argv[0]} companions [--with-deps] | pins | check",
      file=sys.stderr)
  return 2


if __name__ == "__main__":
  sys.exit(_main(sys.argv))
