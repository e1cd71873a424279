"""Helpers several test files share: data files as the trainer meets them
(CSV and TSV rows, sentiment140 lines with injected defects, sentence
pairs) and the splits that read them.

Test files import this module (`import testing`), never one another;
fixtures stay in conftest.py.
"""

import csv
import dataclasses
import hashlib
import io
import os

import numpy as np
import tensorflow as tf
import tensorflow_hub as hub

from conftest import invoke
from trainer.data import input_pipeline
from trainer.data import row_layout
from trainer.data import sources
from trainer.data import splits as splits_lib
from trainer.encoders import bert
from trainer.encoders import native
from trainer.foundation import layout as layout_lib
from trainer.foundation import tasks
from trainer.model import classifier
from trainer.model import optimization
from trainer.training import train_step

LONG = "word " * 20_000  # 100,000 characters

# What every fixture injects, by reason (sentiment140 latin-1 files cannot
# hold invalid bytes: every byte is a latin-1 character).
INJECTED = dict(
    malformed_row=5,
    label_not_a_number=4,
    label_not_in_map=6,
    empty_text=3,
    invalid_utf8=2)


def valid_texts(n):
  """`n` valid texts: entities, an accent, a LONG one, one with quotes."""
  texts = [
      f"tweet number {i} &quot;quoted&quot; &amp; caf\u00e9" for i in range(n)
  ]
  texts[7] = LONG
  texts[8] = 'she said "hi", then left'
  return texts


def fields(layout, label, text):
  """The fields of one row of `layout` ("sentiment140", "csv" or "tsv")."""
  if layout == "sentiment140":
    return [
        str(label), "1467810369", "Mon Apr 06 22:19:45 PDT 2009", "NO_QUERY",
        "user", text
    ]
  return [text, str(label)]


def line(layout, row):
  """One line of a `layout` file holding the fields `row`, quoted as shipped."""
  if layout == "sentiment140":
    return ",".join('"' + f.replace('"', '""') + '"' for f in row) + "\n"
  out = io.StringIO()
  csv.writer(
      out, delimiter="\t" if layout == "tsv" else ",",
      lineterminator="\n").writerow(row)
  return out.getvalue()


def make_fixture(layout,
                 n_valid=200,
                 header=None,
                 encoding="utf-8",
                 inject=True):
  """Returns (bytes, valid texts, labels) with INJECTED defects spread in."""
  pos, neg = (4, 0) if layout == "sentiment140" else (1, 0)
  valid = valid_texts(n_valid)
  lines, labels = [], []
  for i, text in enumerate(valid):
    label = pos if i % 2 else neg
    labels.append(label)
    lines.append(line(layout, fields(layout, label, text)).encode(encoding))
  if inject:
    bad = []
    for i in range(INJECTED["malformed_row"] - 2):
      bad.append(line(layout, fields(layout, neg, f"x{i}")[:-1] + ["", ""]))
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
          line(layout, fields(layout, "pos",
                              f"nan label {i}")).encode(encoding))
    for i in range(INJECTED["label_not_in_map"]):
      bad.append(
          line(layout, fields(layout, 2, f"neutral {i}")).encode(encoding))
    for text in ("", "   ", "\t "):
      bad.append(line(layout, fields(layout, pos, text)).encode(encoding))
    if encoding == "utf-8":
      for i in range(INJECTED["invalid_utf8"]):
        good = line(layout, fields(layout, pos, f"bad bytes {i} XX"))
        bad.append(good.encode().replace(b"XX", b"\xff\xfe"))
    # Spread the defects through the file, one every 20 valid rows.
    for k, b in enumerate(bad):
      lines.insert(10 + 21 * k, b)
  head = b""
  if header:
    head = line(layout, header).encode(encoding)
  return head + b"".join(lines), valid, labels


