"""The Hugging Face transformers + PyTorch contenders of the race.

What most users would pick: `transformers.Trainer` fine-tuning
`BertForSequenceClassification` on the CPU, timed inside the Trainer's own
loop (`Trainer.train`). A callback holds that loop at the end of a step
until the race asks for the next chunk, so everything the Trainer does in a
step is timed (its dataloader with its sampler and collator, `training_step`
with its autocast and backward, clipping at `max_grad_norm`, the AdamW
step, the linear schedule, `zero_grad`) and nothing else: no set-up, no
wait between chunks.

  hf_dynamic          the Trainer's default batching: a shuffled sampler and
                      `DataCollatorWithPadding` (each batch padded to its
                      longest example)
  hf_group_by_length  the same with the LengthGroupedSampler
                      (`group_by_length`: batches of similar lengths, in
                      mega-batches of up to 50 batches, each longest first)
  hf_max_length       every batch padded to --seq_length
  ..._bf16            the same with `bf16=True`: on the CPU, the Trainer runs
                      the forward under torch.autocast("cpu", bfloat16)

Each trains the race's encoder shape from random weights (the trainer's
minilm contenders do too), on the texts the trainer contenders train on
(`contenders.write_train_texts`), tokenized up front as HF users do with
`datasets.map`, by a BertTokenizerFast over the trainer's vocab file
(lower-cased, truncated at --seq_length; MRPC as pairs).

`--data=conll2003` tags CoNLL-2003 sentences as Hugging Face's run_ner
does: BertForTokenClassification (one label per tag), the words of each
sentence tokenized together (`is_split_into_words`), each word's tag on its
first piece and -100 on the others, batches made by
`DataCollatorForTokenClassification` (labels padded with -100). At size
minilm it loads the Hugging Face checkpoint that the trainer's converted
all-MiniLM-L6-v2 came from (the same weights, the head random). Trainer settings
besides its defaults: the race's batch, the trainer's weight decay (0.01,
not on LayerNorm or biases), dataloader_drop_last (every timed step holds
--batch_size examples), no logging, checkpoints or progress bar. Torch
runs on all the machine's cores (`torch.set_num_threads(os.cpu_count())`).

Needs torch, transformers and accelerate (the `bench` extra); this module
imports none of them until a contender is built, and no TensorFlow.
"""

import json
import os
import queue
import tempfile
import threading
import time

# The Trainer's batching of each contender: padding, length grouping,
# bfloat16 autocast.
KINDS = {
    "hf_dynamic": ("longest", False, False),
    "hf_group_by_length": ("longest", True, False),
    "hf_max_length": ("max_length", False, False),
    "hf_dynamic_bf16": ("longest", False, True),
    "hf_group_by_length_bf16": ("longest", True, True),
    "hf_max_length_bf16": ("max_length", False, True),
}
NEEDS = ("torch", "transformers", "accelerate")


def missing():
  """The packages the Hugging Face contenders need that are not installed."""
  import importlib.util  # pylint: disable=g-import-not-at-top
  return [name for name in NEEDS if importlib.util.find_spec(name) is None]


def make(name, args, paths):
  """The contender `name` (a key of KINDS) for the race's `args` and the
  size's `paths` (its `config`, `vocab` and the `texts` file)."""
  if name not in KINDS:
    raise ValueError(name)
  absent = missing()
  if absent:
    raise ValueError(f"{name} needs {', '.join(absent)}: pip install -e "
                     "'.[bench]'")
  padding, group_by_length, bf16 = KINDS[name]
  return HfTrainerContender(args, paths, padding, group_by_length, bf16)


def bert_config(config, num_labels=2):
  """A transformers BertConfig of the trainer's encoder config (its JSON)."""
  import transformers  # pylint: disable=g-import-not-at-top
  return transformers.BertConfig(
      vocab_size=config["vocab_size"],
      hidden_size=config["hidden_size"],
      num_hidden_layers=config["num_layers"],
      num_attention_heads=config["num_heads"],
      intermediate_size=config["intermediate_size"],
      max_position_embeddings=config["max_position_embeddings"],
      type_vocab_size=config["type_vocab_size"],
      hidden_dropout_prob=config["dropout_rate"],
      attention_probs_dropout_prob=config["dropout_rate"],
      layer_norm_eps=config["layer_norm_eps"],
      initializer_range=config["initializer_range"],
      hidden_act=config["hidden_act"],
      num_labels=num_labels)


def read_texts(texts_file):
  """The rows `contenders.write_train_texts` wrote (its JSON)."""
  with open(texts_file, encoding="utf-8") as f:
    return json.load(f)


