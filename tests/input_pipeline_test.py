"""The batch streams the replicas receive: int32 of static shape, an order
that resumes exactly, every eval example once, mixed labels from a sorted
file."""

import numpy as np
import pytest
import tensorflow as tf
import tensorflow_hub as hub

from files_test import _fields
from files_test import _line
from splits_test import _split
from splits_test import _write_csv
from trainer.data import input_pipeline
from trainer.data import preprocessing
from trainer.data import sources
from trainer.data import splits as splits_lib


@pytest.fixture(scope="module")
def preprocessor(demo_paths):
  return hub.load(demo_paths["preprocessor"])


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


def _first_batches_label_mix(path, stripes, demo_paths):
  preprocessor = hub.load(demo_paths["preprocessor"])
  packer = preprocessing.make_packer(preprocessor, 8)
  split = splits_lib.Split("train", sources.FileSource(str(path), {0: 0, 4: 1}))
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
