"""Tagging (named entities): words to pieces, the per-token loss, shared
rows as twins of fixed shapes, the eval over whole sentences, and a run
end to end, on the demo encoder and small CoNLL files."""

import json
import os

import numpy as np
import pytest
import tensorflow as tf
import tensorflow_hub as hub

from conftest import invoke
from conftest import tiny_config
import testing
from trainer.commands import doctor_checks
from trainer.data import row_layout
from trainer.data import tagged_sources
from trainer.data import word_pieces
from trainer.encoders import native
from trainer.evaluation import tagging as tagging_metrics
from trainer.foundation import config as config_lib
from trainer.foundation import features as features_lib
from trainer.foundation import errors
from trainer.foundation import layout as layout_lib
from trainer.model import classifier as model_lib
from trainer.model import optimization
from trainer.serving import run_folder
from trainer.training import launch
from trainer.training import train_lib
from trainer.training import eval_step
from trainer.training import train_step

TAGS = ("O", "B-LOC", "I-LOC", "B-PER", "I-PER")
# Words of the demo vocabulary (pieces of one to five letters).
WORDS = ("good", "movie", "bad", "plot", "great", "acting", "a", "the",
         "really", "not")


def _sentences(n, seed=0, longest=9):
  """`n` seeded sentences of 1 to `longest` words, IOB2 tags."""
  rng = np.random.default_rng(seed)
  out = []
  for _ in range(n):
    words = [str(rng.choice(WORDS)) for _ in range(rng.integers(1, longest))]
    tags, inside = [], None
    for _ in words:
      kind = rng.choice(["O", "LOC", "PER"], p=[0.6, 0.2, 0.2])
      if kind == "O":
        tags.append("O")
        inside = None
      elif inside == kind and rng.random() < 0.5:
        tags.append(f"I-{kind}")
      else:
        tags.append(f"B-{kind}")
        inside = kind
    out.append((words, tags))
  return out


def write_conll(path, sentences):
  """A CoNLL file (word, a POS column, the tag) of `sentences`."""
  lines = []
  for words, tags in sentences:
    lines += [f"{w} NN {t}" for w, t in zip(words, tags)] + [""]
  with open(path, "w", encoding="utf-8") as f:
    f.write("\n".join(lines) + "\n")
  return str(path)


def _encoded(preprocessor, sentences, seq_length, windows=False):
  ids = {t: i for i, t in enumerate(TAGS)}
  texts = tf.constant([" ".join(w) for w, _ in sentences])
  labels = dict(
      tags=tf.constant(
          [" ".join(str(ids[t]) for t in ts) for _, ts in sentences]),
      index=tf.range(len(sentences), dtype=tf.int64))
  return word_pieces.tagged(preprocessor, seq_length, windows)(texts, labels)


@pytest.fixture(scope="module")
def preprocessor(demo_paths):
  return hub.load(demo_paths["preprocessor"])


def _pieces(preprocessor, word):
  return preprocessor.tokenize(tf.constant([word])).merge_dims(
      1, 2)[0].numpy().tolist()


def test_each_word_is_tagged_on_its_first_piece(preprocessor):
  """[CLS] the pieces of each word [SEP], padding; a word's tag on its first
  piece (weight 1), 0 and weight 0 on its other pieces, [CLS], [SEP] and
  padding; a word of no piece (a control character) gets the unknown piece,
  so it is still tagged; whole words only: a sentence that does not fit
  keeps its words that do, and counts the ones cut."""
  pieces = {w: _pieces(preprocessor, w) for w in ("acting", "the", "plot")}
  assert len(pieces["acting"]) > 1  # several pieces: the test needs one
  pack = word_pieces.make_word_packer(preprocessor, 16)
  out = pack(
      tf.constant(["acting the", "plot \x07 the", "acting acting acting"]),
      tf.ragged.constant([[3, 4], [1, 0, 2], [3, 4, 4]], tf.int32))
  cls, sep, unk = 2, 3, _pieces(preprocessor, "\ue000")
  assert len(unk) == 1
  first = [cls] + pieces["acting"] + pieces["the"] + [sep]
  second = [cls] + pieces["plot"] + unk + pieces["the"] + [sep]
  ids = out["input_word_ids"].numpy().tolist()
  assert ids[0] == first + [0] * (16 - len(first))
  assert ids[1] == second + [0] * (16 - len(second))
  n = len(pieces["acting"])

  def tagged(words, tags):
    """The label row and weight row of words of these pieces and tags."""
    label, weight = [0], [0.0]
    for word, tag in zip(words, tags):
      label += [tag] + [0] * (len(word) - 1)
      weight += [1.0] + [0.0] * (len(word) - 1)
    pad = 16 - len(label)
    return label + [0] * pad, weight + [0.0] * pad

  for row, (words, tags) in enumerate([
      ((pieces["acting"], pieces["the"]), (3, 4)),
      ((pieces["plot"], unk, pieces["the"]), (1, 0, 2)),
  ]):
    label, weight = tagged(words, tags)
    assert out["label"].numpy()[row].tolist() == label
    assert out["weight"].numpy()[row].tolist() == weight
  weights = out["weight"].numpy().tolist()
  kept = 14 // n  # whole "acting"s within 16 - 2 pieces
  assert out["words_cut"].numpy().tolist() == [0, 0, 3 - kept]
  assert sum(weights[2]) == kept
  assert out["input_mask"].numpy().sum(axis=1).tolist() == [
      len(first), len(second), 2 + kept * n
  ]


