"""GLUE-style tasks: sentence pairs, regression and the metric of each task.

Packing is checked against TF Text's own ops (and transformers' tokenizer
where the `convert` extra is installed), the metrics against hand
computations, the TFDS GLUE tasks end to end through TFDS's mock in real
`trainer.main` processes, and the real GLUE files of ../shared/data/glue.
"""

import glob
import json
import os
import sys

import numpy as np
import pytest
import tensorflow as tf
import tensorflow_datasets as tfds
import tensorflow_text as text

from conftest import ROOT
from conftest import run_module
from conftest import run_outside_project
from conftest import run_process
from conftest import with_project
from trainer.base import config as config_lib
from trainer.base import errors
from trainer import evaluate
from trainer import export
from trainer.data import input_pipeline
from trainer.base import metrics
from trainer.model import classifier as model_lib
from trainer import predict
from trainer.data import preprocessing
from trainer.data import sources
from trainer.loop import train_step

GLUE = os.path.join(os.path.dirname(ROOT), "shared", "data", "glue")
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
SEQ = 24


def _vocab_file(demo_paths):
  return glob.glob(os.path.join(demo_paths["preprocessor"], "assets", "*"))[0]


def _reference(vocab_file, pairs, seq_length):
  """[CLS] a [SEP] b [SEP] from TF Text's ops directly, not through the
  project's preprocessor."""
  with open(vocab_file) as f:
    vocab = [line.rstrip("\n") for line in f]
  tokenizer = text.BertTokenizer(
      vocab_file, lower_case=True, token_out_type=tf.int64)
  segments = [
      tokenizer.tokenize(tf.constant([p[i]
                                      for p in pairs])).merge_dims(-2, -1)
      for i in (0, 1)
  ]
  trimmed = text.RoundRobinTrimmer(max_seq_length=seq_length - 3).trim(segments)
  ids, types = text.combine_segments(
      trimmed,
      start_of_sequence_id=vocab.index("[CLS]"),
      end_of_segment_id=vocab.index("[SEP]"))
  word_ids, mask = text.pad_model_inputs(ids, max_seq_length=seq_length)
  type_ids, _ = text.pad_model_inputs(types, max_seq_length=seq_length)
  return dict(
      input_word_ids=word_ids.numpy(),
      input_mask=mask.numpy(),
      input_type_ids=type_ids.numpy())


def _assert_inputs_equal(got, want):
  for key in train_step.ENCODER_KEYS:
    np.testing.assert_array_equal(np.asarray(got[key]), want[key], err_msg=key)


@pytest.mark.core
def test_pairs_pack_as_tf_text_does_eagerly_and_in_tf_data(demo_paths):
  preprocessor = tf.saved_model.load(demo_paths["preprocessor"])
  pack = preprocessing.make_packer(preprocessor, SEQ)
  strings = tf.constant([list(p) for p in PAIRS])
  want = _reference(_vocab_file(demo_paths), PAIRS, SEQ)
  _assert_inputs_equal({k: v.numpy() for k, v in pack(strings).items()}, want)
  in_data = next(
      iter(
          tf.data.Dataset.from_tensor_slices(strings).batch(
              len(PAIRS)).map(pack)))
  _assert_inputs_equal({k: v.numpy() for k, v in in_data.items()}, want)
  # The layout itself: [CLS] a [SEP] b [SEP], types 0 then 1, trimmed
  # round-robin (both long: 11 + 10 of the 21 places).
  with open(_vocab_file(demo_paths)) as f:
    vocab = [line.rstrip("\n") for line in f]
  cls, sep = vocab.index("[CLS]"), vocab.index("[SEP]")
  ids, types = want["input_word_ids"], want["input_type_ids"]
  length = want["input_mask"][0].sum()  # b empty: a's [SEP], then b's
  assert ids[0][length - 2:length].tolist() == [sep, sep]
  assert types[0].sum() == 1
  assert ids[1][:2].tolist() == [cls, sep]  # a empty
  assert types[1][:3].tolist() == [0, 0, 1]
  assert (types[2] == 1).sum() == 10 + 1 and want["input_mask"][2].sum() == SEQ


