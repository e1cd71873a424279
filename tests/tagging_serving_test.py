"""A tagging run's export: raw text split into words with offsets, each
word's tag (its first piece's), the entities, long sentences in windows,
bad input, `trainer.predict`'s rows and `trainer.evaluate`'s scores, on
all-MiniLM-L6-v2 converted and fine-tuned on a few CoNLL-2003 sentences."""

import dataclasses
import json
import os

import numpy as np
import pytest
import tensorflow as tf

from conftest import ROOT
from conftest import run_outside_project
from trainer.data import word_pieces
from trainer.data import word_split
from trainer.evaluation import tagging as tagging_metrics
from trainer.foundation import config as config_lib
from trainer.foundation import features
from trainer.foundation import tasks
from trainer.serving import evaluate as evaluate_lib
from trainer.serving import export as export_lib
from trainer.serving import run_folder
from trainer.serving import tagged_evaluate
from trainer.training import train_lib

CONLL = os.path.join(os.path.dirname(ROOT), "shared", "data", "conll2003")
SEQ_LENGTH = 32
# A word of 80 pieces, more than a row of SEQ_LENGTH holds (a word of over
# 100 characters would be one unknown piece instead).
GIANT = "qzxj" * 20


def _sentences(path, n):
  """The first `n` sentences of a CoNLL file: [(words, tags)]."""
  out, words, tags = [], [], []
  with open(path, encoding="utf-8") as f:
    for line in f:
      parts = line.split()
      if parts:
        words.append(parts[0])
        tags.append(parts[-1])
      elif words:
        out.append((words, tags))
        words, tags = [], []
        if len(out) == n:
          break
  return out


def _write_conll(path, sentences):
  with open(path, "w", encoding="utf-8") as f:
    for words, tags in sentences:
      f.write("".join(f"{w} NNP O {t}\n" for w, t in zip(words, tags)) + "\n")
  return str(path)


@pytest.fixture(scope="module")
def ner(tmp_path_factory, minilm):
  """MiniLM fine-tuned for 24 steps on 48 training sentences (seq 32, so
  long sentences are cut in training and windowed in evals), validated on
  16 dev sentences and exported at the end, once per module."""
  folder = tmp_path_factory.mktemp("ner")
  dev = _sentences(os.path.join(CONLL, "dev.txt"), 16)
  train = _write_conll(folder / "train.txt",
                       _sentences(os.path.join(CONLL, "train.txt"), 48))
  dev_file = _write_conll(folder / "dev.txt", dev)
  c = config_lib.Config(
      task="tagging",
      encoder_handle=os.path.join(minilm, "encoder"),
      preprocessor_handle=os.path.join(minilm, "preprocessor"),
      train_file=train,
      eval_file=dev_file,
      model_dir=str(folder / "run"),
      seq_length=SEQ_LENGTH,
      batch_size=8,
      train_steps=24,
      steps_per_loop=12,
      eval_every=0,
      checkpoint_every=24,
      learning_rate=1e-3,
      eval_batch_size=16,
      eval_metrics="")
  summary = train_lib.fit(c)
  export_dir = summary["export_dir"]
  return dict(
      model_dir=c.model_dir,
      summary=summary,
      export_dir=export_dir,
      dev=dev,
      dev_file=dev_file,
      folder=folder,
      signatures=tf.saved_model.load(export_dir).signatures)


def _split(texts):
  words, starts, ends, _ = word_split.split_with_offsets(tf.constant(texts))
  return ([[w.decode() for w in row] for row in words.to_list()],
          starts.to_list(), ends.to_list())


