"""A run's data resolved: its splits, their row counts, its batch layout.

`resolve_data` resolves it all into a `RunData`: `splits_and_counts` reads
the splits the flags name (the demo's text set built if needed) and counts
their rows once (cached in the run folder);
`rows_encoder` decides whether the encoder takes shared rows;
`resolve_layout` turns --seq_buckets and --shared_rows into the run's
`Layout` (`resolve_buckets`: the bucket lengths, `auto` chosen from the
measured lengths of the training split, also cached; `resolve_rows`: the
row counts); `shuffle` is how a resumed run's epochs are shuffled.
"""

import dataclasses

from absl import logging

from trainer.data import counts as counts_lib
from trainer.data import input_pipeline
from trainer.data import preprocessing
from trainer.data import splits as splits_lib
from trainer.data import tagged_sources
from trainer.data import word_pieces
from trainer.encoders import demo
from trainer.encoders import handles
from trainer.foundation import buckets as buckets_lib
from trainer.foundation import errors
from trainer.foundation import layout as layout_lib
from trainer.foundation import shared_rows
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
                                   0 if task.tagging else c.num_classes)
  counts_lib.check_counts(splits, counts, c.validation_fraction)
  return splits, counts


def length_histogram(c, split, encode, out):
  """The training rows per packed length (`input_pipeline.length_histogram`,
  cached in `out` like the counts: a resumed run skips the pass)."""
  key = repr((repr(split), split.source.stamp(), c.preprocessor_handle,
              c.demo_cache_dir, c.seq_length))
  cached = run_dir.read_json(out.length_stats)
  if cached and cached.get("key") == key:
    return cached["histogram"]
  histogram = input_pipeline.length_histogram(split, encode, c.seq_length)
  run_dir.write_json(out.length_stats,
                     dict(key=key, histogram=[int(n) for n in histogram]))
  return histogram


def resolve_buckets(c, split, encode, rows_used, out, saved=None):
  """(--seq_buckets resolved: the bucket lengths, the training examples in
  each): `auto` chosen from the measured lengths of the training split, or
  for a resume the buckets the run chose (`saved`, its config.json: a
  newer rule must not change a run's batches)."""
  spec = layout_lib.requested(c).buckets
  if spec == (c.seq_length,):
    return spec, [rows_used]
  histogram = length_histogram(c, split, encode, out)
  if spec == buckets_lib.AUTO and saved and saved.get("buckets"):
    spec = tuple(saved["buckets"])
    if spec == (c.seq_length,):
      return spec, [rows_used]
  chosen = buckets_lib.choose(
      histogram, c.batch_size) if spec == buckets_lib.AUTO else spec
  logging.info("Length buckets (--seq_buckets=%s): %s", c.seq_buckets,
               buckets_lib.describe(histogram, chosen, c.batch_size))
  return chosen, buckets_lib.counts(histogram, chosen)


def rows_encoder(c, encoder, strategy, saved=None):
  """(the encoder, whether the run lays its batches in shared rows) for
  --shared_rows: the encoder rebuilt (`handles.rebuilt`, under the
  strategy's scope) when rows are asked for and it can take them. `auto`
  beside --seq_buckets, or with an encoder that cannot take them (an opaque
  SavedModel), keeps one example a row and says why; an explicit row count
  list with such an encoder is a ConfigError. A resumed run (config.json
  `saved`) keeps what it began with, as its checkpoint holds that
  encoder's variables: its `shared_rows` null, one example a row and the
  encoder as loaded; a list, the encoder rebuilt, or a ConfigError where
  it cannot be (a Model Garden BERT is rebuilt only where its outputs
  match the loaded ones, which other hardware may fail)."""
  request = layout_lib.requested(c)
  spec = request.rows
  began = (saved or {}).get("shared_rows", ())
  if spec == shared_rows.NONE:
    return encoder, False
  if began is None:
    logging.info("Shared rows: off, one example a row, as the run began "
                 "(config.json shared_rows null)")
    return encoder, False
  if request.bucketed:
    logging.info(
        "Shared rows: off, one example a row (--seq_buckets=%s "
        "cuts the padding instead)", c.seq_buckets)
    return encoder, False
  why = ""
  try:
    with strategy.scope():
      native = handles.rebuilt(encoder, c.encoder_handle)
  except errors.ConversionError as e:
    native, why = None, f": {e}"
  if native is not None:
    return native, True
  reason = (f"--encoder_handle={c.encoder_handle} is a SavedModel this "
            "trainer cannot rebuild (neither its own encoder nor a Model "
            f"Garden BERT), whose graph takes one example a row{why}")
  if saved and "shared_rows" in saved:
    raise errors.ConfigError(
        f"{c.model_dir} began with the encoder rebuilt for shared rows "
        f"(config.json shared_rows={began}), and its checkpoint holds that "
        f"encoder's variables, but here {reason}; resume where the run "
        "began (the same device kind and TensorFlow) or start a new "
        "--model_dir")
  if spec != shared_rows.AUTO:
    raise errors.ConfigError(
        f"--shared_rows={c.shared_rows} cannot apply: {reason}; use "
        "--shared_rows=none (or auto, which falls back by itself)")
  logging.info("Shared rows: off, one example a row (%s)", reason)
  return encoder, False