def test_pairs_pack_as_transformers_tokenizer_when_nothing_is_trimmed(
    demo_paths):
  transformers = pytest.importorskip(
      "transformers",
      reason="transformers is not installed: pip install -e '.[convert]'")
  hf = transformers.BertTokenizer(_vocab_file(demo_paths), do_lower_case=True)
  pairs = [("hello world", "good movie"), ("The Dog sat.", "a cat, ran!"),
           ("what a day", "awful")]
  preprocessor = tf.saved_model.load(demo_paths["preprocessor"])
  got = preprocessing.make_packer(preprocessor, SEQ)(
      tf.constant([list(p) for p in pairs]))
  want = hf([p[0] for p in pairs], [p[1] for p in pairs],
            padding="max_length",
            max_length=SEQ)
  np.testing.assert_array_equal(got["input_word_ids"], want["input_ids"])
  np.testing.assert_array_equal(got["input_type_ids"], want["token_type_ids"])
  np.testing.assert_array_equal(got["input_mask"], want["attention_mask"])


def test_metrics_against_hand_computed_values():
  confusion = [[5, 1], [2, 3]]  # rows: true class
  assert metrics.f1_positive(confusion) == pytest.approx(6 / 9)
  assert metrics.matthews(confusion) == pytest.approx(13 / np.sqrt(840))
  three = [[3, 1, 0], [0, 2, 1], [1, 0, 2]]
  assert metrics.matthews(three) == pytest.approx(36 / 66)
  # One class predicted only: MCC and F1 are 0, not NaN.
  assert metrics.matthews([[5, 0], [3, 0]]) == 0.0
  assert metrics.f1_positive([[5, 0], [3, 0]]) == 0.0
  assert metrics.pearson([1, 2, 3, 4],
                         [2, 4, 5, 9]) == pytest.approx(11 / np.sqrt(130))
  # Ties share their average rank: x ranks 1, 2.5, 2.5, 4.
  assert metrics.spearman([1, 2, 2, 3],
                          [1, 3, 2, 4]) == pytest.approx(4.5 / np.sqrt(22.5))
  assert metrics.pearson([3, 3, 3], [1, 2, 3]) == 0.0
  assert np.isnan(metrics.spearman([1.0, np.nan, 2.0], [1, 2, 3]))
  assert metrics.from_confusion(confusion, ["accuracy", "f1"]) == dict(
      accuracy=pytest.approx(8 / 11), f1=pytest.approx(6 / 9))


def _pair_file(tmp_path, rows, name="pairs.tsv"):
  path = tmp_path / name
  path.write_text("id\tq\ts\tlabel\n" + "".join(
      f"{i}\t{a}\t{b}\t{y}\n" for i, (a, b, y) in enumerate(rows)))
  return str(path)


def test_an_empty_second_text_is_rejected_with_its_own_reason(tmp_path):
  rows = [(f"question {i}", f"sentence {i}", i % 2) for i in range(20)]
  rows[3] = ("question 3", "  ", 1)
  rows[7] = ("", "sentence 7", 0)
  rows[9] = ("q", "", "maybe")
  path = _pair_file(tmp_path, rows)
  c = config_lib.Config(
      train_file=path, eval_file=path, text_column="q, s", quoting="none")
  split = input_pipeline.make_splits(c)["validation"]
  counts = input_pipeline.count(split, num_classes=2)
  assert counts == dict(
      rows_read=20,
      rows_used=17,
      rejected=dict(empty_text_pair=1, empty_text=1, label_not_a_number=1),
      classes={
          "0": 10,
          "1": 7
      })
  texts, labels = next(iter(input_pipeline.usable_rows(split).batch(3)))
  assert texts.numpy().tolist() == [[b"question 0", b"sentence 0"],
                                    [b"question 1", b"sentence 1"],
                                    [b"question 2", b"sentence 2"]]
  assert labels.numpy().tolist() == [0, 1, 0]


