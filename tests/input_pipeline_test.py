"""The batch streams the replicas receive: int32 of static shape, an order
that resumes exactly, every eval example once, mixed labels from a sorted
file."""

import numpy as np
import pytest
import tensorflow as tf
import tensorflow_hub as hub
# The process's global seed, to put back what an earlier test set.
from tensorflow.python.eager import context  # noqa: E501  pylint: disable=g-direct-tensorflow-import

import testing
from trainer.data import input_pipeline
from trainer.data import preprocessing
from trainer.data import sources
from trainer.data import splits as splits_lib
from trainer.foundation import buckets as buckets_lib
from trainer.foundation import config as config_lib
from trainer.foundation import layout as layout_lib
from trainer.foundation import shared_rows
from trainer.runtime import run_dir
from trainer.training import inputs


@pytest.fixture(scope="module")
def preprocessor(demo_paths):
  return hub.load(demo_paths["preprocessor"])


@pytest.mark.core
def test_distributed_train_data_is_int32_and_static(tmp_path, preprocessor):
  """One bucket: every feature fully static, [batch, group, seq_length] per
  replica; several: static but the length, which is a bucket's in each
  group."""
  testing.write_csv(tmp_path / "d.csv",
                    [(f"text {i}", i % 2) for i in range(40)])
  packer = preprocessing.make_packer(preprocessor, 16)
  strategy = tf.distribute.MirroredStrategy(["/cpu:0", "/cpu:1"])
  ds = input_pipeline.train_groups(
      testing.split(tmp_path / "d.csv"), input_pipeline.labelled(packer),
      testing.layout((16,), 8, 3), 5)
  input_pipeline.check_int_features(ds.element_spec)
  dist = strategy.experimental_distribute_dataset(ds)
  want = dict(label=[4, 3], meta=[4, 2])
  for key, spec in dist.element_spec.items():
    for per_replica in spec._value_specs:  # pylint: disable=protected-access
      assert per_replica.dtype == tf.int32, key
      assert per_replica.shape.as_list() == want.get(key, [4, 3, 16]), key
  group = next(iter(dist))
  assert set(group) == {
      "input_word_ids", "input_mask", "input_type_ids", "label", "meta"
  }
  bucketed = input_pipeline.train_groups(
      testing.split(tmp_path / "d.csv"), input_pipeline.labelled(packer),
      testing.layout((4, 16), 8, 3), 5)
  input_pipeline.check_int_features(bucketed.element_spec)
  assert bucketed.element_spec["input_word_ids"].shape.as_list() == [8, 3, None]
  with pytest.raises(TypeError, match="static batch and group sizes"):
    input_pipeline.check_int_features(
        dict(label=tf.TensorSpec([None, 3], tf.int32)))


@pytest.mark.parametrize("buckets", [(8,), (4, 8)])
def test_resumed_stream_equals_tail_of_uninterrupted_stream(
    tmp_path, preprocessor, buckets):
  testing.varied_csv(tmp_path / "d.csv", 30)
  packer = preprocessing.make_packer(preprocessor, 8)
  split = testing.split(tmp_path / "d.csv")
  spe = buckets_lib.steps_per_epoch(
      buckets_lib.counts(
          input_pipeline.length_histogram(split,
                                          input_pipeline.labelled(packer), 8),
          buckets), 4)
  assert spe == 7  # 30 // 4; bucketed: 5 // 4 + 25 // 4
  make = lambda start: input_pipeline.train_dataset(
      split,
      input_pipeline.labelled(packer),
      testing.layout(buckets, 4, 2),
      spe,
      start_step=start,
      seed=5,
      shuffle_buffer=10)
  full = [b["input_word_ids"].numpy() for b in make(0).take(3 * spe)]
  for start in (1, 9, spe):
    resumed = [b["input_word_ids"].numpy() for b in make(start).take(5)]
    for a, b in zip(full[start:], resumed):
      np.testing.assert_array_equal(a, b)
  # Each epoch uses a different order, and no epoch repeats a row; every
  # batch is of one bucket's length, and holds only rows that fit it.
  epoch0 = [tuple(r) for b in full[:spe] for r in b.tolist()]
  epoch1 = [tuple(r) for b in full[spe:2 * spe] for r in b.tolist()]
  assert epoch0 != epoch1
  assert len(set(epoch0)) == 4 * spe
  lengths = {b.shape[1] for b in full}
  assert lengths == set(buckets)
  for b in full:
    real = (b > 0).sum(axis=1)
    low = max([0] + [x for x in buckets if x < b.shape[1]])
    assert ((real > low) & (real <= b.shape[1])).all()


