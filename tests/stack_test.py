"""The TensorFlow stack: what is installed, whether it fits, what to fix.

Table-driven over package sets as pip leaves them (metadata only), plus the
real environment the suite runs in: CI runs these on the 2.21 stack and on
the Cloud TPU VM stack of install/tpu_vm.sh.
"""

import os
import re
import subprocess
import sys

import pytest

from conftest import ROOT
from trainer.commands import doctor_checks as doctor
from trainer.runtime import stack

TF221 = {
    "tensorflow": "2.21.0",
    "tensorflow-text": "2.21.1",
    "tf-keras": "2.21.0",
    "tensorflow-hub": "0.16.1",
    "tensorboard": "2.21.0",
}
TPU220 = {
    "tensorflow-tpu": "2.20.0",
    "tensorflow-text": "2.20.1",
    "tf-keras": "2.20.1",
    "tensorflow-hub": "0.16.1",
    "tensorboard": "2.20.0",
    "libtpu": "0.0.21",
}


@pytest.mark.parametrize("found,expected", [
    (TF221, []),
    (TPU220, []),
    (dict(TPU220, tensorflow="2.20.0"), [
        "two TensorFlow distributions are installed (tensorflow, "
        "tensorflow-tpu), which overwrite each other's files; run `pip "
        "uninstall -y tensorflow tensorflow-tpu`, then reinstall "
        "tensorflow-tpu alone and its companions with --no-deps (install/ "
        "has the commands)"
    ]),
    (dict(TF221, tensorflow="2.16.2"), [
        "tensorflow 2.16.2 is not supported: this trainer supports "
        "TensorFlow 2.17-2.21 (README, \"Installing\"); install one of those"
    ]),
    (dict(TPU220, **{"tensorflow-text": "2.21.1"}), [
        "tensorflow-text 2.21.1 does not match tensorflow-tpu 2.20.0; "
        "install tensorflow-text==2.20.1 with --no-deps"
    ]),
    ({
        k: v for k, v in TF221.items() if k != "tf-keras"
    }, [
        "tf-keras is not installed; install tf-keras==2.21.0 (it must "
        "match TensorFlow 2.21) with --no-deps"
    ]),
    ({
        k: v for k, v in TF221.items() if k != "tensorboard"
    }, ["tensorboard is not installed; install tensorboard==2.21.0"]),
    ({}, [
        "TensorFlow is not installed; install this package with the `tf` "
        "extra (pip install 'bert-tpu-trainer[tf]'), or TensorFlow "
        "2.17-2.21 first"
    ]),
])
def test_problems_name_what_is_wrong_and_the_fix(found, expected):
  assert stack.problems(found) == expected


def test_libtpu_off_its_tested_version_is_a_note():
  assert stack.notes(TPU220) == []
  assert stack.notes(TF221) == []
  assert stack.notes(dict(TPU220, libtpu="0.0.52")) == [
      "libtpu 0.0.52 is not the version tested with tensorflow-tpu 2.20.0 "
      "(0.0.21); newer libtpu releases abort `import tensorflow`. If it "
      "does, install libtpu==0.0.21"
  ]


def test_companions_match_the_tensorflow_found():
  assert stack.companions({"tensorflow-tpu": "2.20.0"}) == [
      "tensorflow-text==2.20.1", "tf-keras==2.20.1", "tensorflow-hub==0.16.1"
  ]
  assert stack.companions({"tensorflow-tpu": "2.20.0"},
                          with_deps=True) == ["tensorboard==2.20.0"]
  assert stack.companions({"tensorflow": "2.17.1"}, with_deps=True) == [
      "tensorboard==2.17.1", "tensorflow-metadata==1.17.1"
  ]
  with pytest.raises(ValueError, match="two TensorFlow distributions"):
    stack.companions({"tensorflow": "2.21.0", "tensorflow-cpu": "2.21.0"})


@pytest.mark.core
def test_this_environment_is_a_supported_stack():
  """The stack the suite runs on passes its own check, as a script too
  (install/existing_tf.sh runs it so, before the package is installed)."""
  found = stack.installed()
  assert stack.problems(found) == [], stack.describe(found)
  script = os.path.join(ROOT, "trainer", "runtime", "stack.py")
  out = subprocess.run([sys.executable, script, "check"],
                       capture_output=True,
                       text=True,
                       check=False)
  assert out.returncode == 0, out.stderr
  assert out.stdout.splitlines()[0] == stack.describe(found)
  out = subprocess.run([sys.executable, script, "companions"],
                       capture_output=True,
                       text=True,
                       check=True)
  assert out.stdout.split() == stack.companions(found)


def test_doctor_reports_the_stack():
  ok = doctor.check_stack(TPU220)
  assert ok.ok and ok.line() == (
      "[ok]   stack: tensorflow-tpu 2.20.0, tensorflow-text 2.20.1, tf-keras "
      "2.20.1, tensorflow-hub 0.16.1, tensorboard 2.20.0, libtpu 0.0.21 "
      "(supported TensorFlow: 2.17-2.21)")
  both = doctor.check_stack(dict(TPU220, tensorflow="2.20.0"))
  assert not both.ok
  assert "two TensorFlow distributions are installed" in both.line()
  assert "libtpu 0.0.52 is not the version tested" in doctor.check_stack(
      dict(TPU220, libtpu="0.0.52")).line()


def test_readme_and_the_tpu_vm_script_name_the_same_versions():
  """README shows the TPU VM install; the script is what CI runs."""
  with open(os.path.join(ROOT, "install", "tpu_vm.sh")) as f:
    script = f.read()
  with open(os.path.join(ROOT, "README.md")) as f:
    readme = f.read()
  (tpu,
   libtpu), = re.findall(r"pip install tensorflow-tpu==(\S+) libtpu==(\S+)",
                         script)
  assert stack.LIBTPU[stack.minor(tpu)] == libtpu
  assert f"pip install tensorflow-tpu=={tpu} libtpu=={libtpu}" in readme
  assert "bash install/tpu_vm.sh" in readme
