"""Real files in every layout, with injected defects that must reconcile."""

import collections
import csv
import io
import os
import re
import sys
import zipfile

import numpy as np
import pytest
import tensorflow as tf
import tensorflow_datasets as tfds
import tensorflow_hub as hub

from conftest import SHARED_CSV
from conftest import run_process
from conftest import with_project
from trainer.base import config as config_lib
from trainer.data import files
from trainer.data import input_pipeline
from trainer.data import preprocessing
from trainer.data import sources

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
LONG = "word " * 20_000  # 100,000 characters

# What every fixture injects, by reason (sentiment140 latin-1 files cannot
# hold invalid bytes: every byte is a latin-1 character).
INJECTED = dict(
    malformed_row=5,
    label_not_a_number=4,
    label_not_in_map=6,
    empty_text=3,
    invalid_utf8=2)


def _valid_texts(n):
  texts = [
      f"tweet number {i} &quot;quoted&quot; &amp; caf\u00e9" for i in range(n)
  ]
  texts[7] = LONG
  texts[8] = 'she said "hi", then left'
  return texts


def _fields(layout, label, text):
  if layout == "sentiment140":
    return [
        str(label), "1467810369", "Mon Apr 06 22:19:45 PDT 2009", "NO_QUERY",
        "user", text
    ]
  return [text, str(label)]


def _line(layout, fields):
  if layout == "sentiment140":
    return ",".join('"' + f.replace('"', '""') + '"' for f in fields) + "\n"
  out = io.StringIO()
  csv.writer(
      out, delimiter="\t" if layout == "tsv" else ",",
      lineterminator="\n").writerow(fields)
  return out.getvalue()


def make_fixture(layout,
                 n_valid=200,
                 header=None,
                 encoding="utf-8",
                 inject=True):
  """Returns (bytes, valid texts, labels) with INJECTED defects spread in."""
  pos, neg = (4, 0) if layout == "sentiment140" else (1, 0)
  valid = _valid_texts(n_valid)
  lines, labels = [], []
  for i, text in enumerate(valid):
    label = pos if i % 2 else neg
    labels.append(label)
    lines.append(_line(layout, _fields(layout, label, text)).encode(encoding))
  if inject:
    bad = []
    for i in range(INJECTED["malformed_row"] - 2):
      bad.append(_line(layout, _fields(layout, neg, f"x{i}")[:-1] + ["", ""]))
    # Unterminated quotes: the rest of the file must still be read.
    sep = "\t" if layout == "tsv" else ","
    if layout == "sentiment140":
      bad.append('"0","1","d","q","u","broken quote\n')
      bad.append('"4","1","d","q","u","also broken\n')
    else:
      bad.append(f'"broken quote{sep}{neg}\n')
      bad.append(f'"also broken{sep}{neg}\n')
    bad = [b.encode(encoding) for b in bad]
    for i in range(INJECTED["label_not_a_number"]):
      bad.append(
          _line(layout, _fields(layout, "pos",
                                f"nan label {i}")).encode(encoding))
    for i in range(INJECTED["label_not_in_map"]):
      bad.append(
          _line(layout, _fields(layout, 2, f"neutral {i}")).encode(encoding))
    for text in ("", "   ", "\t "):
      bad.append(_line(layout, _fields(layout, pos, text)).encode(encoding))
    if encoding == "utf-8":
      for i in range(INJECTED["invalid_utf8"]):
        good = _line(layout, _fields(layout, pos, f"bad bytes {i} XX"))
        bad.append(good.encode().replace(b"XX", b"\xff\xfe"))
    # Spread the defects through the file, one every 20 valid rows.
    for k, b in enumerate(bad):
      lines.insert(10 + 21 * k, b)
  head = b""
  if header:
    head = _line(layout, header).encode(encoding)
  return head + b"".join(lines), valid, labels


def _expected_counts(encoding):
  want = dict(INJECTED)
  if encoding != "utf-8":
    del want["invalid_utf8"]
  return want


def _used(source, field):
  """Values of `field` for the usable rows, read chunk by chunk."""
  out = []
  for chunk in source.chunks():
    mask = chunk["reason"].numpy() == 0
    values = chunk[field].numpy()[mask]
    out.extend((values[:, 0] if field == "text" else values).tolist())
  return out


def _read(source):
  counts = input_pipeline.count(input_pipeline.Split("s", source))
  return counts, [t.decode() for t in _used(source, "text")]