@pytest.mark.core
def test_the_order_ignores_the_process_global_seed(tmp_path, preprocessor):
  """Each window of --shuffle_buffer consecutive rows is permuted by
  stateless Philox draws of (seed, window): the same stream whatever
  tf.random.set_seed said (--deterministic calls it; so may a notebook).
  tf.data's buffer, which a run recorded before windows keeps, mixes that
  seed in: a pytest worker that had run a --deterministic run trained the
  two-worker test's reference on another order."""
  order = lambda seed: [
      int(x)
      for x in input_pipeline.shuffled(tf.data.Dataset.range(10), 4, seed)
  ]
  # Pinned: a run resumed on another TensorFlow (the TPU VM stack runs
  # this test too) must see the same order.
  assert order(5) == [2, 1, 3, 0, 5, 4, 7, 6, 8, 9]
  assert order(6) == [1, 2, 3, 0, 4, 7, 6, 5, 9, 8]
  testing.varied_csv(tmp_path / "d.csv", 40)
  packer = preprocessing.make_packer(preprocessor, 8)
  split = testing.split(tmp_path / "d.csv")

  def stream(shuffle, global_seed):
    tf.random.set_seed(global_seed)
    ds = input_pipeline.train_dataset(
        split,
        input_pipeline.labelled(packer),
        testing.layout((8,), 4, 8),
        10,
        seed=5,
        shuffle_buffer=16,
        shuffle=shuffle)
    return [b["input_word_ids"].numpy().tolist() for b in ds.take(10)]

  before = context.global_seed()  # what an earlier test of this worker set
  try:
    windows = [stream("windows", s) for s in (None, 1, 2)]
    buffer = [stream("buffer", s) for s in (1, 2)]
  finally:
    tf.random.set_seed(before)
  assert windows[0] == windows[1] == windows[2]
  assert buffer[0] != buffer[1]
  assert windows[0] != buffer[0]