def test_windows_score_every_word_once_in_order(preprocessor):
  """Eval windows: consecutive whole words, each within --seq_length - 2
  pieces; every word of every sentence is a first piece exactly once, with
  its sentence and its place in it."""
  sentences = _sentences(40, seed=1, longest=30)
  seq_length = 16
  out = {
      k: v.numpy()
      for k, v in _encoded(preprocessor, sentences, seq_length, True).items()
  }
  assert out["input_word_ids"].shape[0] > len(sentences)  # windows made
  real = out["weight"] > 0
  got = sorted(zip(out["sentence"][real].tolist(), out["word"][real].tolist()))
  want = [(i, j)
          for i, (words, _) in enumerate(sentences)
          for j in range(len(words))]
  assert got == want
  ids = {t: i for i, t in enumerate(TAGS)}
  tag_of = {
      (i, j): ids[t] for i, (_, ts) in enumerate(sentences)
      for j, t in enumerate(ts)
  }
  labels = out["label"][real].tolist()
  assert [
      tag_of[k]
      for k in zip(out["sentence"][real].tolist(), out["word"][real].tolist())
  ] == labels
  assert (out["word"][~real] == -1).all()


def test_a_word_longer_than_a_row_keeps_its_first_pieces(preprocessor):
  """A word of more than seq_length - 2 pieces is dropped neither in
  training nor in evals: it keeps its first seq_length - 2 pieces, alone in
  its row, tagged on its first piece (as serving keeps it); in training the
  words after it are cut as any words that do not fit."""
  giant = "acting" * 4
  pieces = {w: _pieces(preprocessor, w) for w in ("the", giant)}
  assert len(pieces["the"]) == 1 and len(pieces[giant]) > 6
  cls, sep, cut = 2, 3, pieces[giant][:6]
  pack = word_pieces.make_word_packer(preprocessor, 8)
  out = pack(
      tf.constant([f"{giant} the", "the the"]),
      tf.ragged.constant([[3, 0], [1, 2]], tf.int32))
  assert out["input_word_ids"].numpy().tolist() == [[cls] + cut + [sep],
                                                    [cls] + pieces["the"] * 2 +
                                                    [sep, 0, 0, 0, 0]]
  assert out["label"].numpy().tolist() == [[0, 3] + [0] * 6,
                                           [0, 1, 2] + [0] * 5]
  assert out["weight"].numpy().tolist()[0] == [0, 1] + [0] * 6
  assert out["words_cut"].numpy().tolist() == [1, 0]
  evals = {
      k: v.numpy().tolist() for k, v in _encoded(preprocessor, [(
          ["the", giant, "the"], ["O", "B-PER", "O"])], 8, True).items()
  }
  the = [cls] + pieces["the"] + [sep] + [0] * 5
  assert evals["input_word_ids"] == [the, [cls] + cut + [sep], the]
  assert evals["word"] == [[-1, 0] + [-1] * 6, [-1, 1] + [-1] * 6,
                           [-1, 2] + [-1] * 6]
  assert evals["label"] == [[0] * 8, [0, 3] + [0] * 6, [0] * 8]
  assert evals["sentence"] == [[0] * 8] * 3


def _tag_batches(preprocessor, sentences, size, seq_length):
  ids = {t: i for i, t in enumerate(TAGS)}
  encode = word_pieces.tagged(preprocessor, seq_length)
  out = []
  for start in range(0, len(sentences), size):
    part = sentences[start:start + size]
    out.append(
        encode(
            tf.constant([" ".join(w) for w, _ in part]),
            dict(
                tags=tf.constant(
                    [" ".join(str(ids[t]) for t in ts) for _, ts in part]),
                index=tf.zeros([len(part)], tf.int64))))
  return out


