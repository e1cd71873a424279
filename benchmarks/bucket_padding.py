r"""Where the speed of length buckets comes from, and what their batches
hold: a run's training split measured under three ways of batching.

    python benchmarks/bucket_padding.py \
        --flagfile=flags/sentiment140_minilm_cpu.flags [--seq_buckets=auto]

Reads the training split the flags name through the trainer's own reader
and packer (at --seq_length; with --validation_fraction, the rows left to
train), and for the buckets (`auto`'s choice unless --seq_buckets names
them) prints the tokens per example a step computes:
  fixed shapes: --seq_length for every example;
  one-length batches (what --seq_buckets does): each example at the
    smallest bucket that holds it;
  mixed batches cut to their longest: the batches of fixed shapes (a random
    draw of --batch_size rows), each run at the smallest bucket that holds
    its longest row. Its expectation is exact (rows drawn with replacement):
    P(longest <= b) = F(b) ** batch, F the share of rows of length <= b.
The last keeps what each step sees exactly as under fixed shapes (a text's
outputs do not depend on its padding), so it costs no accuracy; its ratio to
fixed shapes is the speed it keeps (a step's cost is nearly linear in its
length at BERT's sizes). Then each bucket's share of the rows and mean label
(with two classes the share of class 1, for a regression the mean score):
whether a batch of one length is also a batch of one kind.
"""

import sys

from absl import app
from absl import flags
import numpy as np

from trainer.commands import cli
from trainer.data import input_pipeline
from trainer.data import preprocessing
from trainer.data import splits as splits_lib
from trainer.encoders import demo
from trainer.encoders import handles
from trainer.foundation import buckets as buckets_lib
from trainer.foundation import config as config_lib
from trainer.foundation import tasks
from trainer.training import inputs

FLAGS = flags.FLAGS


def tokens_per_example(histogram, buckets, batch_size):
  """{batching: mean tokens per example} for `histogram` (rows per packed
  length, index = length) in `buckets` (ascending, the last the longest
  length); `mixed_in_last`: the share of mixed batches in the last
  bucket."""
  histogram = np.asarray(histogram, np.float64)
  edges = np.asarray(buckets)
  at = edges[np.searchsorted(edges, np.arange(len(histogram)))]
  share = histogram / histogram.sum()
  below = np.array([share[:b + 1].sum() for b in edges])
  p_longest = np.diff(np.concatenate([[0.0], below**batch_size]))
  return dict(
      fixed=float(edges[-1]),
      one_length=float((share * at).sum()),
      mixed=float((p_longest * edges).sum()),
      mixed_in_last=float(1.0 -
                          below[-2]**batch_size) if len(edges) > 1 else 1.0)


def measure(c):
  """(lengths, labels) of the training rows of Config `c`, packed at
  --seq_length by its preprocessor."""
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  # The preprocessor's ops.  pylint: disable=g-import-not-at-top
  import tensorflow_text  # noqa: F401
  task = tasks.resolve(c)
  split = splits_lib.make_splits(task, inputs.data_spec(c, task))["train"]
  handle = c.preprocessor_handle
  if handle == config_lib.DEMO:
    handle = demo.ensure_assets(c.demo_cache_dir or None)["preprocessor"]
  pack = preprocessing.make_packer(
      handles.load_handle(handle, "preprocessor_handle"), c.seq_length)
  lengths, labels = [], []
  for texts, y in input_pipeline.usable_rows(split).batch(1024):
    lengths.append(tf.reduce_sum(pack(texts)["input_mask"], axis=1).numpy())
    labels.append(y.numpy())
  return np.concatenate(lengths), np.concatenate(labels)


def report(lengths, labels, buckets, batch_size, seq_length):
  histogram = np.bincount(lengths, minlength=seq_length + 1)
  t = tokens_per_example(histogram, buckets, batch_size)
  lines = [
      f"{len(lengths)} training rows, --seq_length={seq_length}, buckets "
      f"{', '.join(map(str, buckets))}, batch {batch_size}", "",
      "| batching | tokens per example | vs fixed shapes |",
      "| --- | --- | --- |"
  ]
  for name, key in (("fixed shapes", "fixed"),
                    ("one-length batches (--seq_buckets)", "one_length"),
                    ("mixed batches cut to their longest", "mixed")):
    lines.append(f"| {name} | {t[key]:.1f} | {t['fixed'] / t[key]:.2f}x |")
  lines += [
      "", f"Mixed batches that need the last bucket: {t['mixed_in_last']:.1%}",
      "", "| bucket | rows | mean label |", "| --- | --- | --- |"
  ]
  which = np.searchsorted(np.asarray(buckets), lengths)
  for i, b in enumerate(buckets):
    mine = which == i
    mean = f"{labels[mine].mean():.3f}" if mine.any() else "-"
    lines.append(f"| {b} | {mine.mean():.1%} | {mean} |")
  lines.append(f"| all | 100% | {labels.mean():.3f} |")
  return "\n".join(lines)


def main(argv):
  del argv
  c = cli.config_from_flags()
  lengths, labels = measure(c)
  spec = buckets_lib.parse(c.seq_buckets, c.seq_length)
  if spec == buckets_lib.AUTO:
    histogram = np.bincount(lengths, minlength=c.seq_length + 1)
    spec = buckets_lib.choose(histogram, c.batch_size)
  print(report(lengths, labels, tuple(spec), c.batch_size, c.seq_length))


if __name__ == "__main__":
  cli.define_config_flags(defaults=dict(seq_buckets="auto"))
  app.run(main, argv=sys.argv)
