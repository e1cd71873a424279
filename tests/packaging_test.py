"""The package: a wheel and an sdist that install and run outside the
source tree."""

import os
import subprocess
import sys
import sysconfig

import pytest

from conftest import ROOT
from conftest import run_process
from conftest import without_project


@pytest.mark.slow
def test_wheel_installs_in_a_fresh_venv_and_runs(tmp_path):
  dist = tmp_path / "dist"
  subprocess.run([
      sys.executable, "-m", "build", "--sdist", "--wheel", "--no-isolation",
      "--outdir",
      str(dist), ROOT
  ],
                 check=True,
                 capture_output=True,
                 timeout=300)
  wheels = list(dist.glob("*.whl"))
  assert len(wheels) == 1 and list(dist.glob("*.tar.gz"))
  venv = tmp_path / "venv"
  subprocess.run(
      [sys.executable, "-m", "venv", str(venv)], check=True, timeout=300)
  py = str(venv / "bin" / "python")
  subprocess.run([
      py, "-m", "pip", "install", "--quiet", "--no-deps", "--no-index",
      str(wheels[0])
  ],
                 check=True,
                 timeout=300)
  # The dependencies (TensorFlow & co.) come from this environment, so the
  # test does not download 600 MB; the trainer itself only from the wheel.
  site = subprocess.run([
      py, "-c", "import sysconfig; print(sysconfig."
      "get_paths()['purelib'])"
  ],
                        check=True,
                        capture_output=True,
                        text=True).stdout.strip()
  with open(os.path.join(site, "deps.pth"), "w") as f:
    f.write(sysconfig.get_paths()["purelib"] + "\n")
  env = without_project()
  result = run_process([py, "-m", "trainer.main", "--helpfull"],
                       cwd=tmp_path,
                       env=env)
  # absl exits with 1 after printing help.
  assert result.returncode in (0, 1), result.stderr[-2000:]
  assert "Traceback" not in result.stderr
  assert "--encoder_handle" in result.stdout
  assert "--max_bad_fraction" in result.stdout
  where = run_process([py, "-c", "import trainer; print(trainer.__file__)"],
                      cwd=tmp_path,
                      env=env).stdout
  assert str(venv) in where