def test_a_word_label_outside_the_map_is_a_broken_row(tmp_path):
  """With word labels any cell is a label, so one outside the map is a
  typo (or a map's), not a class left out on purpose."""
  rows = [(f"q {i}", f"s {i}", ("entailment", "neutral",
                                "contradiction")[i % 3]) for i in range(30)]
  path = _pair_file(tmp_path, rows)
  c = config_lib.Config(
      train_file=path,
      eval_file=path,
      text_column="q,s",
      quoting="none",
      num_classes=3,
      label_map="entailment:0,neutral:1,contradicton:2")
  split = input_pipeline.make_splits(c)["validation"]
  counts = input_pipeline.count(split, num_classes=3)
  assert counts["rejected"] == dict(label_not_in_map=10)
  with pytest.raises(errors.DataError, match="label_not_in_map: 10"):
    input_pipeline.check_bad_fraction(split, counts, 0.01)


def _glue(task, name):
  path = os.path.join(GLUE, task, name)
  if not os.path.exists(path):
    pytest.skip(f"{path} is absent (../shared/data/glue)")
  return path


# (task, train file, flags, rows, classes or None for a regression)
GLUE_FILES = [
    ("MRPC", "train.tsv",
     dict(text_column="#1 String,#2 String", label_column="Quality"), 3667, {
         "0": 1194,
         "1": 2473
     }),
    ("RTE", "train.tsv",
     dict(
         text_column="sentence1,sentence2",
         label_map="not_entailment:0,entailment:1"), 2490, {
             "0": 1241,
             "1": 1249
         }),
    ("CoLA", "train.tsv", dict(header="no", text_column="3",
                               label_column="1"), 8551, {
                                   "0": 2528,
                                   "1": 6023
                               }),
    ("STS-B", "train.tsv",
     dict(
         text_column="sentence1,sentence2", label_column="score",
         num_classes=1), 5749, None),
    ("SST-2", "dev.tsv", dict(text_column="sentence"), 872, {
        "0": 428,
        "1": 444
    }),
]


@pytest.mark.parametrize("task,name,flags,rows,classes", GLUE_FILES)
def test_glue_files_are_read_as_distributed(task, name, flags, rows, classes):
  path = _glue(task, name)
  c = config_lib.Config(
      train_file=path, eval_file=path, quoting="none", **flags)
  split = input_pipeline.make_splits(c)["validation"]
  counts = input_pipeline.count(split, num_classes=c.num_classes)
  want = dict(rows_read=rows, rows_used=rows, rejected={})
  if classes:
    want["classes"] = classes
  assert counts == want
  first = next(iter(input_pipeline.usable_rows(split)))
  if task == "MRPC":  # after the byte-order mark and the header
    assert first[0].numpy()[0].decode().startswith("Amrozi accused")
  if task == "STS-B":
    assert first[1].dtype == tf.float32 and first[1].numpy() == 5.0


def test_glue_tsv_quotes_are_plain_characters_only_with_quoting_none():
  path = _glue("MRPC", "train.tsv")
  flags = dict(
      train_file=path,
      eval_file=path,
      text_column="#1 String,#2 String",
      label_column="Quality")
  split = input_pipeline.make_splits(config_lib.Config(**flags))["validation"]
  quoted = input_pipeline.count(split)
  assert quoted["rows_used"] < 3668 and quoted["rejected"]["malformed_row"]
  with pytest.raises(Exception, match="needs --quoting=none"):
    input_pipeline.check_bad_fraction(split, quoted, 0.01)


def _under_mock(program, *flags, examples=48):
  """`python -m <program> flags` on TFDS's mock data, in a fresh process."""
  return run_process([
      sys.executable,
      os.path.join(ROOT, "tests", "tfds_mock_main.py"),
      str(examples), program, *flags
  ],
                     env=with_project(),
                     timeout=600)


def _mock_main(tmp_path, tfds_name, *flags, examples=48):
  """`trainer.main` on TFDS's mock of `tfds_name`; (model_dir, summary)."""
  model_dir = str(tmp_path / tfds_name.replace("/", "_"))
  result = _under_mock(
      "trainer.main",
      f"--tfds_name={tfds_name}",
      f"--model_dir={model_dir}",
      "--train_steps=4",
      "--seq_length=32",
      "--batch_size=16",
      "--steps_per_loop=2",
      "--learning_rate=1e-3",
      *flags,
      examples=examples)
  assert result.returncode == 0, result.stderr[-3000:]
  with open(os.path.join(model_dir, "summary.json")) as f:
    return model_dir, json.load(f)


