"""Splits: which rows of which source train, validate and test; every row
counted by its fate, the bad-row limit, the seeded validation carve, TFDS
splits read whole."""

import dataclasses
import os
import re
import zipfile

import pytest
import tensorflow as tf
import tensorflow_datasets as tfds

from conftest import ROOT
from conftest import make_splits
import testing
from trainer.data import counts as counts_lib
from trainer.data import input_pipeline
from trainer.data import sources
from trainer.data import splits as splits_lib
from trainer.foundation import checks
from trainer.foundation import config as config_lib
from trainer.foundation import errors


def _count(split, **kwargs):
  """`count` without the content digest (tested on its own below)."""
  counts = counts_lib.count(split, **kwargs)
  assert re.fullmatch("[0-9a-f]{16}", counts.pop("digest"))
  return counts


def test_sentiment140_zip_gives_train_and_test(tmp_path):
  train, valid, _ = testing.make_fixture("sentiment140", encoding="iso-8859-1")
  test = b"".join(
      testing.line("sentiment140", testing.fields("sentiment140", p,
                                                  f"t{i}")).encode()
      for i, p in enumerate([0, 2, 4, 4, 2, 0, 4]))
  path = tmp_path / "trainingandtestdata.zip"
  with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as z:
    z.writestr("training.1600000.processed.noemoticon.csv", train)
    z.writestr("testdata.manual.2009.06.14.csv", test)
  c = config_lib.Config(train_file=str(path), validation_fraction=0.1)
  splits = make_splits(c)
  assert sorted(splits) == ["test", "train", "validation"]
  counts = {k: _count(v) for k, v in splits.items()}
  assert counts["test"] == dict(
      rows_read=7, rows_used=5, rejected=dict(label_not_in_map=2))
  used = counts["train"]["rows_used"] + counts["validation"]["rows_used"]
  assert used == len(valid)
  assert splits["train"].source.member.startswith("training")
  assert splits["train"].source.label_map == {"0": 0, "4": 1}


def test_too_many_bad_rows_stop_with_file_count_reason_and_lines(tmp_path):
  rows = [f"good {i},1" for i in range(90)] + [f"bad {i}" for i in range(10)]
  path = tmp_path / "d.csv"
  path.write_text("text,label\n" + "\n".join(rows) + "\n")
  split = splits_lib.Split("train", sources.FileSource(str(path), {0: 0, 1: 1}))
  counts = counts_lib.count(split)
  assert counts["rejected"] == {"malformed_row": 10}
  with pytest.raises(sources.DataError) as info:
    counts_lib.check_bad_fraction(split, counts, 0.01)
  message = str(info.value)
  assert str(path) in message
  assert "10 of 100 rows rejected (malformed_row: 10)" in message
  assert "--max_bad_fraction=0.01" in message
  assert "e.g. lines 92, 93, 94" in message
  counts_lib.check_bad_fraction(split, counts, 0.2)  # under the limit


@pytest.mark.parametrize("head", [2000, 40])
def test_count_splits_reads_a_split_shorter_than_its_head_once(
    tmp_path, monkeypatch, head):
  """Each split's head (its first `_HEAD_ROWS`) is counted first; a split
  the head held whole is not read again, a longer one is read whole after
  it. Either way the counts are a whole pass's, and too many bad rows past
  the head still stop the run."""
  monkeypatch.setattr(counts_lib, "_HEAD_ROWS", head)
  passes = []
  real_count = counts_lib.count

  def counted(split, limit=None, num_classes=0):
    passes.append((split.source.path[-5:], limit))
    return real_count(split, limit=limit, num_classes=num_classes)

  monkeypatch.setattr(counts_lib, "count", counted)
  short, long = tmp_path / "s.csv", tmp_path / "l.csv"
  testing.write_csv(short, [(f"short {i}", i % 2) for i in range(30)])
  # Rows outside the label map first: a head of 40 uses only 35 rows, and
  # still has not read the split whole.
  testing.write_csv(long, [("a label of 7", 7)] * 5 +
                    [(f"long {i}", int(i % 3 == 0)) for i in range(90)])
  splits = {"validation": testing.split(short), "train": testing.split(long)}
  got = counts_lib.count_splits(splits, 0.1, str(tmp_path / "stats.json"), 2)
  assert got == {
      name: real_count(s, num_classes=2) for name, s in splits.items()
  }
  assert got["train"]["rows_read"] == 95
  assert got["train"]["rejected"] == {"label_not_in_map": 5}
  assert got["train"]["classes"] == {"0": 60, "1": 30}
  assert got["validation"]["classes"] == {"0": 15, "1": 15}
  heads = [("s.csv", head), ("l.csv", head)]
  assert passes == heads + ([] if head == 2000 else [("l.csv", None)])
  # Cached: a second call reads nothing.
  read = len(passes)
  assert counts_lib.count_splits(splits, 0.1, str(tmp_path / "stats.json"),
                                 2) == got
  assert len(passes) == read
  # Too many broken rows stop the run: found by the whole pass when they
  # lie past the head (40), by the head when it holds them (2000).
  broken = tmp_path / "b.csv"
  broken.write_text("text,label\n" + "".join(f"ok {i},1\n" for i in range(45)) +
                    "".join(f"broken {i}\n" for i in range(50)))
  with pytest.raises(sources.DataError, match="50 of 95 rows rejected"):
    counts_lib.count_splits({"train": testing.split(broken)}, 0.1,
                            str(tmp_path / "broken.json"), 2)


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
    splits = make_splits(c)
    counts = {k: counts_lib.count(v) for k, v in splits.items()}
  assert counts["train"]["rows_used"] + counts["validation"]["rows_used"] == 60
  assert not counts["train"]["rejected"]