def tokenized(texts_file, vocab, seq_length):
  """The training rows as the Trainer's dataset: one dict of token lists
  (`input_ids`, `token_type_ids`, `attention_mask`) and `labels` a row,
  unpadded, truncated at `seq_length` (a pair: longest first); tagged
  sentences as `tokenized_words` makes them."""
  import transformers  # pylint: disable=g-import-not-at-top
  data = read_texts(texts_file)
  tokenizer = wordpiece_tokenizer(transformers, vocab)
  if data.get("task") == "tagging":
    return tokenizer, tokenized_words(tokenizer, data["texts"], data["labels"],
                                      seq_length)
  texts = data["texts"]
  if texts and isinstance(texts[0], list):
    encoded = tokenizer([a for a, _ in texts], [b for _, b in texts],
                        truncation=True,
                        max_length=seq_length)
  else:
    encoded = tokenizer(texts, truncation=True, max_length=seq_length)
  rows = [dict(zip(encoded.keys(), row)) for row in zip(*encoded.values())]
  for row, label in zip(rows, data["labels"]):
    row["labels"] = label
  return tokenizer, rows


def tokenized_words(tokenizer, sentences, tags, seq_length):
  """Tagged sentences as run_ner tokenizes them: the words of each
  (`is_split_into_words`) cut into pieces, truncated at `seq_length`
  tokens, and per token `labels` (a list) its word's tag on the word's
  first piece and -100 (ignored by the loss) on its other pieces, [CLS]
  and [SEP].

  Args:
    tokenizer: a fast tokenizer (its `word_ids`).
    sentences: a list of sentences, each a list of words.
    tags: a list of each sentence's tag ids, one a word.
    seq_length: tokens per row at most, [CLS] and [SEP] included.
  """
  encoded = tokenizer(
      sentences,
      is_split_into_words=True,
      truncation=True,
      max_length=seq_length)
  rows = []
  for i, sentence_tags in enumerate(tags):
    row = {key: encoded[key][i] for key in encoded.keys()}
    labels, previous = [], None
    for word in encoded.word_ids(i):
      first = word is not None and word != previous
      labels.append(sentence_tags[word] if first else -100)
      previous = word
    row["labels"] = labels
    rows.append(row)
  return rows


def wordpiece_tokenizer(transformers, vocab):
  """A lower-casing BertTokenizerFast over the vocab file `vocab` (one
  token a line, its id the line's number)."""
  # Positional: transformers 4 names it vocab_file, 5 vocab (and ignores a
  # vocab_file keyword: five special tokens, every word [UNK]).
  return transformers.BertTokenizerFast(vocab, do_lower_case=True)


class _CountingCollator:
  """A collator that counts the real and the padded tokens of the batches
  it makes (from their attention masks: microseconds a batch, timed with
  the step)."""

  def __init__(self, collate):
    self.collate = collate
    self.real = self.padded = 0

  def __call__(self, features):
    batch = self.collate(features)
    mask = batch["attention_mask"]
    self.real += int(mask.sum())
    self.padded += mask.numel()
    return batch


def _pacer(callback_base, collator):
  """A TrainerCallback that holds the Trainer's loop at the end of a step
  until a chunk is asked for (`asks.put(steps)`), times the chunk's steps
  and reports (seconds, steps, real tokens, padded tokens) on `done`."""

  class Pacer(callback_base):

    def __init__(self):
      super().__init__()
      self.asks, self.done = queue.Queue(), queue.Queue()
      self.left = self.steps = 0
      self.start = None

    def _next_chunk(self):
      # Blocks the Trainer's loop; the race ends the process as it waits.
      self.left = self.steps = self.asks.get()
      collator.real = collator.padded = 0
      self.start = time.perf_counter()

    def on_train_begin(self, args, state, control, **kwargs):
      self._next_chunk()

    def on_step_end(self, args, state, control, **kwargs):
      self.left -= 1
      if self.left > 0:
        return
      self.done.put((time.perf_counter() - self.start, self.steps,
                     collator.real, collator.padded))
      self._next_chunk()

  return Pacer()


def _model(transformers, paths, tag_names):
  """BertForSequenceClassification of the race's encoder shape, random
  weights; for tagging (`tag_names`) BertForTokenClassification, from the
  Hugging Face checkpoint the trainer's encoder was converted from where
  the race names one (`paths["hf_model"]`: the same weights; the head
  random, as the trainer's), else random too."""
  if not tag_names:
    return transformers.BertForSequenceClassification(
        bert_config(paths["config"]))
  if paths.get("hf_model"):
    return transformers.BertForTokenClassification.from_pretrained(
        paths["hf_model"], num_labels=len(tag_names))
  return transformers.BertForTokenClassification(
      bert_config(paths["config"], len(tag_names)))