SPLITS = [
    ("EU rejects German call.", ["EU", "rejects", "German", "call",
                                 "."], [0, 3, 11, 18, 22], [2, 10, 17, 22, 23]),
    ("  U.S.\tcaf\u00e9,\u00a0ok ",
     ["U", ".", "S", ".", "caf\u00e9", ",",
      "ok"], [2, 3, 4, 5, 7, 11, 13], [3, 4, 5, 6, 11, 12, 15]),
    ("\u65e5\u672cx (a)", ["\u65e5", "\u672c", "x", "(", "a",
                           ")"], [0, 1, 2, 4, 5, 6], [1, 2, 3, 5, 6, 7]),
    ("a\x00b \x00 \u200b", ["a\x00b", "\x00", "\u200b"], [0, 4, 6], [3, 5, 7]),
    # Astral characters are one character each (an emoji stays in its word,
    # a CJK Extension B ideograph is a word of its own); a decomposed
    # accent is two; non-ASCII punctuation is a word of its own.
    ("hi \U0001F600 there\U0001F600x", ["hi", "\U0001F600",
                                        "there\U0001F600x"], [0, 3,
                                                              5], [2, 4, 12]),
    ("\U00020000\U00020001ab", ["\U00020000", "\U00020001",
                                "ab"], [0, 1, 2], [1, 2, 4]),
    ("cafe\u0301 n\u0303o", ["cafe\u0301", "n\u0303o"], [0, 6], [5, 9]),
    ("\u00abHola\u00bb\u2014dijo\u2026 \u00bfs\u00ed?", [
        "\u00ab", "Hola", "\u00bb", "\u2014", "dijo", "\u2026", "\u00bf",
        "s\u00ed", "?"
    ], [0, 1, 5, 6, 7, 11, 13, 14, 16], [1, 5, 6, 7, 11, 12, 14, 16, 17]),
    (" \t\n ", [], [], []),
    ("", [], [], []),
]


def test_raw_text_splits_into_words_with_character_offsets():
  """Whitespace separates words, each punctuation character and CJK
  ideograph is a word of its own, control characters stay in their word
  (a word of only them is a word); offsets count characters. The same
  eagerly and inside tf.data."""
  texts = [t for t, *_ in SPLITS]
  want = ([w for _, w, _, _ in SPLITS], [s for _, _, s, _ in SPLITS],
          [e for *_, e in SPLITS])
  assert _split(texts) == want
  ds = tf.data.Dataset.from_tensor_slices(texts).batch(
      len(texts)).map(lambda t: word_split.split_with_offsets(t)[:3])
  words, starts, ends = next(iter(ds))
  assert [[w.decode() for w in row] for row in words.to_list()] == want[0]
  assert (starts.to_list(), ends.to_list()) == want[1:]
  for text, words, starts, ends in SPLITS:
    assert [text[s:e] for s, e in zip(starts, ends)] == words


def test_invalid_utf8_is_repaired_as_python_decodes_it():
  """A bad byte, a truncated sequence, a surrogate's and an overlong form's
  bytes: the repaired text is Python's `decode("utf-8", "replace")`, and
  the words and offsets slice it."""
  raw = [
      b"a\xffb c", b"\xe2\x82 x", b"\xed\xa0\x80y", b"\xc0\xaf z\xf0\x9f\x98"
  ]
  words, starts, ends, texts = word_split.split_with_offsets(tf.constant(raw))
  decoded = [r.decode("utf-8", "replace") for r in raw]
  assert [t.decode() for t in texts.numpy()] == decoded
  want = [["a\ufffdb", "c"], ["\ufffd", "x"], ["\ufffd" * 3 + "y"],
          ["\ufffd" * 2, "z\ufffd"]]
  assert [[w.decode() for w in row] for row in words.to_list()] == want
  for text, row, s, e in zip(decoded, words.to_list(), starts.to_list(),
                             ends.to_list()):
    assert [text[a:b] for a, b in zip(s, e)] == [w.decode() for w in row]


def _served(signatures, texts, name="serving_default"):
  out = signatures[name](text=tf.constant(texts, tf.string))
  return {k: v.numpy() for k, v in out.items()}


def _row(out, key, i):
  n = out["entity_count" if key.startswith("entity") else "word_count"][i]
  values = out[key][i, :n].tolist()
  return [v.decode() if isinstance(v, bytes) else v for v in values]