def test_a_tfds_split_by_name_is_read_whole():
  """`trainer.evaluate --tfds_name --split=NAME`: every row of the split,
  no carve (a carved validation would hold 10%)."""
  rows = dict(
      text=[f"review {i}" for i in range(60)] + [""], label=[0, 1] * 30 + [1])
  with _mock({"train": rows, "test": rows}):
    c = config_lib.Config(tfds_name="imdb_reviews")
    train = testing.tfds_split(c, "train")
    counts = _count(train, num_classes=2)
  assert train.describe() == "TFDS imdb_reviews split train"
  assert counts == dict(
      rows_read=61,
      rows_used=60,
      rejected={"empty_text": 1},
      classes={
          "0": 30,
          "1": 30
      })


def test_csv_rows_are_counted_by_reason(tmp_path):
  testing.write_csv(tmp_path / "d.csv", [("good", 1), ("fine", 0),
                                         ("neutral", 2), ("   ", 1),
                                         ("bad label", "x"), ("ok again", 1)])
  counts = _count(testing.split(tmp_path / "d.csv"))
  assert counts == dict(
      rows_read=6,
      rows_used=3,
      rejected=dict(label_not_in_map=1, empty_text=1, label_not_a_number=1))


def _mock_sentiment140(polarities):

  def as_dataset(self, split, **kwargs):
    del self, kwargs
    n = len(polarities) if str(split).startswith("train") else 4
    pol = polarities if n == len(polarities) else [0, 2, 4, 2]
    return tf.data.Dataset.from_tensor_slices(
        dict(
            text=[f"tweet {i}" for i in range(n)],
            polarity=pol,
            date=["d"] * n,
            query=["q"] * n,
            user=["u"] * n))

  return tfds.testing.mock_data(as_dataset_fn=as_dataset)


def test_tfds_sentiment140_maps_0_4_and_excludes_neutral():
  polarities = [0, 4, 2, 4, 0, 0, 2, 4] * 25
  with _mock_sentiment140(polarities):
    c = config_lib.Config(tfds_name="sentiment140", validation_fraction=0.2)
    split = make_splits(c)
    counts = {k: counts_lib.count(v) for k, v in split.items()}
    labels = [
        int(r["label"])
        for r in split["train"].records()
        if int(r["reason"]) == 0
    ]
  total = counts["train"]["rows_read"] + counts["validation"]["rows_read"]
  assert total == 200
  neutral = sum(counts[k]["rejected"].get("label_not_in_map", 0)
                for k in ("train", "validation"))
  assert neutral == 50
  assert 20 <= counts["validation"]["rows_read"] <= 60  # ~20% of 200
  assert set(labels) == {0, 1}
  assert sorted(counts) == ["train", "validation"]


def test_validation_carve_is_deterministic_and_disjoint(tmp_path):
  testing.write_csv(tmp_path / "d.csv",
                    [(f"row {i}", i % 2) for i in range(200)])
  src = sources.FileSource(str(tmp_path / "d.csv"), {0: 0, 1: 1}, "csv")
  parts = {
      h: [
          int(r["index"])
          for r in splits_lib.Split("s", src, h, 0.25, seed=3).records()
      ] for h in (False, True)
  }
  again = [
      int(r["index"])
      for r in splits_lib.Split("s", src, True, 0.25, seed=3).records()
  ]
  other_seed = [
      int(r["index"])
      for r in splits_lib.Split("s", src, True, 0.25, seed=4).records()
  ]
  assert parts[True] == again
  assert parts[True] != other_seed
  assert sorted(parts[True] + parts[False]) == list(range(200))
  assert 30 <= len(parts[True]) <= 70