def tree_digest(folder):
  """{relative path: sha256} of every file under `folder`: a command that
  refuses must leave a run's folder with these files, byte for byte."""
  out = {}
  for root, _, names in os.walk(folder):
    for name in names:
      path = os.path.join(root, name)
      with open(path, "rb") as f:
        out[os.path.relpath(path,
                            folder)] = hashlib.sha256(f.read()).hexdigest()
  return out


def write_csv(path, rows):
  """Writes `rows` (text, label) to a CSV file at `path`, with a header."""
  with open(path, "w", newline="") as f:
    w = csv.writer(f)
    w.writerow(["text", "label"])
    w.writerows(rows)


def step_each(strategy, step, batches):
  """Runs the replica `step` (`train_step.make_train_step`'s) once on each
  of `batches`, each distributed whole over `strategy`; returns the global
  losses (summed over the replicas)."""

  @tf.function
  def run(batch):
    out = strategy.run(step, args=(batch,))
    return strategy.reduce(tf.distribute.ReduceOp.SUM, out["loss"], axis=None)

  losses = []
  for batch in batches:
    dist = iter(
        strategy.experimental_distribute_dataset(
            tf.data.Dataset.from_tensors(batch)))
    losses.append(float(run(next(dist))))
  return losses


def run_groups(strategy, loop, groups, steps):
  """Runs the compiled train `loop` over the distributed `groups`, a call
  per group, until `steps` steps are done; returns (each step's loss: its
  group's mean, the per-replica shape of each group's `input_word_ids`)."""
  losses, shapes = [], []
  for group in strategy.experimental_distribute_dataset(groups):
    count = int(train_step.group_count(strategy, group))
    ids = strategy.experimental_local_results(group["input_word_ids"])[0]
    shapes.append(tuple(ids.shape))
    mean = float(loop(group, tf.constant(0), tf.constant(count))[0])
    losses += [mean] * count
    if len(losses) >= steps:
      break
  return losses, shapes


def two_epochs(strategy,
               encoder_path,
               split,
               encode,
               rows,
               spe,
               num_classes=2,
               pooling="cls"):
  """Trains 2 epochs of `split` (`encode`d, batches of 6 at seq 16) one
  loop call per group, dropout off; in shared rows of row counts `rows`
  (the encoder rebuilt, as a run does), else fixed shapes; a tagger with
  `pooling="tokens"`. Returns (each step's loss, the weights, the loop, the
  row counts seen)."""
  groups = input_pipeline.train_groups(
      split, encode, layout((16,), 6, 2, rows), spe, seed=1, shuffle_buffer=64)
  with strategy.scope():
    encoder = hub.load(encoder_path)
    if rows:
      encoder = native.NativeEncoder.load(encoder)
    model = classifier.Classifier(
        encoder, num_classes, dropout_rate=0.0, seed=3, pooling=pooling)
    opt = optimization.AdamW(model.trainable_variables,
                             optimization.WarmupLinearDecay(1e-3, 2 * spe, 2))
  loop = train_step.make_train_loop(
      strategy,
      train_step.make_train_step(model, opt, 6, per_token=pooling == "tokens"))
  losses, seen = run_groups(strategy, loop, groups, 2 * spe)
  shapes = {s[0] * strategy.num_replicas_in_sync for s in seen}
  return losses, [v.numpy() for v in model.trainable_variables], loop, shapes


def split_of(source, name="train"):
  """A whole Split of `source`."""
  return splits_lib.Split(name, source)


def split(path, label_map=None):
  """The "train" Split of the text,label CSV file at `path` (labels 0, 1)."""
  return splits_lib.Split(
      "train", sources.FileSource(str(path), label_map or {
          0: 0,
          1: 1
      }, "csv"))


def tfds_split(c, name):
  """Every row of TFDS split `name` of the run of Config `c`."""
  return splits_lib.tfds_split(tasks.resolve(c), splits_lib.from_flags(c), name)


