"""trainer.foundation.buckets: --seq_buckets parsed, auto's choice, the
counts, the steps of an epoch and the log line, on histograms whose answers
are worked out by hand."""

import numpy as np
import pytest

from trainer.foundation import buckets
from trainer.foundation import errors


def _histogram(seq_length, rows_at):
  """int [seq_length + 1] with rows_at[length] examples at each length."""
  h = np.zeros(seq_length + 1, np.int64)
  for length, n in rows_at.items():
    h[length] = n
  return h


def test_parse_keeps_auto_and_ends_every_list_at_seq_length():
  assert buckets.parse("auto", 64) == buckets.AUTO
  assert buckets.parse(" AUTO ", 64) == buckets.AUTO
  assert buckets.parse("none", 64) == (64,)
  assert buckets.parse("16,32", 64) == (16, 32, 64)
  assert buckets.parse("16, 32 ,64", 64) == (16, 32, 64)
  assert buckets.parse("64", 64) == (64,)


@pytest.mark.parametrize("spec, says",
                         [("32,16", "must ascend"), ("16,16", "must ascend"),
                          ("2,16", "at least 3"),
                          ("16,128", "128 is over --seq_length=64"),
                          ("sixteen", "give auto, none or ascending lengths"),
                          ("", "give auto, none or ascending lengths"),
                          ("16,,32", "give auto, none or ascending lengths")])
def test_parse_refuses_a_bad_list_in_one_line_naming_the_flag(spec, says):
  with pytest.raises(errors.ConfigError) as e:
    buckets.parse(spec, 64)
  assert str(e.value).startswith("--seq_buckets=")
  assert says in str(e.value) and "\n" not in str(e.value)


def test_choose_gives_short_rows_their_own_bucket():
  # 100 rows of 5 tokens, 10 of 30: (8, 32) pads 100*8 + 10*32 = 1120
  # tokens against 110*32 = 3520 for one bucket; a bucket between them
  # would be empty.
  h = _histogram(32, {5: 100, 30: 10})
  assert buckets.choose(h, batch_size=2) == (8, 32)
  assert buckets.padded_tokens(h, (8, 32)) == 1120
  assert buckets.padded_tokens(h, (32,)) == 3520


def test_choose_never_makes_a_bucket_of_fewer_than_min_batches():
  # 5 long rows are fewer than MIN_BATCHES * batch = 8: they cannot have a
  # bucket of their own, so everything shares one.
  assert buckets.MIN_BATCHES == 4
  h = _histogram(32, {5: 100, 30: 5})
  assert buckets.choose(h, batch_size=2) == (32,)
  # With batch 1 (minimum 4) they can.
  assert buckets.choose(h, batch_size=1) == (8, 32)


def test_choose_spends_up_to_max_buckets_on_the_fewest_padded_tokens():
  h = _histogram(32, {8: 40, 16: 40, 24: 40, 32: 40})
  assert buckets.choose(h, batch_size=2) == (8, 16, 24, 32)
  # Two buckets: (8,32) 4160, (16,32) 3840, (24,32) 4160 padded tokens.
  assert buckets.choose(h, batch_size=2, max_buckets=2) == (16, 32)
  assert buckets.choose(h, batch_size=2, max_buckets=1) == (32,)


def test_choose_gives_short_texts_a_small_bucket_when_none_is_long():
  # Every text short at --seq_length=128: 300 rows of 6 tokens, 300 of 12
  # (batch 32: a bucket needs 128 rows). The last bucket stays, empty:
  # (8, 16, 128) pads 300*8 + 300*16 = 7200 tokens against 600*128.
  h = _histogram(128, {6: 300, 12: 300})
  assert buckets.choose(h, batch_size=32) == (8, 16, 128)
  assert buckets.padded_tokens(h, (8, 16, 128)) == 7200
  assert buckets.counts(h, (8, 16, 128)) == [300, 300, 0]
  assert buckets.steps_per_epoch([300, 300, 0], 32) == 9 + 9


def test_a_list_of_more_than_max_buckets_is_refused():
  spec = ",".join(str(8 * i) for i in range(1, 52))
  with pytest.raises(errors.ConfigError) as e:
    buckets.parse(spec, 408)
  assert str(e.value) == (
      "--seq_buckets='8,16,24,32,40,48,56,64,72,80,88,96,104,112,120,128,136"
      ",14...' is invalid: 51 lengths; give at most 8 (each is a program "
      "compiled and a batch shape kept apart)")
  assert len(buckets.parse("8,16,24,32,40,48,56,64", 64)) == 8


def test_choose_of_lengths_not_a_multiple_of_8_ends_at_seq_length():
  h = _histogram(20, {4: 50, 19: 50})
  assert buckets.choose(h, batch_size=4) == (8, 20)
  assert buckets.choose(_histogram(20, {}), batch_size=4) == (20,)


def test_counts_and_the_steps_of_an_epoch():
  h = _histogram(32, {3: 7, 8: 10, 9: 1, 16: 8, 31: 3})
  assert buckets.counts(h, (8, 16, 32)) == [17, 9, 3]
  assert buckets.counts(h, (32,)) == [29]
  # floor per bucket: 17 // 4 + 9 // 4 + 3 // 4 = 4 + 2 + 0.
  assert buckets.steps_per_epoch([17, 9, 3], 4) == 6
  assert buckets.steps_per_epoch([29], 4) == 7


def test_describe_gives_each_buckets_share_and_padding():
  # 8: 4 rows of 4 tokens (50% padding); 32: 4 rows of 16 (50%), batch 8:
  # both under one batch. Padded tokens 4*8 + 4*32 = 160 of 8*32 = 256.
  h = _histogram(32, {4: 4, 16: 4})
  assert buckets.describe(
      h, (8, 32), batch_size=8) == (
          "8: 50.0% of examples, 50% padding (fewer than a batch: never "
          "trained); 32: 50.0% of examples, 50% padding (fewer than a batch: "
          "never trained); 62% of the tokens of --seq_length=32 for all, 50% "
          "padding")
  assert buckets.describe(
      h, (32,), batch_size=2) == (
          "32: 100.0% of examples, 69% padding; 100% of the tokens of "
          "--seq_length=32 for all, 69% padding")
