"""Files as people ship them: gzip, a byte-order mark, UTF-16, binary,
huge fields, one class only, a carve too small; and the real TFDS builder
of sentiment140, prepared offline from the shared sample."""

import csv
import gzip
import io
import json
import os
import zipfile
from unittest import mock

import pytest
import tensorflow_datasets as tfds

from conftest import SHARED_CSV
from conftest import run_module
from data_test import INJECTED
from data_test import make_fixture
from trainer.base import checks
from trainer.base import config as config_lib
from trainer.base import errors
from trainer.data import input_pipeline
from trainer.data import sources


def _source(path, label_map=None):
  return sources.FileSource(str(path), label_map or {0: 0, 1: 1})


def _counts(source):
  return input_pipeline.count(input_pipeline.Split("s", source))


@pytest.mark.parametrize("name", ["d.csv.gz", "d.csv"])
def test_gzip_streams_like_a_plain_file(tmp_path, name):
  """By its magic bytes, whatever the name; with 4 stripes too."""
  data, valid, _ = make_fixture("csv", header=["text", "label"])
  path = tmp_path / name
  path.write_bytes(gzip.compress(data))
  source = _source(path)
  assert source.layout().file_format == "csv"
  counts = _counts(source)
  assert counts["rows_used"] == len(valid)
  assert counts["rejected"] == INJECTED
  striped = input_pipeline.Split("s", source).records(stripes=4)
  assert sum(int(r["reason"]) == 0 for r in striped) == len(valid)


def test_a_utf8_byte_order_mark_is_skipped(tmp_path):
  for layout, header in (("csv", ["text", "label"]), ("sentiment140", None)):
    data, valid, _ = make_fixture(layout, header=header, inject=False)
    path = tmp_path / f"{layout}.csv"
    path.write_bytes(b"\xef\xbb\xbf" + data)
    label_map = {0: 0, 4: 1} if layout == "sentiment140" else None
    source = _source(path, label_map)
    assert source.layout().bom == 3
    counts = _counts(source)
    assert counts == dict(
        rows_read=len(valid), rows_used=len(valid), rejected={}), layout


@pytest.mark.parametrize("encoding,what", [
    ("utf-16", "is UTF-16 text; convert it to UTF-8"),
    ("utf-32", "is UTF-32 text; convert it to UTF-8"),
    ("utf-16-le", "looks like UTF-16 text without a byte-order mark"),
])
def test_utf16_and_utf32_are_refused_with_what_to_do(tmp_path, encoding, what):
  path = tmp_path / "d.csv"
  path.write_bytes("text,label\nhello,1\nbye,0\n".encode(encoding))
  with pytest.raises(errors.DataError) as info:
    _source(path).layout()
  assert str(info.value).startswith(f"{path} {what}")


def test_binary_and_misnamed_archives_are_refused(tmp_path):
  binary = tmp_path / "model.bin"
  binary.write_bytes(b"text,label\n" + bytes(range(256)) * 10)
  with pytest.raises(
      errors.DataError,
      match=r"is not a text file \(it holds "
      r"NUL bytes, first at byte 11\)"):
    _source(binary).layout()
  archive = tmp_path / "data.csv"
  with zipfile.ZipFile(archive, "w") as z:
    z.writestr("inner.csv", "text,label\nhi,1\n")
  with pytest.raises(errors.DataError, match="is a zip archive; name it"):
    _source(archive).layout()


def test_an_over_long_row_is_named_as_such_with_a_short_line(tmp_path):
  path = tmp_path / "d.csv"
  huge = "x" * (17 * 1024 * 1024)
  path.write_text(f"text,label\nfine,1\n{huge},0\nalso fine,0\n")
  counts = _counts(_source(path))
  assert counts == dict(
      rows_read=3, rows_used=2, rejected=dict(field_too_long=1))
  header = tmp_path / "h.csv"
  header.write_text(f"{huge},label\nhi,1\n")
  with pytest.raises(errors.DataError) as info:
    _source(header).layout()
  assert len(str(info.value)) < 400 and "and" not in str(info.value)[-5:]


def _run(tmp_path, csv_text, *flags):
  path = tmp_path / "d.csv"
  path.write_text(csv_text)
  return run_module("trainer.main", f"--train_file={path}",
                    f"--model_dir={tmp_path}/m", "--encoder_handle=demo",
                    "--preprocessor_handle=demo", *flags)


@pytest.mark.slow
def test_one_class_and_an_empty_carve_say_so(tmp_path):
  one_class = _run(tmp_path, "text,label\n" + "good,1\n" * 50)
  assert one_class.returncode == 2, one_class.stderr[-2000:]
  assert ("error: the training split has examples of class 1 only "
          in one_class.stderr)
  tiny = _run(tmp_path, "text,label\n" + "good,1\nbad,0\n" * 5)
  assert tiny.returncode == 2, tiny.stderr[-2000:]
  assert ("error: the validation split carved from " in tiny.stderr and
          "at --validation_fraction=0.05 holds no usable row" in tiny.stderr)
  assert "--label_map" not in tiny.stderr.splitlines()[-1]


def test_a_folder_or_a_file_in_the_wrong_place_is_named(tmp_path):
  with pytest.raises(errors.ConfigError, match="is a folder; give a CSV/TSV"):
    checks.validate(config_lib.Config(train_file=str(tmp_path)))
  afile = tmp_path / "f"
  afile.write_text("x")
  with pytest.raises(errors.ConfigError, match="is a file; give a folder"):
    checks.validate(config_lib.Config(model_dir=str(afile)))


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
def test_the_real_tfds_builder_prepares_sentiment140_offline(tmp_path):
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
  test = input_pipeline.count(input_pipeline.whole_split(c, tfds_split="test"))
  assert test["rows_read"] == 400
  with pytest.raises(errors.ConfigError) as info:
    input_pipeline.whole_split(c, tfds_split="validation")
  assert str(info.value) == ("--split='validation' is invalid: TFDS "
                             "sentiment140 has splits ['test', 'train']")
  result = run_module("trainer.main", "--tfds_name=sentiment140",
                      f"--data_dir={tmp_path / 'tfds'}",
                      "--encoder_handle=demo", "--preprocessor_handle=demo",
                      "--train_steps=4", "--steps_per_loop=2",
                      "--batch_size=16", "--seq_length=32", "--export=false",
                      f"--model_dir={tmp_path / 'run'}")
  assert result.returncode == 0, result.stderr[-3000:]
  summary = json.load(open(tmp_path / "run" / "summary.json"))
  read = sum(summary[f"data.{s}.rows_read"] for s in ("train", "validation"))
  assert read == 3600 and summary["data.test.rows_read"] == 400
  assert summary["final_step"] == 4