def _training_path_tags(ner, sentences=None):
  """Each sentence's tags ([(words, tags)], default the dev sentences) as
  the run's model predicts them through training's eval input
  (`word_pieces.tagged` in windows, fixed shapes): the argmax of each
  word's first piece."""
  c = run_folder.read_run_config(ner["model_dir"])
  preprocessor, model, _, step = run_folder.load_classifier(c)
  assert step == ner["summary"]["best_step"]
  names = c.label_names.split(",")
  ids = {t: i for i, t in enumerate(names)}
  dev = sentences or ner["dev"]
  encode = word_pieces.tagged(preprocessor, c.seq_length, True)
  tags = [" ".join(str(ids[t]) for t in ts) for _, ts in dev]
  batch = encode(
      tf.constant([" ".join(w) for w, _ in dev]),
      dict(tags=tf.constant(tags), index=tf.range(len(dev), dtype=tf.int64)))
  logits = model(features.encoder_inputs(batch), training=False).numpy()
  predicted = [[None] * len(w) for w, _ in dev]
  first = batch["word"].numpy() >= 0
  for s, w, tag in zip(batch["sentence"].numpy()[first],
                       batch["word"].numpy()[first],
                       logits.argmax(-1)[first]):
    assert predicted[s][w] is None  # each word once
    predicted[s][w] = names[tag]
  return predicted, batch["input_word_ids"].shape[0]


def test_served_tags_are_the_models_argmax_on_the_training_path(ner):
  """`serve_words` on the dev sentences' words (and the shared rows twin,
  and `serving_default` on raw text splitting into the same words) gives
  every word the tag training's eval path predicts, long sentences (more
  than seq_length pieces, several windows) included."""
  want, windows = _training_path_tags(ner)
  assert windows > len(ner["dev"])  # some sentences took several windows
  longest = max(len(w) for w, _ in ner["dev"])
  words = tf.constant([w + [""] * (longest - len(w)) for w, _ in ner["dev"]])
  for name in ("serve_words", "serve_words_shared_rows"):
    served = ner["signatures"][name](words=words)
    out = {k: v.numpy() for k, v in served.items()}
    assert out["word_count"].tolist() == [len(w) for w, _ in ner["dev"]]
    assert [_row(out, "tags", i) for i in range(len(want))] == want, name
  # Raw text: the tags of the words it splits into (`serve_words` on them).
  texts = [" ".join(w) for w, _ in ner["dev"]]
  split, _, _ = _split(texts)
  longest = max(len(w) for w in split)
  words = tf.constant([w + [""] * (longest - len(w)) for w in split])
  want = ner["signatures"]["serve_words"](words=words)["tags"].numpy()
  for name in ("serving_default", "serve_shared_rows"):
    out = _served(ner["signatures"], texts, name)
    assert [_row(out, "words", i) for i in range(len(texts))] == split
    np.testing.assert_array_equal(out["tags"], want)


def test_entities_slice_the_text_and_follow_the_tags(ner):
  """Over the dev sentences as raw text: every word's and every entity's
  offsets slice the text to it; the entities are the tags' chunks
  (conlleval's, as the eval reads them), each scored the mean of its
  words' scores; fixed shapes and shared rows agree."""
  texts = [" ".join(w) for w, _ in ner["dev"]]
  out = _served(ner["signatures"], texts)
  rows = _served(ner["signatures"], texts, "serve_shared_rows")
  np.testing.assert_array_equal(out["tag_ids"], rows["tag_ids"])
  np.testing.assert_allclose(
      out["probabilities"], rows["probabilities"], atol=1e-5)
  found = 0
  for i, text in enumerate(texts):
    words, tags = _row(out, "words", i), _row(out, "tags", i)
    starts, ends = _row(out, "starts", i), _row(out, "ends", i)
    assert [text[s:e] for s, e in zip(starts, ends)] == words
    spans = tagging_metrics.entities(tags)
    assert list(
        zip(
            _row(out, "entity_types", i), _row(out, "entity_word_starts", i),
            _row(out, "entity_word_ends", i))) == spans
    scores = _row(out, "scores", i)
    for k, (kind, first, end) in enumerate(spans):
      start, stop = _row(out, "entity_starts",
                         i)[k], _row(out, "entity_ends", i)[k]
      assert (start, stop) == (starts[first], ends[end - 1])
      assert text[start:stop] == _row(out, "entity_texts", i)[k]
      assert _row(out, "entity_scores", i)[k] == pytest.approx(
          np.mean(scores[first:end]), rel=1e-6)
    found += len(spans)
  assert found > 0


def test_a_sentence_longer_than_seq_length_keeps_every_word(ner):
  """Windows of whole words: 60 words (several windows), and a word of more
  pieces than a row holds (alone, its pieces cut): every word tagged once,
  in place."""
  text = " ".join(["Germany"] * 30 + ["Blackburn", "said"] * 15)
  giant = f"x {GIANT} y"
  out = _served(ner["signatures"], [text, giant])
  assert out["word_count"].tolist() == [60, 3]
  assert all(t for t in _row(out, "tags", 0)) and all(_row(out, "tags", 1))
  single = _served(ner["signatures"], ["Germany"] * 2)
  assert _row(out, "tags", 0)[0] == _row(single, "tags", 0)[0]