class HfTrainerContender:
  """`transformers.Trainer` training BertForSequenceClassification (or
  for tagging BertForTokenClassification), timed in chunks of its own loop
  (see the module docstring).

  Like the trainer's contenders, its chunks together cover
  `--epoch_fraction` of an epoch, in the epoch's order: a dynamic batch
  costs what its longest example costs, and the length-grouped sampler
  orders each mega-batch longest first, so only a long stretch of the
  epoch holds each length in its share.
  """

  def __init__(self, args, paths, padding, group_by_length, bf16):
    # pylint: disable=g-import-not-at-top
    import torch
    import transformers
    # pylint: enable=g-import-not-at-top
    self.threads = os.cpu_count()
    torch.set_num_threads(self.threads)
    tokenizer, rows = tokenized(paths["texts"], paths["vocab"], args.seq_length)
    tag_names = read_texts(paths["texts"]).get("tag_names")
    # Tagging pads its per-token labels with -100 too (run_ner's collator).
    collator_class = (
        transformers.DataCollatorForTokenClassification
        if tag_names else transformers.DataCollatorWithPadding)
    collate = collator_class(
        tokenizer,
        padding=padding,
        max_length=args.seq_length if padding == "max_length" else None)
    self.collator = _CountingCollator(collate)
    torch.manual_seed(0)
    model = _model(transformers, paths, tag_names)
    sampling = {}
    if group_by_length:
      # transformers 5 names the sampler; 4.x has the boolean.
      fields = transformers.TrainingArguments.__dataclass_fields__
      sampling = dict(train_sampling_strategy="group_by_length")
      if "group_by_length" in fields:
        sampling = dict(group_by_length=True)
    training_args = transformers.TrainingArguments(
        output_dir=tempfile.mkdtemp(),
        per_device_train_batch_size=args.batch_size,
        max_steps=10**6,  # the race stops it; the schedule barely moves
        weight_decay=0.01,
        bf16=bf16,
        use_cpu=True,
        dataloader_num_workers=0,
        dataloader_drop_last=True,
        logging_strategy="no",
        save_strategy="no",
        report_to=[],
        disable_tqdm=True,
        **sampling)
    self.pacer = _pacer(transformers.TrainerCallback, self.collator)
    self.trainer = transformers.Trainer(
        model=model,
        args=training_args,
        train_dataset=rows,
        data_collator=self.collator,
        callbacks=[self.pacer])
    # PrinterCallback prints on stdout, the race's channel to this worker.
    self.trainer.remove_callback(transformers.trainer_callback.PrinterCallback)
    steps_per_epoch = len(rows) // args.batch_size
    steps = int(steps_per_epoch * args.epoch_fraction)
    self.chunk = max(1, -(-steps // args.rounds))
    self.tokens = (None, None)  # measured on the timed batches instead
    optim = getattr(training_args.optim, "value", training_args.optim)
    self.note = (f"transformers {transformers.__version__} Trainer, torch "
                 f"{torch.__version__} on {self.threads} threads, "
                 f"{type(model).__name__} (attention "
                 f"{model.config._attn_implementation}), {optim}, "
                 f"{len(rows)} rows, {steps_per_epoch} steps an epoch, "
                 f"chunks of {self.chunk} steps")
    self.thread = None
    self.last_tokens = (0, 0)

  def _train(self):
    import torch  # pylint: disable=g-import-not-at-top
    # OpenMP keeps the thread count per calling thread: set it in this one.
    torch.set_num_threads(self.threads)
    try:
      self.trainer.train()
    except BaseException as e:  # pylint: disable=broad-except
      self.pacer.done.put(e)

  def _chunk(self, steps):
    self.pacer.asks.put(steps)
    if self.thread is None:
      self.thread = threading.Thread(target=self._train, daemon=True)
      self.thread.start()
    result = self.pacer.done.get()
    if isinstance(result, BaseException):
      raise RuntimeError(f"the Trainer stopped: {result!r}") from result
    seconds, steps, real, padded = result
    self.last_tokens = (real, padded)
    return seconds, steps

  def warm_up(self):
    self._chunk(1)

  def run(self, steps):
    del steps  # the chunk above
    return self._chunk(self.chunk)

  def chunk_tokens(self):
    """(real, padded) tokens of the last chunk's batches."""
    return self.last_tokens
