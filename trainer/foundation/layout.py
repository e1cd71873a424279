"""How a run lays its batches out: one `Layout` value, resolved once.

A step always trains --batch_size examples; only their layout varies:

    fixed shapes    [batch, seq_length], one example a row
    length buckets  [batch, bucket], a bucket per group of batches
                    (--seq_buckets: `buckets`)
    shared rows     [rows, seq_length], several examples a row, the rows
                    one of a few counts, the `ladder` (--shared_rows:
                    `shared_rows`)

`requested(c)` reads the two flags (once a process: parsing is a pure
function of their values); `trainer.training.inputs.resolve_layout` turns
them and the training data into a `Layout`, which set-up hands to the
input pipeline, the trainer, the evaluator, the end of the run and the
export. The Layout answers what the run needs of it: the shapes its steps
are counted by and a group's shape (`shapes`, `shape_of`), the steps of an
epoch, its config.json record and the reading of one (`record`,
`from_record`), and its log line (`describe`). No TensorFlow.
"""

import dataclasses
import functools

from trainer.foundation import buckets
from trainer.foundation import shared_rows

FIXED, BUCKETS, ROWS = "fixed", "buckets", "rows"


@dataclasses.dataclass(frozen=True)
class Request:
  """--seq_buckets and --shared_rows parsed.

  Attributes:
    buckets: `buckets.AUTO`, or the bucket lengths (ending at
      --seq_length; (seq_length,) for none).
    rows: `shared_rows.AUTO`, `shared_rows.NONE`, or the row counts given.
    seq_length: --seq_length.
  """

  buckets: object
  rows: object
  seq_length: int

  @property
  def bucketed(self):
    """Whether length buckets are asked for (auto or a list)."""
    return self.buckets != (self.seq_length,)


@functools.lru_cache(maxsize=32)
def _parsed(seq_buckets, rows, seq_length):
  return Request(
      buckets.parse(seq_buckets, seq_length), shared_rows.parse(rows),
      seq_length)


def requested(c):
  """The `Request` of Config `c`: its --seq_buckets and --shared_rows,
  parsed (raises ConfigError naming a bad one)."""
  return _parsed(c.seq_buckets, str(c.shared_rows), c.seq_length)