LAYOUTS = [
    # (name, layout, header, encoding, filename)
    ("sentiment140 original", "sentiment140", None, "iso-8859-1", "s.csv"),
    ("sentiment140 with header", "sentiment140", files.SENTIMENT140_HEADER,
     "utf-8", "s.csv"),
    ("csv", "csv", ["text", "label"], "utf-8", "d.csv"),
    ("tsv", "tsv", ["text", "label"], "utf-8", "d.tsv"),
]


@pytest.mark.parametrize("name,layout,header,encoding,filename", LAYOUTS)
def test_injected_defects_reconcile_and_valid_rows_arrive(
    tmp_path, name, layout, header, encoding, filename):
  data, valid, _ = make_fixture(layout, header=header, encoding=encoding)
  path = tmp_path / filename
  path.write_bytes(data)
  label_map = {0: 0, 4: 1} if layout == "sentiment140" else {0: 0, 1: 1}
  source = sources.FileSource(str(path), label_map)
  detected = source.layout()
  assert detected.file_format == layout, name
  assert detected.encoding == encoding
  assert detected.has_header == bool(header)
  counts, texts = _read(source)
  want = _expected_counts(encoding)
  assert counts["rejected"] == want, name
  assert counts["rows_used"] == len(valid)
  assert counts["rows_read"] == len(valid) + sum(want.values())
  assert texts == valid  # every valid row, in order, long text intact
  assert LONG in texts


def test_sentiment140_zip_gives_train_and_test(tmp_path):
  train, valid, _ = make_fixture("sentiment140", encoding="iso-8859-1")
  test = b"".join(
      _line("sentiment140", _fields("sentiment140", p, f"t{i}")).encode()
      for i, p in enumerate([0, 2, 4, 4, 2, 0, 4]))
  path = tmp_path / "trainingandtestdata.zip"
  with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as z:
    z.writestr("training.1600000.processed.noemoticon.csv", train)
    z.writestr("testdata.manual.2009.06.14.csv", test)
  c = config_lib.Config(train_file=str(path), validation_fraction=0.1)
  splits = input_pipeline.make_splits(c)
  assert sorted(splits) == ["test", "train", "validation"]
  counts = {k: input_pipeline.count(v) for k, v in splits.items()}
  assert counts["test"] == dict(
      rows_read=7, rows_used=5, rejected=dict(label_not_in_map=2))
  used = counts["train"]["rows_used"] + counts["validation"]["rows_used"]
  assert used == len(valid)
  assert splits["train"].source.member.startswith("training")
  assert splits["train"].source.label_map == {"0": 0, "4": 1}


def test_wrong_column_name_is_a_clear_error(tmp_path):
  path = tmp_path / "d.csv"
  path.write_text("sentence,label\nhello,1\n")
  with pytest.raises(
      sources.DataError,
      match=r"no column 'text' "
      r"\(--text_column\); the header has \['sentence'"):
    sources.FileSource(str(path), {0: 0, 1: 1}).layout()


def test_explicit_sentiment140_format_on_a_two_column_file_fails_fast(tmp_path):
  path = tmp_path / "d.csv"
  path.write_text("text,label\nhello,1\n")
  with pytest.raises(sources.DataError, match="expects six columns"):
    sources.FileSource(str(path), {}, "sentiment140").layout()


def test_too_many_bad_rows_stop_with_file_count_reason_and_lines(tmp_path):
  rows = [f"good {i},1" for i in range(90)] + [f"bad {i}" for i in range(10)]
  path = tmp_path / "d.csv"
  path.write_text("text,label\n" + "\n".join(rows) + "\n")
  split = input_pipeline.Split("train",
                               sources.FileSource(str(path), {
                                   0: 0,
                                   1: 1
                               }))
  counts = input_pipeline.count(split)
  assert counts["rejected"] == {"malformed_row": 10}
  with pytest.raises(sources.DataError) as info:
    input_pipeline.check_bad_fraction(split, counts, 0.01)
  message = str(info.value)
  assert str(path) in message
  assert "10 of 100 rows rejected (malformed_row: 10)" in message
  assert "--max_bad_fraction=0.01" in message
  assert "e.g. lines 92, 93, 94" in message
  input_pipeline.check_bad_fraction(split, counts, 0.2)  # under the limit