def _train_tagger(strategy, encoder_path, batches, accumulation_steps=1):
  with strategy.scope():
    model = model_lib.Classifier(
        hub.load(encoder_path),
        len(TAGS),
        dropout_rate=0.0,
        seed=3,
        pooling="tokens")
    opt = optimization.AdamW(model.trainable_variables,
                             optimization.WarmupLinearDecay(1e-3, 10, 2))
  step = train_step.make_train_step(
      model,
      opt,
      int(batches[0]["label"].shape[0]),
      accumulation_steps=accumulation_steps,
      per_token=True)
  losses = testing.step_each(strategy, step, batches)
  return losses, [v.numpy() for v in model.trainable_variables]


@pytest.mark.core
def test_the_loss_counts_the_global_batchs_words(preprocessor,
                                                 no_dropout_encoder,
                                                 strategies):
  """The cross-entropy of the tagged pieces over the weighted pieces of
  the WHOLE batch: 1 replica, and 2 replicas each accumulating 2
  micro-batches, whose parts hold different numbers of words, give the
  same losses and weights (a per-replica or per-micro-batch mean would
  not)."""
  sentences = _sentences(24, seed=2)
  batches = _tag_batches(preprocessor, sentences, 8, 16)
  quarters = [
      float(tf.reduce_sum(b["weight"][i * 2:(i + 1) * 2]))
      for b in batches[:1]
      for i in range(4)
  ]
  assert len(set(quarters)) > 1, quarters  # unequal parts: the test bites
  one, two = strategies
  loss1, w1 = _train_tagger(one, no_dropout_encoder, batches)
  loss2, w2 = _train_tagger(two, no_dropout_encoder, batches, 2)
  np.testing.assert_allclose(loss1, loss2, atol=1e-5)
  assert loss1[0] != loss1[-1]
  for a, b in zip(w1, w2):
    np.testing.assert_allclose(a, b, atol=1e-5)


@pytest.mark.core
def test_shared_rows_train_the_tagger_of_fixed_shapes(tmp_path, preprocessor,
                                                      no_dropout_encoder,
                                                      strategies):
  """Dropout off: 2 epochs of tagged sentences in shared rows on 2 replicas
  give the weights of fixed shapes on 1: per-token labels and weights
  follow their tokens into rows."""
  path = write_conll(tmp_path / "t.txt", _sentences(30, seed=3))
  tag_set = tagged_sources.read_tag_set(tagged_sources.FileSource(path), TAGS)
  split = testing.split_of(tagged_sources.FileSource(path, tag_set))
  one, two = strategies
  encode = word_pieces.tagged(preprocessor, 16)
  _, fixed, _, _ = testing.two_epochs(one, no_dropout_encoder, split, encode,
                                      None, 5, len(TAGS), "tokens")
  _, shared, _, shapes = testing.two_epochs(two, no_dropout_encoder, split,
                                            encode, (2, 4), 5, len(TAGS),
                                            "tokens")
  assert shapes & {2, 4}  # rows were shared
  for a, b in zip(shared, fixed):
    np.testing.assert_allclose(a, b, atol=1e-5)


def test_a_tagging_run_scores_entities_and_keeps_its_tags(tmp_path, demo_paths):
  """A run on a CoNLL file (validation carved from it) scores every
  validation sentence (entity F1, precision, recall, word accuracy);
  config.json records the tag set read from the data; a resume that names
  other tags is refused in one line, the folder unchanged."""
  path = write_conll(tmp_path / "train.txt", _sentences(400, seed=4))
  flags = dict(
      task="tagging",
      train_file=path,
      seq_buckets="none",
      eval_metrics="",
      validation_fraction=0.2)
  c = tiny_config(tmp_path / "run", demo_paths["root"], **flags)
  summary = train_lib.fit(c)
  for key in ("eval_f1", "eval_precision", "eval_recall", "eval_accuracy"):
    assert 0.0 <= summary[key] <= 1.0, key
  assert summary["eval_examples"] == summary["examples"]["validation"] > 0
  record = json.load(open(os.path.join(c.model_dir, "config.json")))
  assert record["task"]["kind"] == "tagging"
  assert tuple(record["task"]["class_names"]) == ("O", "B-LOC", "I-LOC",
                                                  "B-PER", "I-PER")
  assert record["config"]["num_classes"] == 5
  before = testing.tree_digest(c.model_dir)
  other = tiny_config(
      tmp_path / "run",
      demo_paths["root"],
      label_names="O,B-PER,I-PER,B-LOC,I-LOC",
      train_steps=12,
      **flags)
  with pytest.raises(errors.ConfigError, match="not --label_names="):
    launch.setup(other)
  assert testing.tree_digest(c.model_dir) == before