def pair_file(tmp_path, rows, name="pairs.tsv"):
  """A GLUE-like TSV (id, q, s, label) of `rows` (a, b, label); its path."""
  path = tmp_path / name
  path.write_text("id\tq\ts\tlabel\n" + "".join(
      f"{i}\t{a}\t{b}\t{y}\n" for i, (a, b, y) in enumerate(rows)))
  return str(path)


LONG_A = "the quick brown fox jumps over the lazy dog " * 6

LONG_B = "a great movie with a bad ending and good music " * 5

# Awkward pairs: one side empty after cleaning (a zero-width space and a
# BOM are removed by BERT's clean-up), both long, one long, both short.
PAIRS = [
    ("a fine day", "\u200b\ufeff"),
    ("\u200b", "the dog sat"),
    (LONG_A, LONG_B),
    (LONG_A, "short one"),
    ("short one", LONG_B),
    ("hello world", "good movie"),
]


def varied_text(i):
  """Row i: its number and 0 to 4 words "a": packed lengths 3 to 8 (the
  demo vocabulary has the digits and "a" as pieces), every row distinct."""
  return " ".join([str(i)] + ["a"] * (i * 7 % 5))


def varied_csv(path, n):
  """Writes `n` rows of `varied_text`, labels alternating, to `path`."""
  write_csv(path, [(varied_text(i), i % 2) for i in range(n)])


def layout(lengths, batch, group, rows=None):
  """A `Layout` of bucket `lengths` (the last the sequence length), `batch`
  examples a batch, training and eval alike in groups of `group` batches,
  in the row counts `rows` when given (shared rows)."""
  return layout_lib.Layout(
      seq_length=lengths[-1],
      batch_size=batch,
      lengths=tuple(lengths),
      ladder=None if rows is None else tuple(rows),
      train_group=group,
      eval_batch=batch,
      eval_ladder=tuple(rows or ()),
      eval_group=group)


def in_rows(batch, ladder):
  """A fixed-shape `batch` (packed inputs [b, seq_length], `label` [b]) in
  shared rows, as the input pipeline lays one out: first-fit decreasing
  into the smallest of `ladder` that holds it (one example a row when none
  does). Returns the row features of the one batch."""
  seq_length = int(batch["input_word_ids"].shape[1])
  one = {k: v[tf.newaxis] for k, v in batch.items()}
  one["length"] = row_layout.lengths_of(one)
  laid, _ = row_layout.block_layout(one, ladder, seq_length)
  return {k: v[0] for k, v in laid.items()}


def slot_order(rows):
  """int [examples]: each example's slot among `rows`' slots (row-major),
  in the batch's order (the rows' `label` must hold the example indices)."""
  weight = rows["weight"].numpy().reshape(-1)
  index = rows["label"].numpy().reshape(-1)
  where = np.full(int(weight.sum()), -1)
  where[index[weight > 0]] = np.nonzero(weight > 0)[0]
  return where


def encoder_copy(source, **changes):
  """A `native.NativeEncoder` computing as `source` does (its config with
  `changes`), on its own copy of the weights, its masks example-keyed
  (`hashed_dropout`) from a fresh generator (the same state in every copy:
  `BertEncoder` seeds it)."""
  config = dataclasses.replace(source.encoder.config, **changes)
  copy = bert.BertEncoder(config)
  for mine, theirs in zip(copy.variables, source.encoder.variables):
    mine.assign(theirs)
  return native.NativeEncoder(copy, hashed_dropout=True)


def without_dropout(source):
  """`encoder_copy` with dropout off."""
  return encoder_copy(source, dropout_rate=0.0)


def export_hf(model_dir, output_dir):
  """`trainer.export --format=huggingface` of run `model_dir` into
  `output_dir`, as the command runs it (in this process); returns
  output_dir."""
  result = invoke("export", f"--model_dir={model_dir}", "--format=huggingface",
                  f"--output_dir={output_dir}")
  assert result.returncode == 0, result.stderr[-3000:]
  assert result.stdout.strip().splitlines()[-1] == str(output_dir)
  return str(output_dir)