@pytest.mark.slow
def test_main_stops_on_a_wrong_file_format(tmp_path):
  path = tmp_path / "d.csv"
  path.write_text("text,label\n" +
                  "".join(f"row {i},{i % 2}\n" for i in range(50)))
  result = run_process([
      sys.executable, "-m", "trainer.main", f"--train_file={path}",
      "--label_column=0", f"--model_dir={tmp_path}/m", "--encoder_handle=demo",
      "--preprocessor_handle=demo"
  ],
                       env=with_project(TF_CPP_MIN_LOG_LEVEL="2"))
  assert result.returncode == 2, result.stderr[-2000:]
  # The train part of the carve (95% of 50 rows, seeded) is checked first.
  assert re.search(
      r"d\.csv \(remaining 95%\): (\d+) of \1 rows rejected "
      r"\(label_not_a_number: \1\)", result.stderr), result.stderr
  assert "most are label_not_a_number, e.g. lines 2, 3, 4" in result.stderr
  assert "Traceback" not in result.stderr


def _first_batches_label_mix(path, stripes, demo_paths):
  preprocessor = hub.load(demo_paths["preprocessor"])
  packer = preprocessing.make_packer(preprocessor, 8)
  split = input_pipeline.Split("train",
                               sources.FileSource(str(path), {
                                   0: 0,
                                   4: 1
                               }))
  ds = input_pipeline.train_dataset(
      split,
      packer,
      32,
      steps_per_epoch=100,
      shuffle_buffer=64,
      read_stripes=stripes)
  return [float(np.mean(b["label"].numpy())) for b in ds.take(20)]


def test_label_sorted_file_gives_mixed_batches(tmp_path, demo_paths):
  rows = [
      _line("sentiment140", _fields("sentiment140", label, f"t {i}"))
      for label in (0, 4)
      for i in range(2000)
  ]
  path = tmp_path / "sorted.csv"
  path.write_bytes("".join(rows).encode("latin-1"))
  mixed = _first_batches_label_mix(path, 16, demo_paths)
  assert all(0.2 <= m <= 0.8 for m in mixed), mixed
  # Control: one reader and a small buffer see only the first label.
  sorted_only = _first_batches_label_mix(path, 1, demo_paths)
  assert all(m == 0.0 for m in sorted_only), sorted_only


@pytest.mark.skipif(
    not os.path.exists(SHARED_CSV),
    reason="../shared/data/sentiment140_sample.csv absent")
def test_shared_sentiment140_sample_end_to_end():
  source = sources.FileSource(SHARED_CSV, {0: 0, 4: 1})
  layout = source.layout()
  assert (layout.file_format, layout.has_header,
          layout.encoding) == ("sentiment140", True, "utf-8")
  counts = input_pipeline.count(input_pipeline.Split("all", source))
  assert counts["rows_read"] == 20_000
  assert counts["rows_used"] + sum(counts["rejected"].values()) == 20_000
  labels = collections.Counter(_used(source, "label"))
  identity = sources.FileSource(SHARED_CSV, {0: 0, 4: 4})
  raw = collections.Counter(_used(identity, "label"))
  assert raw == {0: 9942, 4: 10058}
  assert labels == {0: 9942, 1: 10058}


def _mock(rows_by_split):

  def as_dataset(self, split, **kwargs):
    del self, kwargs
    return tf.data.Dataset.from_tensor_slices(rows_by_split[str(split)])

  return tfds.testing.mock_data(as_dataset_fn=as_dataset)


def test_tfds_imdb_reviews_default_keys_and_identity_labels():
  rows = dict(
      text=[f"review {i}" for i in range(60)], label=[i % 2 for i in range(60)])
  with _mock({"train": rows, "test": rows}):
    c = config_lib.Config(tfds_name="imdb_reviews")
    splits = input_pipeline.make_splits(c)
    counts = {k: input_pipeline.count(v) for k, v in splits.items()}
  assert counts["train"]["rows_used"] + counts["validation"]["rows_used"] == 60
  assert not counts["train"]["rejected"]


def test_a_tfds_split_by_name_is_read_whole():
  """`trainer.evaluate --tfds_name --split=NAME`: every row of the split,
  no carve (a carved validation would hold 10%)."""
  rows = dict(
      text=[f"review {i}" for i in range(60)] + [""], label=[0, 1] * 30 + [1])
  with _mock({"train": rows, "test": rows}):
    c = config_lib.Config(tfds_name="imdb_reviews")
    train = input_pipeline.whole_split(c, tfds_split="train")
    counts = input_pipeline.count(train, num_classes=2)
  assert train.describe() == "TFDS imdb_reviews split train"
  assert counts == dict(
      rows_read=61,
      rows_used=60,
      rejected={"empty_text": 1},
      classes={
          "0": 30,
          "1": 30
      })