def test_evals_and_serving_score_a_giant_word_alike(ner):
  """A word of more pieces than a row holds, first and inside a sentence:
  training's eval encode scores it (its first pieces, alone in a row) as
  `serve_words` does, with every other word of the sentence."""
  sentences = [([GIANT, "in", "Germany"], ["B-MISC", "O", "B-LOC"]),
               (["EU", GIANT, "call", "."], ["B-ORG", "B-MISC", "O", "O"])]
  want, windows = _training_path_tags(ner, sentences)
  assert windows == 5  # each giant word alone in its window
  words = tf.constant([w + [""] * (4 - len(w)) for w, _ in sentences])
  for name in ("serve_words", "serve_words_shared_rows"):
    served = ner["signatures"][name](words=words)
    out = {k: v.numpy() for k, v in served.items()}
    assert out["word_count"].tolist() == [3, 4]
    assert [_row(out, "tags", i) for i in range(2)] == want, name


def test_empty_space_only_and_control_character_inputs(ner):
  """No text, no words; a text of spaces: no words, no entities; a word of
  only control characters (no piece) still gets a tag."""
  for name in ("serving_default", "serve_shared_rows"):
    out = _served(ner["signatures"], ["", " \t\n ", "EU \x00\u200b call"], name)
    assert out["word_count"].tolist() == [0, 0, 3]
    assert out["entity_count"].tolist()[:2] == [0, 0]
    assert _row(out, "words", 2) == ["EU", "\x00\u200b", "call"]
    assert (_row(out, "starts", 2), _row(out, "ends", 2)) == ([0, 3,
                                                               6], [2, 5, 10])
    assert all(_row(out, "tags", 2))
    assert out["scores"][2, 1] > 0
    none = _served(ner["signatures"], [" "], name)
    assert none["words"].shape == (1, 0) and none["entity_types"].shape == (1,
                                                                            0)
  empty = _served(ner["signatures"], [])
  assert empty["word_count"].shape == (0,)


def test_words_with_invalid_utf8_are_repaired_as_text_is(ner):
  """`serve_words` repairs a bad byte as `serving_default` does: the words
  served, their offsets and tags are those of the repaired words."""
  bad = tf.constant([[b"EU", b"caf\xff", b"call", b""]])
  repaired = tf.constant([["EU", "caf\ufffd", "call", ""]])
  served = ner["signatures"]["serve_words"](words=bad)
  want = ner["signatures"]["serve_words"](words=repaired)
  assert _row({
      k: v.numpy() for k, v in served.items()
  }, "words", 0) == ["EU", "caf\ufffd", "call"]
  for key in ("words", "starts", "ends", "tag_ids", "entity_texts"):
    np.testing.assert_array_equal(served[key].numpy(), want[key].numpy())
  text = _served(ner["signatures"], [b"EU caf\xff call"])
  np.testing.assert_array_equal(text["tag_ids"], want["tag_ids"].numpy())


def test_the_run_folders_export_serves_as_the_runs_own(ner, tmp_path):
  """`trainer.export --model_dir` rebuilds the tagging run from its folder:
  the same tags and entities as the export the run wrote."""
  export_dir = export_lib.export_run(
      ner["model_dir"], export_base_dir=str(tmp_path / "export"))
  again = tf.saved_model.load(export_dir).signatures
  texts = [" ".join(w) for w, _ in ner["dev"]]
  a, b = _served(ner["signatures"], texts), _served(again, texts)
  for key in ("tag_ids", "starts", "entity_types", "entity_starts"):
    np.testing.assert_array_equal(a[key], b[key])
  np.testing.assert_allclose(a["probabilities"], b["probabilities"], atol=1e-5)