def resolve_rows(c, split, encode, out, saved, multiple):
  """The row counts of a run that shares rows (`shared_rows`): as the run
  recorded them (config.json `shared_rows`, fitted to this replica count),
  the list given, or auto's choice from the training split's measured
  lengths. () when the encoder takes shared rows but no batch uses them
  (one example a row): auto found nothing to save, or the run recorded
  [] (or counts none of which fit under the batch here)."""
  spec = layout_lib.requested(c).rows
  recorded = (saved or {}).get("shared_rows")
  k = c.grad_accumulation_steps
  if recorded is not None:
    ladder = shared_rows.fit_to(recorded, multiple, c.batch_size)
    if ladder != tuple(recorded):
      logging.info(
          "Shared rows: the run's row counts %s do not split over %s; %s "
          "instead (the layout only: each step trains the same examples)",
          recorded, shared_rows.split_over(multiple, k), ladder)
    return ladder
  if spec != shared_rows.AUTO:
    shared_rows.check_ladder(spec, c.batch_size, multiple, accumulation=k)
    _warn_if_unused(c, spec, length_histogram(c, split, encode, out), multiple)
    return spec
  why = shared_rows.nothing_to_share(c.batch_size, multiple, k)
  if why:  # not the texts' lengths: nothing to measure
    logging.info(
        "Shared rows (--shared_rows=auto): off, one example a row "
        "(%s)", why)
    return ()
  histogram = length_histogram(c, split, encode, out)
  ladder = shared_rows.choose(histogram, c.batch_size, multiple)
  if not ladder:
    logging.info(
        "Shared rows (--shared_rows=auto): off, one example a row (the "
        "training texts are long enough that rows would save under %.0f%% "
        "of the tokens)", 100 * shared_rows.MIN_SAVING)
    return ()
  logging.info("Shared rows (--shared_rows=auto): %s",
               shared_rows.describe(histogram, ladder, c.batch_size))
  return ladder


@dataclasses.dataclass(frozen=True)
class RunData:
  """A run's data resolved: its splits and their row counts (`counts.
  count` records), how its examples are encoded (`encode`: (texts,
  labels) -> features, what the `input_pipeline` streams take), its batch
  `Layout`, and how its epochs are shuffled (`inputs.shuffle`)."""

  splits: dict
  counts: dict
  encode: object
  layout: layout_lib.Layout
  shuffle: str
  eval_encode: object = None

  def __post_init__(self):
    if self.eval_encode is None:  # classification encodes evals alike
      object.__setattr__(self, "eval_encode", self.encode)


def resolve_data(c, task, out, saved, preprocessor, shuffle, replicas, rebuilt):
  """The run's `RunData`: its splits read and counted (`splits_and_counts`),
  checked against the record of the run resumed (config.json `saved`), its
  examples' encoding, and its `Layout` (`resolve_layout`; `rebuilt`: the
  encoder takes shared rows)."""
  splits, counts = splits_and_counts(c, task, out)
  counts_lib.check_same_data((saved or {}).get("data"), counts, c.model_dir)
  if task.tagging:
    encode = word_pieces.tagged(preprocessor, c.seq_length)
    eval_encode = word_pieces.tagged(preprocessor, c.seq_length, True)
    _log_words_cut(splits["train"], preprocessor, c.seq_length)
  else:
    encode = eval_encode = input_pipeline.labelled(
        preprocessing.make_packer(preprocessor, c.seq_length))
  layout = resolve_layout(c, splits["train"], encode,
                          counts["train"]["rows_used"], out, saved, replicas,
                          rebuilt)
  return RunData(splits, counts, encode, layout, shuffle, eval_encode)