def test_eval_counts_every_example_once(tmp_path, preprocessor):
  testing.varied_csv(tmp_path / "d.csv", 10)
  packer = preprocessing.make_packer(preprocessor, 8)
  batches = list(
      input_pipeline.eval_dataset(
          testing.split(tmp_path / "d.csv"), input_pipeline.labelled(packer),
          testing.layout((8,), 4, 2)))
  assert len(batches) == 3
  weights = np.concatenate([b["weight"].numpy() for b in batches])
  assert weights.tolist() == [1.0] * 10 + [0.0] * 2
  assert all(b["input_word_ids"].shape == (4, 8) for b in batches)
  # Buckets: each bucket's last batch is filled with weight 0, and every
  # row is counted once (in the bucket of its length).
  bucketed = list(
      input_pipeline.eval_dataset(
          testing.split(tmp_path / "d.csv"), input_pipeline.labelled(packer),
          testing.layout((4, 8), 4, 2)))
  real = [
      b["input_word_ids"].numpy()[b["weight"].numpy() > 0] for b in bucketed
  ]
  assert sum(len(r) for r in real) == 10
  texts = [testing.varied_text(i) for i in range(10)]
  everything = packer(tf.constant(texts))
  short = int((everything["input_mask"].numpy().sum(axis=1) <= 4).sum())
  assert sorted(b["input_word_ids"].shape[1]
                for b in bucketed) == sorted([4] * -(-short // 4) +
                                             [8] * -(-(10 - short) // 4))
  rows = sorted(tuple(r[r > 0]) for part in real for r in part)
  assert rows == sorted(
      tuple(r[r > 0]) for r in everything["input_word_ids"].numpy())


def test_resolve_rows_tells_rebuilt_without_rows_from_rows(
    tmp_path, preprocessor, demo_paths):
  """`inputs.resolve_rows`: () when auto finds nothing to save (texts that
  fill their rows: the encoder is rebuilt, no batch shares rows;
  config.json records []), auto's counts on short texts, and a record
  kept, fitted to the replicas: [] stays (), [3, 5] on 2 replicas is
  (4, 6)."""
  testing.write_csv(tmp_path / "long.csv",
                    [("a " * 40, i % 2) for i in range(64)])
  testing.varied_csv(tmp_path / "short.csv", 64)
  out = run_dir.locations(str(tmp_path / "run"))
  tf.io.gfile.makedirs(out.model_dir)
  packer = preprocessing.make_packer(preprocessor, 32)

  def resolve(texts, saved=None, multiple=1):
    c = config_lib.Config(
        preprocessor_handle=demo_paths["preprocessor"],
        seq_length=32,
        batch_size=16)
    return inputs.resolve_rows(c, testing.split(tmp_path / f"{texts}.csv"),
                               input_pipeline.labelled(packer), out, saved,
                               multiple)

  assert resolve("long") == ()
  auto = shared_rows.choose(
      input_pipeline.length_histogram(
          testing.split(tmp_path / "short.csv"),
          input_pipeline.labelled(packer), 32), 16, 1)
  assert auto and resolve("short") == auto
  assert resolve("short", dict(shared_rows=[])) == ()
  assert resolve("short", dict(shared_rows=[3, 5]), multiple=2) == (4, 6)


def test_length_histogram_counts_every_usable_row_by_its_length(
    tmp_path, preprocessor):
  testing.varied_csv(tmp_path / "d.csv", 24)
  packer = preprocessing.make_packer(preprocessor, 8)
  histogram = input_pipeline.length_histogram(
      testing.split(tmp_path / "d.csv"), input_pipeline.labelled(packer), 8)
  # [CLS], a piece per digit of i ("12" is "1", "##2"), i*7 % 5 pieces "a",
  # [SEP]; at most 8.
  want = np.bincount([min(2 + len(str(i)) + i * 7 % 5, 8) for i in range(24)],
                     minlength=9)
  assert histogram.tolist() == want.tolist()


def _first_batches_label_mix(path, stripes, demo_paths):
  preprocessor = hub.load(demo_paths["preprocessor"])
  packer = preprocessing.make_packer(preprocessor, 8)
  split = splits_lib.Split("train", sources.FileSource(str(path), {0: 0, 4: 1}))
  ds = input_pipeline.train_dataset(
      split,
      input_pipeline.labelled(packer),
      testing.layout((8,), 32, 8),
      100,
      shuffle_buffer=64,
      read_stripes=stripes)
  return [float(np.mean(b["label"].numpy())) for b in ds.take(20)]


def test_label_sorted_file_gives_mixed_batches(tmp_path, demo_paths):
  rows = [
      testing.line("sentiment140",
                   testing.fields("sentiment140", label, f"t {i}"))
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


def _bucket_positions(split, packer, buckets, group_size, spe, length):
  """Positions in epoch 0 of the batches of bucket `length`."""
  ds = input_pipeline.train_dataset(
      split,
      input_pipeline.labelled(packer),
      testing.layout(buckets, 4, group_size),
      spe,
      seed=3,
      shuffle_buffer=400)
  return [
      i for i, b in enumerate(ds.take(spe))
      if b["input_word_ids"].shape[1] == length
  ]


def test_small_training_groups_spread_every_bucket_over_the_epoch(
    tmp_path, preprocessor):
  """Groups of --steps_per_loop batches put a bucket with fewer batches
  than a group only at the epoch's end (an epoch ordered by length); the
  trainer's groups (`buckets.group_size`) spread it over the epoch."""
  testing.varied_csv(tmp_path / "d.csv", 400)
  packer = preprocessing.make_packer(preprocessor, 8)
  split = testing.split(tmp_path / "d.csv")
  buckets = (5, 8)
  counts = buckets_lib.counts(
      input_pipeline.length_histogram(split, input_pipeline.labelled(packer),
                                      8), buckets)
  # Rows of at most 5 pieces: 2 + digits + i*7 % 5 "a"s <= 5.
  assert counts == [102, 298]
  spe = buckets_lib.steps_per_epoch(counts, 4)
  assert spe == 25 + 74
  assert buckets_lib.group_size(50, buckets) == buckets_lib.GROUP_BATCHES == 5
  assert buckets_lib.group_size(50, (8,)) == 50
  # Not --steps_per_loop, which a resume may change: the group
  # (--bucket_group_batches) fixes the order.
  assert buckets_lib.group_size(3, buckets) == 5
  assert buckets_lib.group_size(3, buckets, chosen=1) == 1
  assert buckets_lib.group_size(3, (8,), chosen=1) == 3
  # A config.json from before the flag: the group the run ran with, which
  # a resume that leaves the flag at its default takes (run_defaults).
  old = dict(buckets=[5, 8], config=dict(steps_per_loop=2))
  assert layout_lib.recorded_config(old) == dict(
      steps_per_loop=2, bucket_group_batches=2)
  resumed, kept = config_lib.run_defaults(
      config_lib.Config(steps_per_loop=3), layout_lib.recorded_config(old))
  # (The record predates --shared_rows too: that run kept fixed shapes.)
  assert kept == ["shared_rows", "bucket_group_batches"]
  assert buckets_lib.group_size(resumed.steps_per_loop, buckets,
                                resumed.bucket_group_batches) == 2
  new = dict(buckets=[5, 8], config=dict(bucket_group_batches=1))
  assert layout_lib.recorded_config(new) == dict(bucket_group_batches=1)
  fixed = dict(buckets=[8], config=dict(steps_per_loop=2))
  assert layout_lib.recorded_config(fixed) == dict(steps_per_loop=2)
  assert layout_lib.saved_group_size(None) is None
  assert layout_lib.saved_group_size(dict(train_group_batches=5)) == 5
  assert layout_lib.saved_group_size(
      dict(buckets=[5, 8], config=dict(steps_per_loop=2))) == 2
  assert layout_lib.saved_group_size(
      dict(buckets=[5, 8], config=dict(steps_per_loop=50))) == 5
  assert layout_lib.saved_group_size(
      dict(buckets=[8], config=dict(steps_per_loop=2))) is None
  spread = _bucket_positions(split, packer, buckets, 5, spe, 5)
  whole = _bucket_positions(split, packer, buckets, 50, spe, 5)
  assert len(spread) == len(whole) == 25
  assert min(whole) >= 50  # all 25 after the first group of 50 long ones
  thirds = {p * 3 // spe for p in spread}
  assert thirds == {0, 1, 2}
  # Groups of one batch (--bucket_group_batches=1): the same 25 short
  # batches, the length changing far more often than the at most 2 x 5
  # times 5 groups of 5 allow.
  single = _bucket_positions(split, packer, buckets, 1, spe, 5)

  def switches(positions):
    kinds = [i in positions for i in range(spe)]
    return sum(a != b for a, b in zip(kinds, kinds[1:]))

  assert len(single) == 25
  assert switches(spread) <= 10 < switches(single)


def _examples(batch):
  """The (tokens, label) of each example of a batch, sorted: one a row, or
  each slot of shared rows (its tokens are its example id's)."""
  ids, labels = batch["input_word_ids"].numpy(), batch["label"].numpy()
  if "input_example_ids" not in batch:
    return sorted((tuple(r[r > 0]), int(y)) for r, y in zip(ids, labels))
  which, weight = batch["input_example_ids"].numpy(), batch["weight"].numpy()
  return sorted((tuple(ids[r][which[r] == s + 1]), int(labels[r, s]))
                for r, s in zip(*np.nonzero(weight)))


def test_shared_rows_hold_the_batches_of_fixed_shapes(tmp_path, preprocessor):
  """Every step of three epochs trains the examples (tokens and labels) of
  the fixed-shape step at its position, in 1 row of 20 a batch of 4 (3
  to 8 tokens each) or one example a row when 1 does not hold it; a resume
  sees the tail of the stream."""
  testing.varied_csv(tmp_path / "d.csv", 30)
  packer = preprocessing.make_packer(preprocessor, 20)
  split = testing.split(tmp_path / "d.csv")
  make = lambda start, rows: input_pipeline.train_dataset(
      split,
      input_pipeline.labelled(packer),
      testing.layout((20,), 4, 3, rows),
      7,
      start_step=start,
      seed=5,
      shuffle_buffer=10)
  fixed = [_examples(b) for b in make(0, None).take(21)]
  shared = list(make(0, (1,)).take(21))
  assert [_examples(b) for b in shared] == fixed
  assert {b["input_word_ids"].shape[0] for b in shared} == {1, 4}
  for start in (1, 8):
    resumed = [_examples(b) for b in make(start, (1,)).take(6)]
    assert resumed == fixed[start:start + 6]


def test_a_long_example_runs_one_a_row_and_is_never_split(
    tmp_path, preprocessor):
  """One text longer than --seq_length (truncated, as ever) with three
  short ones does not fit the 1 row a batch of 4 gets: that batch runs one
  example a row, its own group, and the next batch shares its row again;
  every example stays whole in one row."""
  testing.write_csv(tmp_path / "d.csv",
                    [("a " * 40, 1)] + [(str(i), 0) for i in range(1, 8)])
  packer = preprocessing.make_packer(preprocessor, 16)
  groups = list(
      input_pipeline.train_groups(
          testing.split(tmp_path / "d.csv"),
          input_pipeline.labelled(packer),
          testing.layout((16,), 4, 3, (1,)),
          2,
          shuffle_buffer=1).take(2))
  assert [(g["input_word_ids"].shape.as_list(), g["meta"][0].numpy().tolist())
          for g in groups] == [([4, 3, 16], [0, 1]), ([1, 3, 16], [1, 1])]
  long_row = groups[0]["input_example_ids"][0, 0].numpy()
  assert long_row.tolist() == [1] * 16  # truncated to 16, whole, alone
  assert groups[1]["weight"][0, 0].numpy().sum() == 4