@pytest.fixture(autouse=True)
def _demo_cache(demo_paths, monkeypatch):
  """Subprocesses find the session's demo assets instead of ~/.cache."""
  monkeypatch.setenv("BERT_TRAINER_CACHE", os.path.dirname(demo_paths["root"]))


@pytest.mark.slow
def test_tfds_glue_mnli_and_stsb_end_to_end(tmp_path):
  _, mnli = _mock_main(tmp_path, "glue/mnli", "--export=false")
  # Matched is the validation split; mismatched is evaluated beside it;
  # test_matched/test_mismatched (hidden labels) are not evaluated.
  assert mnli["examples"] == dict(
      train=48, validation=48, validation_mismatched=48)
  assert 0 <= mnli["eval_mismatched_accuracy"] <= 1
  assert {"eval_accuracy", "eval_loss"} <= set(mnli)
  assert not any(k.startswith("test_") for k in mnli)
  model_dir, stsb = _mock_main(tmp_path, "glue/stsb",
                               "--early_stopping_metric=eval/spearman")
  assert -1 <= stsb["eval_pearson"] <= 1 and -1 <= stsb["eval_spearman"] <= 1
  assert "eval_accuracy" not in stsb
  assert stsb["best_metric"] == {"eval/spearman": stsb["eval_spearman"]}
  serve, classes = export.load_serving(stsb["export_dir"])
  assert classes == 1 and export.pairs(serve)
  scores = serve(text=tf.constant(["a b"]), text_pair=tf.constant(["c"]))
  assert scores["scores"].shape == [1] and scores["scores"].dtype == tf.float32
  with open(os.path.join(model_dir, "config.json")) as f:
    assert json.load(f)["config"]["num_classes"] == 1
  # evaluate scores a labelled split with the task's metrics.
  scored = _under_mock("trainer.evaluate", f"--export_dir={stsb['export_dir']}",
                       "--tfds_name=glue/stsb", "--split=validation")
  assert scored.returncode == 0, scored.stderr[-3000:]
  scores = json.loads(scored.stdout)
  assert scores["examples"] == 48 and {"pearson", "spearman"} <= set(scores)


@pytest.mark.parametrize("name,split", [("glue/stsb", "test"),
                                        ("glue/mnli", "test_matched"),
                                        ("glue/mrpc", "test[:10%]")])
def test_evaluate_refuses_a_split_whose_labels_are_hidden(name, split):
  # glue/stsb's -1.0 would score as a label; the line names what to run.
  c = config_lib.complete(config_lib.Config(tfds_name=name, model_dir="m"))
  with pytest.raises(errors.ConfigError) as info:
    evaluate.data_split(c, split)
  assert str(info.value) == (
      f"--split={split} of {name} hides its labels (all -1), so it cannot be "
      f"scored: predict it with python -m trainer.predict --tfds_name={name} "
      f"--split={split}")


@pytest.fixture(scope="module")
def mrpc(tmp_path_factory, demo_paths):
  del demo_paths  # (the autouse fixture points the subprocess at it)
  return _mock_main(tmp_path_factory.mktemp("mrpc"), "glue/mrpc")


@pytest.mark.slow
def test_tfds_glue_mrpc_reports_f1_and_accuracy(mrpc):
  _, summary = mrpc
  assert {"eval_f1", "eval_accuracy", "eval_loss"} <= set(summary)
  assert summary["examples"] == dict(train=48, validation=48)