@dataclasses.dataclass(frozen=True)
class Layout:
  """A run's batch layout.

  Attributes:
    seq_length: --seq_length: the truncation length, the last bucket, the
      tokens of a shared row.
    batch_size: examples per training step (the global batch).
    lengths: the bucket lengths, ascending, the last `seq_length`
      ((seq_length,): one length, fixed shapes or shared rows).
    ladder: the training row counts (ascending, below `batch_size`; a
      batch that fits none runs one example a row); () for a run whose
      encoder takes shared rows but whose batches do not use them; None
      when the encoder takes one example a row (not rebuilt).
    train_group: batches per training group (what one call of the compiled
      loop runs at one shape).
    eval_batch: examples per eval batch.
    eval_ladder: the eval row counts (the ladder scaled to `eval_batch`);
      () for evals one example a row.
    eval_group: batches per eval group.
    replicas: replicas in sync (each gets whole rows of a batch).
    train_examples: usable training examples per bucket length.
  """

  seq_length: int
  batch_size: int
  lengths: tuple
  ladder: tuple = None
  train_group: int = 1
  eval_batch: int = 0
  eval_ladder: tuple = ()
  eval_group: int = 1
  replicas: int = 1
  train_examples: tuple = ()

  @classmethod
  def build(cls,
            c,
            lengths,
            ladder=None,
            replicas=1,
            train_examples=(),
            group_batches=None):
    """The Layout of Config `c` with these resolved `lengths` and
    `ladder`: the group sizes and the eval layout follow from the flags
    (`group_batches`: a bucketed run's group, default
    --bucket_group_batches)."""
    lengths = tuple(lengths)
    eval_batch = c.eval_batch_size or c.batch_size
    eval_ladder = shared_rows.for_batch(ladder, c.batch_size, eval_batch,
                                        replicas) if ladder else ()
    if ladder:
      train_group = shared_rows.group_size(c.steps_per_loop)
    else:
      # The order of a bucketed epoch depends on the group: a resume keeps
      # the run's --bucket_group_batches, whatever --steps_per_loop is.
      train_group = buckets.group_size(c.steps_per_loop, lengths,
                                       group_batches or c.bucket_group_batches)
    # Shared rows cut a group at each change of row count: eval groups as
    # training's, not filled out to --steps_per_loop batches of zeros.
    eval_group = (
        shared_rows.group_size(c.steps_per_loop)
        if eval_ladder else c.steps_per_loop)
    return cls(
        seq_length=c.seq_length,
        batch_size=c.batch_size,
        lengths=lengths,
        ladder=None if ladder is None else tuple(ladder),
        train_group=train_group,
        eval_batch=eval_batch,
        eval_ladder=tuple(eval_ladder),
        eval_group=eval_group,
        replicas=replicas,
        train_examples=tuple(train_examples))

  @property
  def kind(self):
    """FIXED, BUCKETS or ROWS: how the training batches lie."""
    if self.ladder:
      return ROWS
    return BUCKETS if len(self.lengths) > 1 else FIXED

  @property
  def rows(self):
    """Whether training batches go in shared rows."""
    return bool(self.ladder)

  @property
  def rebuilt(self):
    """Whether the encoder takes shared rows (rebuilt as Python code)."""
    return self.ladder is not None

  @property
  def shapes(self):
    """What the run's steps are counted by (in the training state, so they
    add up across a resume): the bucket lengths, or in shared rows the row
    counts a batch runs at, the batch size (one example a row) last."""
    if self.rows:
      return self.ladder + (self.batch_size,)
    return self.lengths

  def shape_of(self, group):
    """A distributed training group -> its entry of `shapes`, from its
    static shape (no device read): its length, or in shared rows one
    replica's rows times the replicas."""
    ids = group["input_word_ids"]
    first = getattr(ids, "values", (ids,))[0]
    if self.rows:
      return int(first.shape[0]) * self.replicas
    return int(first.shape[-1])

  @property
  def steps_per_epoch(self):
    """Full batches an epoch makes: floor(examples / batch) per bucket
    (shared rows train the batches of fixed shapes)."""
    return buckets.steps_per_epoch(self.train_examples, self.batch_size)

  def record(self):
    """What config.json records of the layout (`from_record` reads it)."""
    return dict(
        buckets=list(self.lengths),
        # None: one example a row; a list (maybe empty): the encoder
        # rebuilt for shared rows, batches in these row counts.
        shared_rows=None if self.ladder is None else list(self.ladder),
        # With one bucket the group does not order anything.
        train_group_batches=self.train_group if len(self.lengths) > 1 else None)

  @classmethod
  def from_record(cls, record, c):
    """The Layout a run recorded in config.json `record` (its `record()`),
    for Config `c` (`export`, `evaluate`): its lengths ((seq_length,) for a
    run from before buckets) and whether its encoder took shared rows."""
    record = record or {}
    ladder = record.get("shared_rows")
    return cls.build(
        c,
        record.get("buckets") or (c.seq_length,),
        None if ladder is None else tuple(ladder),
        group_batches=saved_group_size(record))

  def describe(self):
    """The layout in a few words, for a log line."""
    if self.rows:
      counts = ", ".join(map(str, self.ladder))
      return (f"shared rows: a batch of {self.batch_size} in {counts} rows "
              f"of {self.seq_length} tokens (else {self.batch_size}, one "
              "example a row)")
    if self.kind == BUCKETS:
      return (f"length buckets {', '.join(map(str, self.lengths))}, "
              f"{self.train_group} batches a group")
    return f"fixed shapes: {self.batch_size} x {self.seq_length}"


def saved_group_size(record):
  """The training group of a run from its config.json `record`: its
  `train_group_batches`, or for a bucketed run written before that key,
  the rule it ran with (min(--steps_per_loop, 5)); None when unknown."""
  if not record:
    return None
  if record.get("train_group_batches"):
    return record["train_group_batches"]
  if len(record.get("buckets", ())) > 1:
    return min(record.get("config", {}).get("steps_per_loop", 5), 5)
  return None


def recorded_config(record):
  """The flags of config.json `record` (its "config"), with the group a
  bucketed run from before --bucket_group_batches ran with."""
  config = record.get("config", {})
  group = saved_group_size(record)
  if "bucket_group_batches" in config or not group:
    return config
  return dict(config, bucket_group_batches=group)