GARDEN = os.path.join(os.path.dirname(__file__), "data", "model_garden_bert")


@pytest.mark.parametrize("encoder", ["model_garden", "opaque"])
def test_any_bert_encoder_tags(encoder, tmp_path, demo_paths, opaque_encoder,
                               caplog, info_logging):
  """A tagging run on a TF Hub BERT of Model Garden's exporter (with TF
  Hub's preprocessor) trains in shared rows, the encoder rebuilt as for
  classification; one on an opaque SavedModel (not rebuilt) trains one
  example a row, saying why. Either: the loss finite, every validation
  sentence scored, and the model restored from the run's folder gives
  logits per token."""
  if encoder == "model_garden":
    handles = (os.path.join(GARDEN,
                            "encoder"), os.path.join(GARDEN, "preprocessor"))
  else:
    handles = (opaque_encoder, demo_paths["preprocessor"])
  sentences = _sentences(200, seed=11)
  c = tiny_config(
      tmp_path / "run",
      demo_paths["root"],
      task="tagging",
      train_file=write_conll(tmp_path / "train.txt", sentences),
      seq_buckets="none",
      eval_metrics="",
      validation_fraction=0.2,
      encoder_handle=handles[0],
      preprocessor_handle=handles[1],
      train_steps=4,
      eval_every=0)
  summary = train_lib.fit(c)
  record = json.load(open(os.path.join(c.model_dir, "config.json")))
  layout = layout_lib.Layout.from_record(record, c)
  said = [r.getMessage() for r in caplog.records if "Shared rows" in r.message]
  if encoder == "model_garden":
    assert layout.kind == layout_lib.ROWS and record["shared_rows"]
    assert said[0].startswith(
        "Shared rows (--shared_rows=auto): a batch of 16 in ")
  else:
    assert layout.kind == layout_lib.FIXED and record["shared_rows"] is None
    assert said == [
        f"Shared rows: off, one example a row (--encoder_handle="
        f"{opaque_encoder} is a SavedModel this trainer cannot rebuild "
        "(neither its own encoder nor a Model Garden BERT), whose graph "
        "takes one example a row)"
    ]
  assert np.isfinite(summary["train_loss"])
  assert summary["eval_examples"] == summary["examples"]["validation"] == 34
  c = run_folder.read_run_config(c.model_dir)
  preprocessor, model, _, step = run_folder.load_classifier(c)
  assert step == 4
  batch = _encoded(preprocessor, sentences[:3], 32)
  logits = model(features_lib.encoder_inputs(batch))
  assert logits.shape == (3, 32, len(TAGS))
  assert np.isfinite(logits.numpy()).all()


def test_the_entity_scores_match_the_metric_module(preprocessor):
  """`eval_step.evaluate`'s tagging path puts each word back in its
  sentence: scoring gathered tokens (shuffled, as shared rows and windows
  leave them) equals scoring the sentences directly."""
  sentences = _sentences(50, seed=5, longest=20)
  rng = np.random.default_rng(6)
  ids = {t: i for i, t in enumerate(TAGS)}
  tokens = [(i, j, ids[t], int(rng.integers(len(TAGS))))
            for i, (_, ts) in enumerate(sentences)
            for j, t in enumerate(ts)]
  rng.shuffle(tokens)
  sentence, word, gold, predicted = (
      np.array(x, np.float32) for x in zip(*tokens))
  padding = np.zeros(7, np.float32)
  totals = dict(
      sentence=np.concatenate([sentence, padding]),
      word=np.concatenate([word, padding - 1]),
      label=np.concatenate([gold, padding]),
      prediction=np.concatenate([predicted, padding]),
      weight=np.concatenate([np.ones_like(gold), padding]))
  got = eval_step._tagging(totals, TAGS)  # pylint: disable=protected-access
  by_sentence = {}
  for i, j, g, p in sorted(tokens):
    by_sentence.setdefault(i, ([], []))
    by_sentence[i][0].append(TAGS[g])
    by_sentence[i][1].append(TAGS[p])
  want = tagging_metrics.tagging_metrics([g for g, _ in by_sentence.values()],
                                         [p for _, p in by_sentence.values()])
  assert got["f1"] == want["f1"] and got["accuracy"] == want["accuracy"]
  assert got["examples"] == 50 and got["per_type"] == want["per_type"]