def test_an_empty_second_text_is_rejected_with_its_own_reason(tmp_path):
  rows = [(f"question {i}", f"sentence {i}", i % 2) for i in range(20)]
  rows[3] = ("question 3", "  ", 1)
  rows[7] = ("", "sentence 7", 0)
  rows[9] = ("q", "", "maybe")
  path = testing.pair_file(tmp_path, rows)
  c = config_lib.Config(
      train_file=path, eval_file=path, text_column="q, s", quoting="none")
  split = make_splits(c)["validation"]
  counts = _count(split, num_classes=2)
  assert counts == dict(
      rows_read=20,
      rows_used=17,
      rejected=dict(empty_text_pair=1, empty_text=1, label_not_a_number=1),
      classes={
          "0": 10,
          "1": 7
      })
  texts, labels = next(iter(input_pipeline.usable_rows(split).batch(3)))
  assert texts.numpy().tolist() == [[b"question 0", b"sentence 0"],
                                    [b"question 1", b"sentence 1"],
                                    [b"question 2", b"sentence 2"]]
  assert labels.numpy().tolist() == [0, 1, 0]


def test_a_word_label_outside_the_map_is_a_broken_row(tmp_path):
  """With word labels any cell is a label, so one outside the map is a
  typo (or a map's), not a class left out on purpose."""
  rows = [(f"q {i}", f"s {i}", ("entailment", "neutral",
                                "contradiction")[i % 3]) for i in range(30)]
  path = testing.pair_file(tmp_path, rows)
  c = config_lib.Config(
      train_file=path,
      eval_file=path,
      text_column="q,s",
      quoting="none",
      num_classes=3,
      label_map="entailment:0,neutral:1,contradicton:2")
  split = make_splits(c)["validation"]
  counts = counts_lib.count(split, num_classes=3)
  assert counts["rejected"] == dict(label_not_in_map=10)
  with pytest.raises(errors.DataError, match="label_not_in_map: 10"):
    counts_lib.check_bad_fraction(split, counts, 0.01)


GLUE = os.path.join(os.path.dirname(ROOT), "shared", "data", "glue")


def _glue(task, name):
  path = os.path.join(GLUE, task, name)
  if not os.path.exists(path):
    pytest.skip(f"{path} is absent (../shared/data/glue)")
  return path


# (task, train file, flags, rows, classes or None for a regression)
GLUE_FILES = [
    ("MRPC", "train.tsv",
     dict(text_column="#1 String,#2 String", label_column="Quality"), 3667, {
         "0": 1194,
         "1": 2473
     }),
    ("RTE", "train.tsv",
     dict(
         text_column="sentence1,sentence2",
         label_map="not_entailment:0,entailment:1"), 2490, {
             "0": 1241,
             "1": 1249
         }),
    ("CoLA", "train.tsv", dict(header="no", text_column="3",
                               label_column="1"), 8551, {
                                   "0": 2528,
                                   "1": 6023
                               }),
    ("STS-B", "train.tsv",
     dict(
         text_column="sentence1,sentence2", label_column="score",
         num_classes=1), 5749, None),
    ("SST-2", "dev.tsv", dict(text_column="sentence"), 872, {
        "0": 428,
        "1": 444
    }),
]


@pytest.mark.parametrize("task,name,flags,rows,classes", GLUE_FILES)
def test_glue_files_are_read_as_distributed(task, name, flags, rows, classes):
  path = _glue(task, name)
  c = config_lib.Config(
      train_file=path, eval_file=path, quoting="none", **flags)
  split = make_splits(c)["validation"]
  counts = _count(split, num_classes=c.num_classes)
  want = dict(rows_read=rows, rows_used=rows, rejected={})
  if classes:
    want["classes"] = classes
  assert counts == want
  first = next(iter(input_pipeline.usable_rows(split)))
  if task == "MRPC":  # after the byte-order mark and the header
    assert first[0].numpy()[0].decode().startswith("Amrozi accused")
  if task == "STS-B":
    assert first[1].dtype == tf.float32 and first[1].numpy() == 5.0


def test_glue_tsv_quotes_are_plain_characters_only_with_quoting_none():
  path = _glue("MRPC", "train.tsv")
  flags = dict(
      train_file=path,
      eval_file=path,
      text_column="#1 String,#2 String",
      label_column="Quality")
  split = make_splits(config_lib.Config(**flags))["validation"]
  quoted = counts_lib.count(split)
  assert quoted["rows_used"] < 3668 and quoted["rejected"]["malformed_row"]
  with pytest.raises(Exception, match="needs --quoting=none"):
    counts_lib.check_bad_fraction(split, quoted, 0.01)


