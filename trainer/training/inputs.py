"""A run's data resolved: its splits, their row counts, and its length
buckets.

`splits_and_counts` reads the splits the flags name (the demo's text set
built if needed) and counts their rows once (cached in the run folder);
`resolve_buckets` turns --seq_buckets into the bucket lengths, `auto`
chosen from the measured lengths of the training split (also cached);
`shuffle` is how a resumed run's epochs are shuffled.
"""

from absl import logging

from trainer.data import counts as counts_lib
from trainer.data import input_pipeline
from trainer.data import splits as splits_lib
from trainer.encoders import demo
from trainer.foundation import buckets as buckets_lib
from trainer.foundation import errors
from trainer.runtime import run_dir


def data_spec(c, task):
  """The DataSpec of Config `c` (the demo's text set built if needed)."""
  demo_files = ()
  if task.source == "demo":
    paths = demo.ensure_assets(c.demo_cache_dir or None)
    demo_files = (paths["train"], paths["validation"])
  return splits_lib.from_flags(c, demo_files)


def splits_and_counts(c, task, out):
  """The splits and their row counts (cached in `out`)."""
  splits = splits_lib.make_splits(task, data_spec(c, task))
  counts = counts_lib.count_splits(splits, c.max_bad_fraction, out.data_stats,
                                   c.num_classes)
  counts_lib.check_counts(splits, counts, c.validation_fraction)
  return splits, counts


def length_histogram(c, split, packer, out):
  """The training rows per packed length (`input_pipeline.length_histogram`,
  cached in `out` like the counts: a resumed run skips the pass)."""
  key = repr((repr(split), split.source.stamp(), c.preprocessor_handle,
              c.demo_cache_dir, c.seq_length))
  cached = run_dir.read_json(out.length_stats)
  if cached and cached.get("key") == key:
    return cached["histogram"]
  histogram = input_pipeline.length_histogram(split, packer, c.seq_length)
  run_dir.write_json(out.length_stats,
                     dict(key=key, histogram=[int(n) for n in histogram]))
  return histogram


def resolve_buckets(c, split, packer, rows_used, out, saved=None):
  """(--seq_buckets resolved: the bucket lengths, the training examples in
  each): `auto` chosen from the measured lengths of the training split, or
  for a resume the buckets the run chose (`saved`, its config.json: a
  newer rule must not change a run's batches)."""
  spec = buckets_lib.parse(c.seq_buckets, c.seq_length)
  if spec == (c.seq_length,):
    return spec, [rows_used]
  histogram = length_histogram(c, split, packer, out)
  if spec == buckets_lib.AUTO and saved and saved.get("buckets"):
    spec = tuple(saved["buckets"])
    if spec == (c.seq_length,):
      return spec, [rows_used]
  chosen = buckets_lib.choose(
      histogram, c.batch_size) if spec == buckets_lib.AUTO else spec
  logging.info("Length buckets (--seq_buckets=%s): %s", c.seq_buckets,
               buckets_lib.describe(histogram, chosen, c.batch_size))
  return chosen, buckets_lib.counts(histogram, chosen)


def shuffle(saved, model_dir):
  """How the run resumed from config.json `saved` shuffles its epochs
  (`input_pipeline.SHUFFLE`): as the run did, tf.data's buffer when the
  record predates the key, so a resume sees the batches the run would have.
  Raises ConfigError for a way this trainer lacks."""
  way = saved.get("shuffle", input_pipeline.LEGACY_SHUFFLE)
  if way not in (input_pipeline.SHUFFLE, input_pipeline.LEGACY_SHUFFLE):
    raise errors.ConfigError(
        f"--model_dir={model_dir} holds a run shuffled by {way!r}, which "
        "this trainer does not know: resume it with the trainer that began "
        "it, or use a new --model_dir; nothing was changed")
  return way