@pytest.mark.slow
def test_the_pair_export_serves_without_the_project_as_the_eval_step(
    mrpc, tmp_path):
  model_dir, summary = mrpc
  served = run_outside_project(
      tmp_path, f"""
import json, sys
import tensorflow as tf
import tensorflow_text  # noqa: F401  registers the preprocessor's ops
serve = tf.saved_model.load({summary['export_dir']!r}).signatures[
    "serving_default"]
out = serve(text=tf.constant({[p[0] for p in PAIRS]!r}),
            text_pair=tf.constant({[p[1] for p in PAIRS]!r}))
print(json.dumps(dict(trainer="trainer" in sys.modules,
                      probabilities=out["probabilities"].numpy().tolist())))
""")
  assert served["trainer"] is False
  # The trainer's side: its pipeline over a TSV of the same pairs and its
  # predict step on the model restored from the same checkpoint.
  path = _pair_file(tmp_path, [(a, b, 0) for a, b in PAIRS])
  c, preprocessor, model, _, _ = export.load_classifier(model_dir)
  source = sources.FileSource(path, {"0": 0}, text_column="q,s", quoting="none")
  packer = preprocessing.make_packer(preprocessor, c.seq_length)
  # An empty-looking side (zero-width characters only) is not empty raw
  # text, so all six pairs are usable.
  batch = next(
      iter(
          input_pipeline.eval_dataset(
              input_pipeline.Split("t", source), packer, len(PAIRS))))
  probabilities = train_step.make_predict_step(model)(batch)
  np.testing.assert_allclose(
      served["probabilities"], probabilities.numpy(), atol=1e-5)


@pytest.mark.slow
def test_predict_and_evaluate_take_pairs(mrpc, tmp_path):
  _, summary = mrpc
  export_dir = summary["export_dir"]
  flags = ("--text=a fine day", "--text_pair=a good day", "--text=x",
           "--text_pair=y")
  result = run_module("trainer.predict", f"--export_dir={export_dir}", *flags)
  assert result.returncode == 0, result.stderr[-2000:]
  rows = [json.loads(line) for line in result.stdout.splitlines()]
  assert [(r["text"], r["text_pair"]) for r in rows] == [("a fine day",
                                                          "a good day"),
                                                         ("x", "y")]
  assert all(abs(sum(r["probabilities"]) - 1) < 1e-5 for r in rows)
  path = _pair_file(tmp_path, [('say "hi', "b", 1), ("c", "d", 0)])
  from_file = run_module("trainer.predict", f"--export_dir={export_dir}",
                         f"--input_file={path}", "--text_column=q,s",
                         "--quoting=none")
  assert from_file.returncode == 0, from_file.stderr[-2000:]
  assert json.loads(from_file.stdout.splitlines()[0])["text"] == 'say "hi'
  single = run_module("trainer.predict", f"--export_dir={export_dir}",
                      "--text=only one")
  assert single.returncode == 2
  assert "takes sentence pairs" in single.stderr
  scored = run_module("trainer.evaluate", f"--export_dir={export_dir}",
                      f"--input_file={path}", "--text_column=q,s",
                      "--quoting=none", "--eval_metrics=f1,mcc")
  assert scored.returncode == 0, scored.stderr[-2000:]
  out = json.loads(scored.stdout)
  assert out["examples"] == 2 and {"f1", "mcc", "accuracy"} <= set(out)


def test_a_preprocessor_without_pair_packing_is_a_clear_error(
    demo_paths, tmp_path):
  demo = tf.saved_model.load(demo_paths["preprocessor"])

  class OneSegment(tf.Module):

    def __init__(self):
      super().__init__()
      self.tokenize = demo.tokenize

    @tf.function(
        input_signature=[[tf.RaggedTensorSpec([None, None, None], tf.int32)],
                         tf.TensorSpec([], tf.int32)])
    def bert_pack_inputs(self, segments, seq_length):
      return demo.bert_pack_inputs(segments, seq_length)

  path = str(tmp_path / "one_segment")
  tf.saved_model.save(OneSegment(), path)
  with pytest.raises(errors.HandleError, match="cannot pack sentence pairs"):
    model_lib.check_pairs(tf.saved_model.load(path), path)
  model_lib.check_pairs(demo, demo_paths["preprocessor"])  # packs pairs


@pytest.mark.slow
def test_hidden_label_test_splits_are_predictable(mrpc):
  _, summary = mrpc
  serve, _ = export.load_serving(summary["export_dir"])
  with tfds.testing.mock_data(num_examples=5):
    rows = list(
        predict.predict(serve, predict.read_tfds("glue/mrpc", "test"), 2))
    with pytest.raises(errors.UserError, match="no feature 'question'"):
      next(predict.read_tfds("glue/mrpc", "test", text_key="question"))
  assert len(rows) == 5
  assert all(r["text"] and r["text_pair"] and len(r["probabilities"]) == 2
             for r in rows)