def test_validation_folds_partition_the_rows(tmp_path):
  """Folds 0..3 of one seed at 0.25 are disjoint and cover every row; each
  fold's remaining part is the other three folds; fold 0 is the carve of
  runs from before --validation_fold."""
  testing.write_csv(tmp_path / "d.csv",
                    [(f"row {i}", i % 2) for i in range(200)])
  src = sources.FileSource(str(tmp_path / "d.csv"), {0: 0, 1: 1}, "csv")

  def rows(holdout, fold):
    split = splits_lib.Split("s", src, holdout, 0.25, seed=3, fold=fold)
    return [int(r["index"]) for r in split.records()]

  folds = [rows(True, k) for k in range(4)]
  assert sorted(sum(folds, [])) == list(range(200))
  for k in range(4):
    others = sum((folds[j] for j in range(4) if j != k), [])
    assert sorted(rows(False, k)) == sorted(others)
  assert folds[0] == [
      int(r["index"])
      for r in splits_lib.Split("s", src, True, 0.25, seed=3).records()
  ]
  assert all(30 <= len(f) <= 70 for f in folds)


@pytest.mark.parametrize("fraction, fold, message", [
    (0.25, 4, "--validation_fold=4 is invalid: --validation_fraction=0.25 "
     "leaves folds 0..3"),
    (0.3, 3, "--validation_fold=3 is invalid: --validation_fraction=0.3 "
     "leaves folds 0..2"),
    (0.1, -1, "--validation_fold=-1 is invalid: must be >= 0"),
])
def test_a_fold_outside_the_fraction_is_refused(fraction, fold, message):
  c = config_lib.Config(validation_fraction=fraction, validation_fold=fold)
  with pytest.raises(errors.ConfigError) as e:
    checks.validate(c)
  assert str(e.value) == message


def test_the_last_fold_of_an_exact_partition_is_accepted():
  checks.validate(config_lib.Config(validation_fraction=0.1, validation_fold=9))


def test_the_digest_follows_content_not_the_file(tmp_path):
  """The digest of a split changes with any row's text or label, and with
  a row added; not with a copy of the file elsewhere (new time stamp) or
  with the chunking of the read."""
  rows = [(f"row {i}", i % 2) for i in range(50)]
  testing.write_csv(tmp_path / "a.csv", rows)

  def digest(name):
    return counts_lib.count(testing.split(tmp_path / name))["digest"]

  base = digest("a.csv")
  os.makedirs(tmp_path / "copy")
  testing.write_csv(tmp_path / "copy" / "a.csv", rows)
  assert digest("copy/a.csv") == base
  testing.write_csv(tmp_path / "b.csv", rows[:7] + [("row 7!", 1)] + rows[8:])
  testing.write_csv(tmp_path / "c.csv", rows[:7] + [("row 7", 0)] + rows[8:])
  testing.write_csv(tmp_path / "d.csv", rows + [("one more", 1)])
  assert len({base, digest("b.csv"), digest("c.csv"), digest("d.csv")}) == 4


def test_a_resume_on_other_data_is_refused_in_one_line():
  counts = dict(
      train=dict(rows_read=1500, rows_used=1400, digest="a" * 16, rejected={}),
      validation=dict(rows_read=150, rows_used=140, digest="b" * 16),
      test=dict(rows_read=9, rows_used=9, digest="c" * 16))
  saved = counts_lib.fingerprint(counts)
  assert sorted(saved) == ["train", "validation"]  # a test file may change
  counts_lib.check_same_data(saved, counts, "/runs/a")
  counts_lib.check_same_data(None, counts, "/runs/a")  # a run from before
  grown = dict(counts, train=dict(counts["train"], rows_read=3000))
  edited = dict(counts, validation=dict(counts["validation"], digest="d" * 16))
  with pytest.raises(errors.ConfigError) as e:
    counts_lib.check_same_data(saved, grown, "/runs/a")
  assert str(e.value) == (
      "--model_dir=/runs/a holds the checkpoints of a run trained on other "
      "data (train rows_read 1500 -> 3000): resuming would change its "
      "splits, order and validation set. Restore the data the run began "
      "with, or use a new --model_dir; nothing was changed")
  with pytest.raises(
      errors.ConfigError, match=r"\(validation digest b{16} "
      r"-> d{16}\)"):
    counts_lib.check_same_data(saved, edited, "/runs/a")


def test_a_fold_without_a_carve_is_refused(tmp_path):
  """--validation_fold picks a share of a carve: with --eval_file there is
  none, and every fold would be the same run."""
  testing.write_csv(tmp_path / "d.csv",
                    [(f"row {i}", i % 2) for i in range(20)])
  path = str(tmp_path / "d.csv")
  c = config_lib.Config(train_file=path, eval_file=path, validation_fold=1)
  with pytest.raises(errors.ConfigError) as e:
    make_splits(c)
  assert str(e.value) == (
      f"--validation_fold=1 is invalid: validation is {path}, not carved "
      "from the training data; leave it 0 (folds need --train_file without "
      "--eval_file, or a TFDS set without a validation split)")
  assert make_splits(dataclasses.replace(c,
                                         eval_file=""))["validation"].fold == 1
