"""Shared rows: the flag, first-fit decreasing on hand-worked batches (NumPy
and in the graph, eagerly and inside tf.data), auto's choice of row counts,
and a batch laid out in rows token by token."""

import numpy as np
import pytest
import tensorflow as tf

from trainer.data import row_layout
from trainer.foundation import errors
from trainer.foundation import shared_rows


@pytest.mark.core
def test_parse_takes_auto_none_and_ascending_counts():
  assert shared_rows.parse(" AUTO ") == "auto"
  assert shared_rows.parse("none") == "none"
  assert shared_rows.parse(" 14 , 16 ") == (14, 16)
  for bad in ("14,12", "0,3", "a", "1,2,3,4,5,6,7,8", "3,3"):
    with pytest.raises(errors.ConfigError, match="--shared_rows="):
      shared_rows.parse(bad)


@pytest.mark.core
def test_a_ladder_must_fit_the_batch_and_the_replicas():
  shared_rows.check_ladder((4, 6), 16, 2)
  with pytest.raises(errors.ConfigError, match="not fewer than --batch_size"):
    shared_rows.check_ladder((4, 16), 16, 1)
  with pytest.raises(errors.ConfigError, match="use multiples of 2"):
    shared_rows.check_ladder((5,), 16, 2)
  # What the rows split over, as it is; no fix where none exists.
  cases = [
      (((5,), 16, 2, "--shared_rows", 2), "5 rows do not split over 1 "
       "replica x 2 accumulation steps; use multiples of 2"),
      (((5,), 16, 4, "--shared_rows", 2), "5 rows do not split over 2 "
       "replicas x 2 accumulation steps; use multiples of 4"),
      (((1,), 1, 1), "a batch of one example (--batch_size=1) has no other "
       "to share a row with; use --shared_rows=none (auto turns rows off by "
       "itself)"),
      (((2,), 2, 2), "--batch_size=2 over 2 replicas x 1 accumulation step is "
       "one example each, with no other to share a row with; use "
       "--shared_rows=none (auto turns rows off by itself)"),
  ]
  for args, why in cases:
    with pytest.raises(errors.ConfigError) as e:
      shared_rows.check_ladder(*args)
    assert str(e.value) == (
        f"--shared_rows={','.join(map(str, args[0]))} is invalid: {why}")


@pytest.mark.core
def test_first_fit_decreasing_on_hand_worked_batches():
  # Longest first: 4 opens row 0, 3 fits after it at 4, 2 no longer fits
  # (1 token left) and opens row 1.
  row, slot, offset = shared_rows.first_fit_decreasing([[3, 4, 2]], 8, 4)
  assert (row.tolist(), slot.tolist(),
          offset.tolist()) == ([[0, 0, 1]], [[1, 0, 0]], [[4, 0, 0]])
  # Ties keep the batch's order; a row takes at most `slots` examples; an
  # empty example (eval padding) goes nowhere.
  row, slot, offset = shared_rows.first_fit_decreasing(
      [[5, 5, 5], [1, 1, 1], [0, 3, 0]], 10, 2)
  assert row.tolist() == [[0, 0, 1], [0, 0, 1], [-1, 0, -1]]
  assert slot.tolist() == [[0, 1, 0], [0, 1, 0], [0, 0, 0]]
  assert offset.tolist() == [[0, 5, 0], [0, 1, 0], [0, 0, 0]]
  assert shared_rows.rows_needed([[3, 4, 2], [8, 8, 8]], 8,
                                 4).tolist() == [2, 3]
  shapes = [shared_rows.shape_of(n, (2, 3), 8) for n in (1, 2, 3, 4)]
  assert shapes == [2, 2, 3, 8]


@pytest.mark.core
def test_auto_chooses_row_counts_from_the_lengths():
  # Every example 4 of 8 tokens: two a row, so a batch of 4 needs 2 rows,
  # always; with 2 replicas x 2 accumulation steps the count is a
  # multiple of 4, which is the batch: nothing to save.
  halves = np.bincount([4], minlength=9) * 100
  assert shared_rows.choose(halves, 4) == (2,)
  assert shared_rows.choose(halves, 4, multiple=4) == ()
  assert shared_rows.describe(halves, (2,), 4) == (
      "a batch of 4 in 2 rows of 8 tokens (else 4 rows, one example each: "
      "0.0% of batches); expected 2.0 rows a batch, 2.0 examples a row, 0% "
      "padding (one example a row: 50%)")
  # Whole rows: nothing shares, one example a row stays.
  assert shared_rows.choose(np.bincount([8], minlength=9), 4) == ()
  # Half short (2 tokens), half whole: a batch of 8 needs 4 whole rows and
  # one more per four short ones: 5 to 8 rows; auto keeps up to 4 counts
  # and the draws that need 8 run one example a row.
  mixed = np.bincount([2, 8], minlength=9) * 50
  ladder = shared_rows.choose(mixed, 8)
  assert 0 < len(ladder) <= shared_rows.MAX_AUTO_SHAPES
  assert all(r < 8 for r in ladder) and list(ladder) == sorted(ladder)
  needed = shared_rows.simulate(mixed, 8, 8)
  assert shared_rows.expected_rows(needed, ladder, 8) < min(
      shared_rows.expected_rows(needed, (r,), 8) for r in range(1, 8))