def test_a_fresh_process_without_the_project_serves_the_tags(ner, tmp_path):
  """The export loads with TensorFlow and TF Text alone and serves what
  this process serves."""
  text = "EU rejects German call to boycott British lamb."
  out = run_outside_project(
      tmp_path, f"""
import json, sys
import tensorflow as tf
import tensorflow_text  # noqa: F401  registers the preprocessor's ops
loaded = tf.saved_model.load({ner['export_dir']!r})
out = loaded.signatures["serving_default"](text=tf.constant([{text!r}]))
print(json.dumps(dict(
    trainer_imported="trainer" in sys.modules,
    tags=[t.decode() for t in out["tags"].numpy()[0]],
    names=[n.decode() for n in loaded.tag_names().numpy()])))
""")
  assert out["trainer_imported"] is False
  assert out["tags"] == _row(_served(ner["signatures"], [text]), "tags", 0)
  assert out["names"] == [
      "O", "B-LOC", "I-LOC", "B-MISC", "I-MISC", "B-ORG", "I-ORG", "B-PER",
      "I-PER"
  ]


def test_predict_writes_words_and_entities(ner, tmp_path, command):
  """JSON lines, one per input line: the text, its words with tags, scores
  and offsets, its entities as Hugging Face's pipeline keys them; a line
  of spaces and an empty line give empty lists; an empty file no row."""
  text = "EU rejects German call to boycott British lamb."
  path = tmp_path / "in.txt"
  path.write_text(f"{text}\n   \n\n")
  out = tmp_path / "out.jsonl"
  result = command("predict", f"--export_dir={ner['export_dir']}",
                   f"--input_file={path}", f"--output_file={out}")
  assert result.returncode == 0, result.stderr[-2000:]
  rows = [json.loads(line) for line in out.read_text().splitlines()]
  assert [r["text"] for r in rows] == [text, "   ", ""]
  assert rows[1:] == [
      dict(text="   ", words=[], entities=[]),
      dict(text="", words=[], entities=[])
  ]
  served = _served(ner["signatures"], [text])
  words = rows[0]["words"]
  want = [("EU", 0, 2), ("rejects", 3, 10), ("German", 11, 17),
          ("call", 18, 22), ("to", 23, 25), ("boycott", 26, 33),
          ("British", 34, 41), ("lamb", 42, 46), (".", 46, 47)]
  assert [(w["word"], w["start"], w["end"]) for w in words] == want
  assert [w["tag"] for w in words] == _row(served, "tags", 0)
  assert [(e["entity_group"], e["word"], e["start"], e["end"])
          for e in rows[0]["entities"]] == list(
              zip(
                  _row(served, "entity_types", 0),
                  _row(served, "entity_texts", 0),
                  _row(served, "entity_starts", 0),
                  _row(served, "entity_ends", 0)))
  for e in rows[0]["entities"]:
    assert text[e["start"]:e["end"]] == e["word"]
    assert set(e) == {"entity_group", "score", "word", "start", "end"}
  empty = tmp_path / "empty.txt"
  empty.write_text("")
  result = command("predict", f"--export_dir={ner['export_dir']}",
                   f"--input_file={empty}")
  assert (result.returncode, result.stdout) == (0, "")


def _jsonl(path, sentences):
  with open(path, "w", encoding="utf-8") as f:
    for words, tags in sentences:
      f.write(json.dumps(dict(tokens=words, ner_tags=tags)) + "\n")
  return str(path)


def test_evaluate_reports_what_the_runs_eval_reported(ner, tmp_path):
  """`trainer.evaluate --task=tagging` on the dev file (CoNLL, and the same
  sentences as JSON lines) with the export, and with --model_dir, scores
  every word and reports the run's own eval of that checkpoint."""
  summary = ner["summary"]
  words = sum(len(w) for w, _ in ner["dev"])
  jsonl = _jsonl(tmp_path / "dev.jsonl", ner["dev"])
  results = [
      evaluate_lib.evaluate(
          config_lib.Config(task="tagging"), {"task"},
          export_dir=ner["export_dir"],
          input_file=path) for path in (ner["dev_file"], jsonl)
  ]
  results.append(
      evaluate_lib.evaluate(
          config_lib.Config(model_dir=ner["model_dir"]), {"model_dir"},
          split="validation"))
  for result in results:
    for key in ("f1", "precision", "recall", "accuracy"):
      assert result[key] == summary[f"eval_{key}"], key
    assert result["loss"] == pytest.approx(summary["eval_loss"], rel=1e-5)
    assert (result["examples"], result["words"]) == (16, words)
    assert set(result["per_type"]) == {"LOC", "MISC", "ORG", "PER"}
  assert results[0]["per_type"] == results[1]["per_type"] == results[2][
      "per_type"]
  assert results[2]["step"] == summary["best_step"]


