"""Host preprocessing and the batch streams the replicas receive."""

import csv

import numpy as np
import pytest
import tensorflow as tf
import tensorflow_datasets as tfds
import tensorflow_hub as hub

from trainer.base import config as config_lib
from trainer.model import demo
from trainer.data import input_pipeline
from trainer.data import preprocessing
from trainer.data import sources

AWKWARD = [
    "The movie was GREAT!", "&quot;great&quot; &amp; fun", "zzz",
    "Café résumé 😀 @user http://t.co/x", "", "dinner " * 200
]


@pytest.fixture(scope="module")
def preprocessor(demo_paths):
  return hub.load(demo_paths["preprocessor"])


def _ids(*tokens):
  vocab = demo.vocabulary()
  return [vocab.index(t) for t in tokens]


@pytest.mark.core
def test_exact_token_ids(preprocessor):
  packer = preprocessing.make_packer(preprocessor, 12)
  out = packer(tf.constant(AWKWARD[:3]))
  cls, sep = _ids("[CLS]", "[SEP]")
  want = [
      [cls] + _ids("the", "movie", "was", "great", "!") + [sep],
      [cls] + _ids('"', "great", '"', "&", "fun") + [sep],
      [cls] + _ids("z", "##z", "##z") + [sep],
  ]
  want = [row + [0] * (12 - len(row)) for row in want]
  np.testing.assert_array_equal(out["input_word_ids"].numpy(), want)
  np.testing.assert_array_equal(out["input_mask"].numpy(),
                                (np.array(want) > 0).astype(np.int32))
  np.testing.assert_array_equal(out["input_type_ids"].numpy(), np.zeros([3,
                                                                         12]))


def test_long_text_is_truncated_with_sep_kept(preprocessor):
  out = preprocessing.make_packer(preprocessor, 8)(tf.constant([AWKWARD[5]]))
  dinner, = _ids("dinner")
  cls, sep = _ids("[CLS]", "[SEP]")
  assert out["input_word_ids"].numpy().tolist() == [[cls] + [dinner] * 6 +
                                                    [sep]]


@pytest.mark.core
def test_same_ids_eager_and_in_tf_data_batched_and_unbatched(preprocessor):
  packer = preprocessing.make_packer(preprocessor, 24)
  eager = packer(tf.constant(AWKWARD))["input_word_ids"].numpy()
  batched = tf.data.Dataset.from_tensor_slices(AWKWARD).batch(
      len(AWKWARD)).map(packer)
  in_data = next(iter(batched))["input_word_ids"].numpy()
  one_by_one = np.concatenate([
      b["input_word_ids"].numpy()
      for b in tf.data.Dataset.from_tensor_slices(AWKWARD).batch(1).map(packer)
  ])
  np.testing.assert_array_equal(eager, in_data)
  np.testing.assert_array_equal(eager, one_by_one)


def _write_csv(path, rows):
  with open(path, "w", newline="") as f:
    w = csv.writer(f)
    w.writerow(["text", "label"])
    w.writerows(rows)


def _split(path, label_map=None):
  return input_pipeline.Split(
      "train", sources.FileSource(str(path), label_map or {
          0: 0,
          1: 1
      }, "csv"))


@pytest.mark.core
def test_distributed_train_data_is_int32_and_static(tmp_path, preprocessor):
  _write_csv(tmp_path / "d.csv", [(f"text {i}", i % 2) for i in range(40)])
  packer = preprocessing.make_packer(preprocessor, 16)
  ds = input_pipeline.train_dataset(
      _split(tmp_path / "d.csv"), packer, 8, steps_per_epoch=5)
  input_pipeline.check_int_features(ds.element_spec)
  strategy = tf.distribute.MirroredStrategy(["/cpu:0", "/cpu:1"])
  dist = strategy.experimental_distribute_dataset(ds)
  for key, spec in dist.element_spec.items():
    for per_replica in spec._value_specs:  # pylint: disable=protected-access
      assert per_replica.dtype == tf.int32, key
      assert per_replica.shape.as_list() == ([4, 16]
                                             if key != "label" else [4]), key
  batch = next(iter(dist))
  keys = set(batch)
  assert keys == {"input_word_ids", "input_mask", "input_type_ids", "label"}


def test_resumed_stream_equals_tail_of_uninterrupted_stream(
    tmp_path, preprocessor):
  _write_csv(tmp_path / "d.csv", [(f"row {i}", i % 2) for i in range(30)])
  packer = preprocessing.make_packer(preprocessor, 8)
  split = _split(tmp_path / "d.csv")
  make = lambda start: input_pipeline.train_dataset(
      split,
      packer,
      4,
      steps_per_epoch=7,
      start_step=start,
      seed=5,
      shuffle_buffer=10)
  full = [b["input_word_ids"].numpy() for b in make(0).take(20)]
  resumed = [b["input_word_ids"].numpy() for b in make(9).take(11)]
  for a, b in zip(full[9:], resumed):
    np.testing.assert_array_equal(a, b)
  # Each epoch uses a different order, and no epoch repeats a row.
  epoch0 = [tuple(r) for r in np.concatenate(full[:7]).tolist()]
  epoch1 = [tuple(r) for r in np.concatenate(full[7:14]).tolist()]
  assert epoch0 != epoch1
  assert len(set(epoch0)) == 28


def test_eval_counts_every_example_once(tmp_path, preprocessor):
  _write_csv(tmp_path / "d.csv", [(f"row {i}", i % 2) for i in range(10)])
  packer = preprocessing.make_packer(preprocessor, 8)
  batches = list(
      input_pipeline.eval_dataset(_split(tmp_path / "d.csv"), packer, 4))
  assert len(batches) == 3
  weights = np.concatenate([b["weight"].numpy() for b in batches])
  assert weights.tolist() == [1.0] * 10 + [0.0] * 2
  assert all(b["input_word_ids"].shape == (4, 8) for b in batches)


def test_csv_rows_are_counted_by_reason(tmp_path):
  _write_csv(tmp_path / "d.csv", [("good", 1), ("fine", 0), ("neutral", 2),
                                  ("   ", 1), ("bad label", "x"),
                                  ("ok again", 1)])
  counts = input_pipeline.count(_split(tmp_path / "d.csv"))
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
    split = input_pipeline.make_splits(c)
    counts = {k: input_pipeline.count(v) for k, v in split.items()}
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
  _write_csv(tmp_path / "d.csv", [(f"row {i}", i % 2) for i in range(200)])
  src = sources.FileSource(str(tmp_path / "d.csv"), {0: 0, 1: 1}, "csv")
  parts = {
      h: [
          int(r["index"])
          for r in input_pipeline.Split("s", src, h, 0.25, seed=3).records()
      ] for h in (False, True)
  }
  again = [
      int(r["index"])
      for r in input_pipeline.Split("s", src, True, 0.25, seed=3).records()
  ]
  other_seed = [
      int(r["index"])
      for r in input_pipeline.Split("s", src, True, 0.25, seed=4).records()
  ]
  assert parts[True] == again
  assert parts[True] != other_seed
  assert sorted(parts[True] + parts[False]) == list(range(200))
  assert 30 <= len(parts[True]) <= 70
