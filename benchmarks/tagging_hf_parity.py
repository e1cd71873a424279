r"""A tagging run against its Hugging Face export, sentence by sentence.

    python benchmarks/tagging_hf_parity.py --model_dir=RUN \
        [--hf_dir=DIR] [--eval_file=../shared/data/conll2003/dev.txt] \
        [--sentences=0]

Without --hf_dir the run is exported to a temporary folder first
(`trainer.export --format=huggingface`); without --eval_file the run's own
is read. Each usable sentence of the file (the first --sentences, 0: all)
is packed with the run's preprocessor as training packs it
(`word_pieces.make_word_packer`: whole words at --seq_length) and tokenized
by the exported tokenizer (`is_split_into_words=True`, the words that fit).
Both models are fed the trainer's ids: the run's model restored from its
checkpoint (`run_folder.load_classifier`) and transformers'
`AutoModelForTokenClassification` on PyTorch's CPU. Prints one table: the
sentences whose ids are equal, the largest |logit difference| on each
word's first piece (where the tag is read) and on every real token, and
the words whose tag (the first piece's argmax) agrees. CPU only, in
minutes for CoNLL-2003's dev set with MiniLM; no timing.
"""

import argparse
import os
import sys
import tempfile

import numpy as np
import tensorflow as tf

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)
# pylint: disable=g-import-not-at-top,wrong-import-position
from trainer.data import files  # noqa: E402
from trainer.data import tagged_files  # noqa: E402
from trainer.data import tagged_sources  # noqa: E402
from trainer.data import word_pieces  # noqa: E402
from trainer.serving import huggingface  # noqa: E402
from trainer.serving import run_folder  # noqa: E402


def read_sentences(path, limit=0):
  """The usable sentences of tagged file `path` (CoNLL or JSON lines), each
  its words joined by one space, the first `limit` (0: all)."""
  layout = tagged_sources.FileSource(path).layout()
  out = []
  with files.open_binary(path) as f:
    for _, _, _, text, _, reason in tagged_files.parse(f, layout):
      if reason == 0:
        out.append(text)
        if len(out) == limit:
          break
  return out


def load_run(model_dir):
  """(preprocessor, model, seq_length) of the run in `model_dir`, its model
  restored from its best checkpoint (else the newest)."""
  c = run_folder.read_run_config(model_dir)
  preprocessor, model, _, _ = run_folder.load_classifier(c)
  return preprocessor, model, c.seq_length


def pack(run, sentences):
  """The trainer's per-token features of `sentences` (words joined by one
  space) for `run` (`load_run`): `make_word_packer`'s, every tag 0."""
  preprocessor, _, seq_length = run
  words = word_pieces.split_words(tf.constant(sentences))
  tags = tf.RaggedTensor.from_row_lengths(
      tf.zeros([tf.size(words.flat_values)], tf.int32), words.row_lengths())
  return word_pieces.make_word_packer(preprocessor,
                                      seq_length)(tf.constant(sentences), tags)


def logits_of(run, packed):
  """float32 [n, seq_length, tags] of `run`'s model on `packed` (`pack`)."""
  inputs = {
      k: packed[k] for k in ("input_word_ids", "input_mask", "input_type_ids")
  }
  return run[1](inputs, training=False).numpy()


def compare(run, hf_dir, sentences, batch_size=64):
  """A tagging run (`load_run`) against its Hugging Face folder `hf_dir` on
  `sentences` (words joined by one space).

  Returns:
    dict: `sentences`, `words` (those that fit), `tokens` (real ones),
    `ids_equal` (sentences whose exported-tokenizer ids are the trainer's,
    and whose first pieces are the words' first pieces), `first_piece_diff`
    and `token_diff` (max |logit difference|), `tags_agree` (words whose
    argmax agrees), `tag_names` (the export's id2label, in id order).
  """
  import torch  # pylint: disable=g-import-not-at-top
  import transformers  # pylint: disable=g-import-not-at-top
  tokenizer = transformers.AutoTokenizer.from_pretrained(hf_dir)
  hf_model = transformers.AutoModelForTokenClassification.from_pretrained(
      hf_dir).eval()
  out = dict(
      sentences=0,
      words=0,
      tokens=0,
      ids_equal=0,
      first_piece_diff=0.0,
      token_diff=0.0,
      tags_agree=0,
      tag_names=[
          hf_model.config.id2label[i] for i in range(hf_model.config.num_labels)
      ])
  for start in range(0, len(sentences), batch_size):
    batch = sentences[start:start + batch_size]
    ours = pack(run, batch)
    logits = logits_of(run, ours)
    as_torch = lambda k: torch.from_numpy(ours[k].numpy()).long()
    with torch.no_grad():
      theirs = hf_model(
          input_ids=as_torch("input_word_ids"),
          attention_mask=as_torch("input_mask"),
          token_type_ids=as_torch("input_type_ids")).logits.numpy()
    real = ours["input_mask"].numpy() > 0
    first = ours["weight"].numpy() > 0
    diff = np.abs(logits - theirs).max(axis=-1)
    out["first_piece_diff"] = max(out["first_piece_diff"],
                                  float(diff[first].max()))
    out["token_diff"] = max(out["token_diff"], float(diff[real].max()))
    out["tags_agree"] += int(
        (logits.argmax(-1) == theirs.argmax(-1))[first].sum())
    out["sentences"] += len(batch)
    out["words"] += int(first.sum())
    out["tokens"] += int(real.sum())
    cut = ours["words_cut"].numpy()
    for i, text in enumerate(batch):
      kept = text.split(" ")
      encoded = tokenizer(kept[:len(kept) - cut[i]], is_split_into_words=True)
      n = int(real[i].sum())
      word_ids = encoded.word_ids()  # [CLS] first: p - 1 is always a piece
      firsts = [
          p for p, w in enumerate(word_ids)
          if w is not None and w != word_ids[p - 1]
      ]
      out["ids_equal"] += int(
          encoded["input_ids"]
          == ours["input_word_ids"].numpy()[i, :n].tolist() and
          firsts == np.flatnonzero(first[i]).tolist())
  return out


def main(argv=None):
  parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
  parser.add_argument("--model_dir", required=True, help="a tagging run")
  parser.add_argument(
      "--hf_dir", default="", help="its Hugging Face export (default: made)")
  parser.add_argument(
      "--eval_file", default="", help="tagged sentences (default: the run's)")
  parser.add_argument(
      "--sentences", type=int, default=0, help="the first N (0: all)")
  args = parser.parse_args(argv)
  path = args.eval_file or run_folder.read_run_config(args.model_dir).eval_file
  if not path:
    sys.exit("--eval_file is required: the run names no eval file")
  with tempfile.TemporaryDirectory() as tmp:
    hf_dir = args.hf_dir or huggingface.export_run(args.model_dir,
                                                   os.path.join(tmp, "hf"))
    out = compare(
        load_run(args.model_dir), hf_dir, read_sentences(path, args.sentences))
  print(f"{args.model_dir} against {args.hf_dir or 'its export'} on {path}\n")
  print("| sentences | ids equal | words | tags agree | max abs diff, first "
        "pieces | max abs diff, all tokens | tokens |\n| --- | --- | --- | "
        "--- | --- | --- | --- |")
  print(f"| {out['sentences']} | {out['ids_equal']} | {out['words']} | "
        f"{out['tags_agree']} | {out['first_piece_diff']:.3g} | "
        f"{out['token_diff']:.3g} | {out['tokens']} |")


if __name__ == "__main__":
  main()