def _iob1(tags):
  """IOB2 tags as the original CoNLL files write them: I- opens an entity,
  B- only one directly after another of its type."""
  out, previous = [], ""
  for tag in tags:
    kind = tag[2:]
    out.append(
        f"I-{kind}" if tag.startswith("B-") and kind != previous else tag)
    previous = kind
  return out


def test_evaluate_converts_an_iob1_file_as_training_does(ner, tmp_path):
  """An IOB1 copy of the dev file scores what the IOB2 original scores:
  its scheme is detected and converted as training's reading does; its
  --tensorboard_dir holds the eval scalars."""
  iob1 = [(w, _iob1(t)) for w, t in ner["dev"]]
  assert iob1 != ner["dev"]
  path = _write_conll(tmp_path / "dev_iob1.txt", iob1)
  board = tmp_path / "tb"
  results = [
      evaluate_lib.evaluate(
          config_lib.Config(task="tagging"), {"task"},
          export_dir=ner["export_dir"],
          input_file=f,
          tensorboard_dir=str(board) if f == path else "")
      for f in (ner["dev_file"], path)
  ]
  for key in ("f1", "precision", "recall", "accuracy", "loss", "per_type",
              "entities", "words"):
    assert results[1][key] == results[0][key], key
  # --tensorboard_dir: the eval scalars, as training's eval names them.
  written = {}
  for event in tf.compat.v1.train.summary_iterator(str(next(board.iterdir()))):
    for value in event.summary.value:
      written[value.tag] = (event.step, float(tf.make_ndarray(value.tensor)))
  assert written == {
      f"eval/{k}": (0, pytest.approx(results[1][k], rel=1e-6))
      for k in ("f1", "precision", "recall", "accuracy", "loss")
  }


def test_the_loss_of_a_word_given_probability_0_is_finite(ner):
  """A gold tag whose probability underflows to 0 adds -log(float32's
  least normal number) to the loss, not inf."""
  c = config_lib.Config(task="tagging")
  task = tasks.resolve(c)
  tag_names = ("O", "B-LOC", "I-LOC", "B-MISC", "I-MISC", "B-ORG", "I-ORG",
               "B-PER", "I-PER")
  task = dataclasses.replace(
      task, class_names=tag_names, num_classes=len(tag_names))
  split = tagged_evaluate.data_split(c, task, input_file=ner["dev_file"])

  def serve(words):
    """Every word tagged O with probability 1, every other tag 0."""
    count = tf.reduce_sum(tf.cast(words != "", tf.int32), axis=1)
    shape = tf.shape(words)
    return dict(
        word_count=count,
        tags=tf.fill(shape, "O"),
        probabilities=tf.one_hot(tf.zeros(shape, tf.int32), len(tag_names)))

  result = tagged_evaluate.score(serve, split, tag_names)
  gold = [t for _, ts in ner["dev"] for t in ts]
  wrong = sum(t != "O" for t in gold)
  assert 0 < wrong < len(gold)
  per_word = float(-np.log(np.finfo(np.float32).tiny))  # float32's, 87.34
  assert per_word == pytest.approx(87.336544)
  assert result["loss"] == pytest.approx(
      wrong * per_word / len(gold), rel=1e-12)


def test_the_wrong_kind_of_model_is_one_line(ner, demo_run, command, tmp_path):
  """A tagging export or run on classification's path, and a classifier's
  export with --task=tagging: each one line, exit 2."""
  cases = [
      (("evaluate", f"--export_dir={ner['export_dir']}",
        f"--input_file={ner['dev_file']}"), "is a tagging export"),
      (("evaluate", f"--model_dir={ner['model_dir']}", "--task=classification"),
       "holds a tagging run"),
      (("evaluate", f"--export_dir={demo_run['export_dir']}", "--task=tagging",
        f"--input_file={ner['dev_file']}"), "is a classification export"),
      (("predict", f"--export_dir={ner['export_dir']}", "--text=a",
        "--text_pair=b"), "is a tagging export"),
  ]
  for args, said in cases:
    result = command(*args)
    assert result.returncode == 2, (args, result.stderr[-2000:])
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and said in lines[0], (args, result.stderr)