def test_the_wrong_task_for_a_file_is_one_line(tmp_path):
  """Classification on a CoNLL file, and tagging on a CSV of texts and
  labels: each one line naming the mismatch and the flag that fits."""
  conll = write_conll(tmp_path / "t.txt", _sentences(4, seed=7))
  csv = tmp_path / "t.csv"
  testing.write_csv(csv, [("good movie", 1), ("bad plot", 0)])
  wrong = invoke("main", f"--train_file={conll}",
                 f"--model_dir={tmp_path / 'a'}")
  assert wrong.returncode == 2
  assert wrong.stderr.strip().splitlines()[-1].endswith(
      "It looks like a CoNLL file of tagged words (a word and its tag a "
      "line): train it with --task=tagging")
  wrong = invoke("main", "--task=tagging", f"--train_file={csv}",
                 f"--model_dir={tmp_path / 'b'}")
  assert wrong.returncode == 2
  assert wrong.stderr.strip().splitlines()[-1].endswith(
      "has one column: CoNLL lines hold a word and its tag (the tag last); "
      "it reads as a CSV/TSV of texts and labels, which "
      "--task=classification trains")


@pytest.mark.parametrize(
    "jit_compile", [False, pytest.param(True, marks=pytest.mark.xla)])
def test_a_word_draws_its_dropout_masks_in_shared_rows(demo_paths, preprocessor,
                                                       jit_compile):
  """Dropout on (the encoder's and the tagging head's): from the same
  generator state and step seed, every token gets the training logits in
  shared rows that it gets one sentence a row, to float rounding; the masks
  are drawn (the logits are not inference's)."""
  rebuilt = native.NativeEncoder.load(
      hub.load(demo_paths["encoder"]), hashed_dropout=True)
  model = model_lib.Classifier(rebuilt, len(TAGS), seed=1, pooling="tokens")
  state = rebuilt.encoder.dropout_rng.state.numpy()
  seed = tf.constant([7, 11])
  call = tf.function(
      lambda x: model(x, training=True, dropout_seed=seed),
      jit_compile=jit_compile)
  batch = _tag_batches(preprocessor, _sentences(8, seed=8), 8, 32)[0]
  one = {k: v[tf.newaxis] for k, v in batch.items()}
  one["length"] = tf.reduce_sum(one["input_mask"], axis=-1)
  laid, _ = row_layout.block_layout(one, (3,), 32)
  rows = {k: v[0] for k, v in laid.items()}
  assert rows["input_word_ids"].shape[0] == 3  # 8 sentences share 3 rows
  rebuilt.encoder.dropout_rng.state.assign(state)
  fixed = call(features_lib.encoder_inputs(batch)).numpy()
  rebuilt.encoder.dropout_rng.state.assign(state)
  shared = call(features_lib.encoder_inputs(rows)).numpy()
  ids = rows["input_example_ids"].numpy()
  index = rows["input_example_index"].numpy()
  position = rows["input_position_ids"].numpy()
  r, t = np.nonzero(ids)
  example = index[r, ids[r, t] - 1]
  assert len(r) == int(batch["input_mask"].numpy().sum())
  np.testing.assert_allclose(
      shared[r, t], fixed[example, position[r, t]], atol=1e-5)
  inference = model(features_lib.encoder_inputs(batch)).numpy()
  assert np.abs(fixed - inference).max() > 1e-3


def test_the_doctor_checks_a_tagging_run(demo_paths, tmp_path, info_logging):
  """`trainer.doctor` on a tagging configuration: the tags read as training
  reads them, the data counted, the layout training would choose, and the
  tagging step compiled with XLA."""
  path = write_conll(tmp_path / "t.txt", _sentences(120, seed=9))
  checks = {
      c.name: c for c in doctor_checks.run_checks(
          config_lib.Config(
              task="tagging",
              train_file=path,
              model_dir=str(tmp_path / "m"),
              demo_cache_dir=demo_paths["root"],
              seq_length=32,
              batch_size=16,
              jit_compile=True),
          rows=100)
  }
  assert all(c.ok for c in checks.values()), [c.line() for c in checks.values()]
  assert checks["data.train"].detail.endswith(
      "first 100 rows: 100 used, rejected none")
  assert checks["shared_rows"].detail.startswith(
      "Shared rows (--shared_rows=auto): a batch of 16 in")
  assert checks["xla"].detail == (
      "training compiles the step with XLA (compiled here once)")