def _log_words_cut(split, preprocessor, seq_length):
  """Says how many training words a sentence longer than --seq_length
  pieces loses (evals keep every word, in windows)."""
  words, cut = word_pieces.words_cut(split, preprocessor, seq_length)
  if cut:
    logging.warning(
        "Tagging: %d of the %d training words cut (sentences longer than "
        "--seq_length=%d pieces train on the words that fit; evals score "
        "every word, in windows)", cut, words, seq_length)
  else:
    logging.info(
        "Tagging: every training sentence fits --seq_length=%d "
        "(%d words)", seq_length, words)


def resolve_tags(c, task, saved=None):
  """(Config, Task) of a tagging run with its tag set resolved: as the run
  resumed recorded it (config.json `saved`), else --label_names, else read
  from the training data (`tagged_sources.read_tag_set`, which also tells
  IOB1 data, converted as read). The Config's --num_classes and
  --label_names become the tag count and names, so config.json records
  them. Another kind of task passes through.

  Raises:
    ConfigError: a resume whose --label_names names another tag set.
  """
  if not task.tagging:
    return c, task
  given = tuple(n.strip() for n in c.label_names.split(",") if n.strip())
  recorded = (saved or {}).get("task", {})
  if recorded.get("class_names"):
    names = tuple(recorded["class_names"])
    scheme = recorded.get("tag_scheme") or "iob2"
    if given and given != names:
      raise errors.ConfigError(
          f"--model_dir={c.model_dir} holds a tagging run with the tags "
          f"{','.join(names)}, not --label_names={c.label_names}: resuming "
          "would not continue that run. Use a new --model_dir, or leave "
          "--label_names unset; nothing was changed")
  else:
    data = data_spec(c, task)
    source = splits_lib.tagged_source(
        task,
        data,
        path=data.train_file,
        split="" if data.train_file else "train")
    tag_set = tagged_sources.read_tag_set(source, given)
    names, scheme = tag_set.names, tag_set.scheme
    logging.info("Tagging: %d tags (%s), %s", len(names), ",".join(names),
                 scheme.upper())
  c = dataclasses.replace(
      c, num_classes=len(names), label_names=",".join(names))
  return c, dataclasses.replace(
      task, class_names=names, num_classes=len(names), tag_scheme=scheme)


def resolve_layout(c, split, encode, rows_used, out, saved, replicas, rebuilt):
  """The run's `Layout`, resolved once from --seq_buckets and
  --shared_rows, the training `split`'s measured lengths (cached in `out`),
  and for a resume its config.json `saved` (a run keeps the layout it
  began with).

  Args:
    c: the run's Config.
    split: the training split; `encode` its examples' encoding;
      `rows_used` its usable rows.
    out: the run's `run_dir.Locations`.
    saved: config.json of the run resumed, or None.
    replicas: replicas in sync.
    rebuilt: the encoder takes shared rows (`rows_encoder`).
  """
  lengths, in_buckets = resolve_buckets(c, split, encode, rows_used, out, saved)
  ladder = resolve_rows(c, split, encode, out, saved, replicas *
                        c.grad_accumulation_steps) if rebuilt else None
  return layout_lib.Layout.build(c, lengths, ladder, replicas, in_buckets)


def _warn_if_unused(c, ladder, histogram, multiple):
  """A row count list that no batch fits runs every step one example a
  row, as --shared_rows=none would but with the encoder rebuilt: said once,
  with what auto would choose for these texts."""
  if shared_rows.used_share(histogram, ladder, c.batch_size):
    return
  auto = shared_rows.choose(histogram, c.batch_size, multiple)
  logging.warning(
      "Shared rows: no batch fits --shared_rows=%s (batches of %d at "
      "--seq_length=%d need more rows), so every step runs one example a "
      "row; --shared_rows=auto would %s", c.shared_rows, c.batch_size,
      c.seq_length, f"choose {','.join(map(str, auto))}"
      if auto else "keep one example a row too (or give --shared_rows=none)")


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
