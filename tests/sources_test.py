"""Record streams: the real TFDS builder of sentiment140, prepared offline
from the shared sample, and read by --tfds_name."""

import csv
import io
import json
import os
import zipfile
from unittest import mock

import pytest
import tensorflow_datasets as tfds

from conftest import SHARED_CSV
import testing
from trainer.data import counts as counts_lib
from trainer.foundation import config as config_lib
from trainer.foundation import errors


def _original_zip_layout(path):
  """The layout of Sentiment140's trainingandtestdata.zip (no header, every
  field quoted, ISO-8859-1), filled from the shared sample: 3,600 training
  rows and 400 test rows."""
  with open(SHARED_CSV, encoding="utf-8") as f:
    rows = list(csv.reader(f))[1:]

  def member(rows):
    out = io.StringIO()
    csv.writer(out, quoting=csv.QUOTE_ALL, lineterminator="\n").writerows(rows)
    return out.getvalue().encode("iso-8859-1", errors="replace")

  with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as z:
    z.writestr("training.1600000.processed.noemoticon.csv", member(rows[:3600]))
    z.writestr("testdata.manual.2009.06.14.csv", member(rows[3600:4000]))


@pytest.mark.slow
@pytest.mark.skipif(
    not os.path.exists(SHARED_CSV),
    reason="../shared/data/sentiment140_sample.csv absent")
def test_the_real_tfds_builder_prepares_sentiment140_offline(tmp_path, command):
  """TFDS's own sentiment140 builder and download_and_prepare; replaced:
  the HTTP fetch (a local copy of the original zip's layout) and the
  expected checksum of the original 81 MB zip, which the sample cannot
  match. Then the trainer reads it by --tfds_name."""
  # pylint: disable-next=g-import-not-at-top
  from tensorflow_datasets.core.download import downloader
  local = str(tmp_path / "trainingandtestdata.zip")
  _original_zip_layout(local)
  builder = tfds.builder("sentiment140", data_dir=str(tmp_path / "tfds"))
  fetched = []

  def fetch(self, url, destination_path, verify=True):
    del verify
    fetched.append(url)
    # pylint: disable-next=protected-access
    return self._sync_file_copy(local, destination_path)

  with mock.patch.object(downloader._Downloader, "_sync_download", fetch), \
       mock.patch.object(type(builder), "url_infos", None):
    builder.download_and_prepare()
  assert fetched == [
      "http://cs.stanford.edu/people/alecmgo/trainingandtestdata.zip"
  ]
  assert {
      k: v.num_examples for k, v in builder.info.splits.items()
  } == {
      "train": 3600,
      "test": 400
  }
  # `trainer.evaluate --tfds_name --split=NAME` reads a split whole.
  c = config_lib.Config(
      tfds_name="sentiment140", data_dir=str(tmp_path / "tfds"))
  test = counts_lib.count(testing.tfds_split(c, "test"))
  assert test["rows_read"] == 400
  with pytest.raises(errors.ConfigError) as info:
    testing.tfds_split(c, "validation")
  assert str(info.value) == ("--split='validation' is invalid: TFDS "
                             "sentiment140 has splits ['test', 'train']")
  result = command("main", "--tfds_name=sentiment140",
                   f"--data_dir={tmp_path / 'tfds'}", "--encoder_handle=demo",
                   "--preprocessor_handle=demo", "--train_steps=4",
                   "--steps_per_loop=2", "--batch_size=16", "--seq_length=32",
                   "--export=false", f"--model_dir={tmp_path / 'run'}")
  assert result.returncode == 0, result.stderr[-3000:]
  summary = json.load(open(tmp_path / "run" / "summary.json"))
  read = sum(summary[f"data.{s}.rows_read"] for s in ("train", "validation"))
  assert read == 3600 and summary["data.test.rows_read"] == 400
  assert summary["final_step"] == 4
