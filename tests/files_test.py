"""Real files in every layout: detection, and injected defects that must
reconcile; files as people ship them (gzip, a byte-order mark, UTF-16,
binary, huge fields)."""

import collections
import gzip
import os
import re
import zipfile

import pytest

from conftest import SHARED_CSV
import testing
from trainer.data import counts as counts_lib
from trainer.data import files
from trainer.data import sources
from trainer.data import splits as splits_lib
from trainer.foundation import errors


def _expected_counts(encoding):
  want = dict(testing.INJECTED)
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
  counts = counts_lib.count(splits_lib.Split("s", source))
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
  data, valid, _ = testing.make_fixture(
      layout, header=header, encoding=encoding)
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
  assert testing.LONG in texts


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


@pytest.mark.skipif(
    not os.path.exists(SHARED_CSV),
    reason="../shared/data/sentiment140_sample.csv absent")
def test_shared_sentiment140_sample_end_to_end():
  source = sources.FileSource(SHARED_CSV, {0: 0, 4: 1})
  layout = source.layout()
  assert (layout.file_format, layout.has_header,
          layout.encoding) == ("sentiment140", True, "utf-8")
  counts = counts_lib.count(splits_lib.Split("all", source))
  assert counts["rows_read"] == 20_000
  assert counts["rows_used"] + sum(counts["rejected"].values()) == 20_000
  labels = collections.Counter(_used(source, "label"))
  identity = sources.FileSource(SHARED_CSV, {0: 0, 4: 4})
  raw = collections.Counter(_used(identity, "label"))
  assert raw == {0: 9942, 4: 10058}
  assert labels == {0: 9942, 1: 10058}


def _source(path, label_map=None):
  return sources.FileSource(str(path), label_map or {0: 0, 1: 1})


def _counts(source):
  """The counts of a whole source, its content digest (splits_test checks
  it) left out."""
  counts = counts_lib.count(splits_lib.Split("s", source))
  assert re.fullmatch("[0-9a-f]{16}", counts.pop("digest"))
  return counts


@pytest.mark.parametrize("name", ["d.csv.gz", "d.csv"])
def test_gzip_streams_like_a_plain_file(tmp_path, name):
  """By its magic bytes, whatever the name; with 4 stripes too."""
  data, valid, _ = testing.make_fixture("csv", header=["text", "label"])
  path = tmp_path / name
  path.write_bytes(gzip.compress(data))
  source = _source(path)
  assert source.layout().file_format == "csv"
  counts = _counts(source)
  assert counts["rows_used"] == len(valid)
  assert counts["rejected"] == testing.INJECTED
  striped = splits_lib.Split("s", source).records(stripes=4)
  assert sum(int(r["reason"]) == 0 for r in striped) == len(valid)


def test_a_utf8_byte_order_mark_is_skipped(tmp_path):
  for layout, header in (("csv", ["text", "label"]), ("sentiment140", None)):
    data, valid, _ = testing.make_fixture(layout, header=header, inject=False)
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


@pytest.mark.parametrize("quoting", ["csv", "none"])
def test_a_stray_nul_is_a_malformed_row_wherever_it_is(tmp_path, quoting):
  """One NUL byte in row 10 and one in row 190 of 200: both rows are
  counted as malformed and the other 198 read, the same rule at the start
  (inside the sniffed sample) and near the end."""
  rows = [f"row {i},{i % 2}\n" for i in range(200)]
  rows[10] = "row\x00 10,0\n"
  rows[190] = "row 190,\x000\n"
  path = tmp_path / "d.csv"
  path.write_text("text,label\n" + "".join(rows))
  counts = _counts(
      sources.FileSource(str(path), {
          0: 0,
          1: 1
      }, "csv", quoting=quoting))
  assert counts == dict(
      rows_read=200, rows_used=198, rejected=dict(malformed_row=2))