@pytest.mark.core
def test_a_recorded_ladder_fits_another_replica_count():
  assert shared_rows.fit_to((5, 6, 7), 2, 16) == (6, 8)
  assert shared_rows.fit_to((15,), 4, 16) == ()
  assert shared_rows.for_batch((5, 6), 16, 64, 1) == (20, 24)
  assert shared_rows.group_size(50) == 8 and shared_rows.group_size(3) == 3


def test_the_graph_places_examples_as_the_reference_does():
  """Random batches, lengths 0..48 in rows of 48: the same placement from
  the NumPy reference, the graph eagerly, and the graph in tf.data."""
  lengths = np.random.default_rng(1).integers(0, 49, size=(64, 32))
  want = shared_rows.first_fit_decreasing(lengths, 48, 24)
  eager = row_layout.first_fit_decreasing(tf.constant(lengths), 48, 24)
  in_data = next(
      iter(
          tf.data.Dataset.from_tensors(tf.constant(lengths, tf.int32)).map(
              lambda x: row_layout.first_fit_decreasing(x, 48, 24))))
  for ours in (eager, in_data):
    for a, b in zip(want, ours):
      np.testing.assert_array_equal(a, b.numpy())


def _batch(ids, types, labels):
  return dict(
      input_word_ids=tf.constant([ids]),
      input_type_ids=tf.constant([types]),
      label=tf.constant([labels]),
      length=tf.constant([[sum(1 for t in r if t) for r in ids]]))


def test_a_batch_in_rows_token_by_token():
  """Three examples of 3, 4 (a pair) and 2 tokens in rows of 8: the 4 and
  the 3 share row 0, the 2 opens row 1; positions restart at each [CLS],
  type ids are the example's own, the slots carry labels and weights."""
  zeros = [0] * 4
  batch = _batch([[101, 5, 102, 0] + zeros, [101, 6, 102, 7] + zeros,
                  [101, 102, 0, 0] + zeros],
                 [[0] * 8, [0, 0, 0, 1] + zeros, [0] * 8], [1, 0, 1])
  got, sizes = row_layout.block_layout(batch, (2,), 8)
  assert sizes.numpy().tolist() == [2]
  want = dict(
      input_word_ids=[[101, 6, 102, 7, 101, 5, 102, 0],
                      [101, 102, 0, 0, 0, 0, 0, 0]],
      input_type_ids=[[0, 0, 0, 1, 0, 0, 0, 0], [0] * 8],
      input_example_ids=[[1, 1, 1, 1, 2, 2, 2, 0], [1, 1, 0, 0, 0, 0, 0, 0]],
      input_position_ids=[[0, 1, 2, 3, 0, 1, 2, 0], [0, 1, 0, 0, 0, 0, 0, 0]],
      input_example_starts=[[0, 4, 0, 0], [0, 0, 0, 0]],
      input_example_index=[[1, 0, 0, 0], [2, 0, 0, 0]],
      label=[[0, 1, 0, 0], [1, 0, 0, 0]],
      weight=[[1.0, 1.0, 0.0, 0.0], [1.0, 0.0, 0.0, 0.0]])
  assert {k: v[0].numpy().tolist() for k, v in got.items()} == want
  # The fallback shape (as many rows as examples): one example a row.
  fallback, sizes = row_layout.block_layout(batch, (1,), 8)
  assert sizes.numpy().tolist() == [3]
  assert fallback["input_example_ids"][0].numpy().tolist() == [
      [1, 1, 1, 0] + zeros, [1, 1, 1, 1] + zeros, [1, 1, 0, 0] + zeros
  ]
  assert fallback["weight"][0, :, 0].numpy().tolist() == [1.0, 1.0, 1.0]
