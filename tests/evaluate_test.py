"""Evaluate: an export or a run's checkpoint scored on any data the trainer
reads, every usable row once; what would mislead refused."""

import json
import os

import numpy as np
import pytest
import tensorflow as tf
import tensorflow_datasets as tfds

import testing
from trainer.evaluation import metrics
from trainer.foundation import config as config_lib
from trainer.foundation import errors
from trainer.foundation import tasks
from trainer.model import checkpoints
from trainer.serving import evaluate


def test_evaluate_takes_pairs(mrpc_run, tmp_path, command):
  export_dir = mrpc_run["export_dir"]
  path = testing.pair_file(tmp_path, [('say "hi', "b", 1), ("c", "d", 0)])
  scored = command("evaluate", f"--export_dir={export_dir}",
                   f"--input_file={path}", "--text_column=q,s",
                   "--quoting=none", "--eval_metrics=f1,mcc")
  assert scored.returncode == 0, scored.stderr[-2000:]
  out = json.loads(scored.stdout)
  assert out["examples"] == 2 and {"f1", "mcc", "accuracy"} <= set(out)


@pytest.mark.parametrize("name,split", [("glue/stsb", "test"),
                                        ("glue/mnli", "test_matched"),
                                        ("glue/mrpc", "test[:10%]")])
def test_evaluate_refuses_a_split_whose_labels_are_hidden(name, split):
  # glue/stsb's -1.0 would score as a label; the line names what to run.
  c = config_lib.complete(config_lib.Config(tfds_name=name, model_dir="m"))
  with pytest.raises(errors.ConfigError) as info:
    evaluate.data_split(c, tasks.resolve(c), split)
  assert str(info.value) == (
      f"--split={split} of {name} hides its labels (all -1), so it cannot be "
      f"scored: predict it with python -m trainer.predict --tfds_name={name} "
      f"--split={split}")


def _eval_pictures(folder):
  """{step: {"image": uint8 [H, W, 3], "pr": float32 [6, thresholds]}}
  from the event files in `folder`."""
  found = {}
  for path in tf.io.gfile.glob(os.path.join(folder, "events.out.tfevents*")):
    for event in tf.compat.v1.train.summary_iterator(path):
      for value in event.summary.value:
        if value.tag == "eval/confusion_matrix":
          png = tf.make_ndarray(value.tensor)[2]
          found.setdefault(event.step, {})["image"] = tf.io.decode_png(
              png, channels=3).numpy()
        elif value.tag == "eval/pr_curve/pr_curves":
          found.setdefault(event.step, {})["pr"] = tf.make_ndarray(value.tensor)
  return found


def test_evaluate_end_to_end_agrees_with_training_eval(demo_run, tmp_path,
                                                       command):
  out = tmp_path / "metrics.json"
  result = command("evaluate", f"--export_dir={demo_run['export_dir']}",
                   f"--model_dir={demo_run['model_dir']}", "--split=validation",
                   f"--output_file={out}",
                   f"--tensorboard_dir={tmp_path / 'tb'}")
  assert result.returncode == 0, result.stderr[-2000:]
  m = json.loads(out.read_text())
  assert m["examples"] == 1000 and m["rows_read"] == 1000
  assert m["excluded"] == {}
  # Same checkpoint, same validation rows: the accuracy the run logged.
  assert m["accuracy"] == pytest.approx(
      demo_run["summary"]["eval_accuracy"], abs=1e-6)
  assert sorted(m["per_class"]) == ["negative", "positive"]
  assert np.array(m["confusion_matrix"]).sum() == 1000
  assert 0.0 <= m["roc_auc"] <= 1.0 and "macro_f1" in m
  # TensorBoard's pictures, read back from the event files: the run's last
  # eval (accumulated on the replica) and evaluate's (on the host).
  (tn, fp), (fn, tp) = m["confusion_matrix"]
  trained = _eval_pictures(
      os.path.join(demo_run["model_dir"], "summaries", "eval"))
  scored = _eval_pictures(str(tmp_path / "tb"))
  for pictures in (trained[20], scored[0]):
    assert pictures["image"].shape == (248, 248, 3)
    curve = pictures["pr"]  # rows: tp, fp, tn, fn, precision, recall
    assert curve.shape == (6, metrics.PR_BUCKETS + 1)
    # Threshold 0: all predicted positive; 0.5: the argmax's confusion.
    assert list(curve[:4, 0]) == [tp + fn, tn + fp, 0, 0]
    assert list(curve[:4, metrics.PR_BUCKETS // 2]) == [tp, fp, tn, fn]
    assert list(curve[:4, -1]) == [0, 0, tn + fp, tp + fn]
  # The same probabilities up to float rounding: a count may move by one
  # across a bucket edge, no more.
  assert np.abs(trained[20]["pr"][:4] - scored[0]["pr"][:4]).max() <= 1


def test_evaluate_scores_every_row_of_one_labelled_file(demo_run, tmp_path,
                                                        command):
  """`evaluate --export_dir=E --input_file=F`: the whole file (no carve, no
  training data flags), bad rows excluded and counted by reason."""
  data = tmp_path / "test.tsv"
  rows = [
      f"{'great fun' if i % 2 else 'awful day'} {i}\t{i % 2}"
      for i in range(300)
  ]
  data.write_text("text\tlabel\n" +
                  "\n".join(rows + ["\t1", "fine\t7", "fine\tx"]) + "\n")
  result = command("evaluate", f"--export_dir={demo_run['export_dir']}",
                   f"--input_file={data}")
  assert result.returncode == 0, result.stderr[-2000:]
  m = json.loads(result.stdout)
  assert (m["rows_read"], m["rows_used"], m["examples"]) == (303, 300, 300)
  assert m["excluded"] == dict(
      empty_text=1, label_not_in_map=1, label_not_a_number=1)
  assert (m["split"], m["data"]) == ("input", str(data))
  assert m["export_dir"] == demo_run["export_dir"]  # what was scored
  assert np.array(m["confusion_matrix"]).sum(axis=1).tolist() == [150, 150]


def _scored(model_dir):
  """(the checkpoint `evaluate --model_dir` scores: the best, else the
  newest; its step), and the log line that names them."""
  path = checkpoints.for_export(
      os.path.join(model_dir, "checkpoints"),
      os.path.join(model_dir, "checkpoints", "best"))
  step = int(
      tf.train.load_checkpoint(path).get_tensor(
          "optimizer/iterations/.ATTRIBUTES/VARIABLE_VALUE"))
  return path, step, f"Scoring {path} (step {step}) of the run in {model_dir}"


def test_evaluate_a_run_by_its_model_dir(demo_run, command, caplog,
                                         info_logging):
  """The README's `evaluate --model_dir=RUN --split=validation`: the run's
  best checkpoint and its own data flags; its log and its JSON name the
  checkpoint and the step scored."""
  result = command("evaluate", f"--model_dir={demo_run['model_dir']}",
                   "--split=validation")
  assert result.returncode == 0, result.stderr[-2000:]
  m = json.loads(result.stdout)
  assert m["examples"] == 1000
  assert m["accuracy"] == pytest.approx(
      demo_run["summary"]["eval_accuracy"], abs=1e-6)
  path, step, line = _scored(demo_run["model_dir"])
  assert (m["checkpoint"], m["step"]) == (path, step)
  assert step == demo_run["summary"]["best_step"]
  assert line in [r.getMessage() for r in caplog.records]


def test_evaluate_of_a_run_opens_with_the_runs_flags(mrpc_run, command, caplog,
                                                     info_logging):
  """A run that is not the demo (glue/mrpc): no line of the demo's
  defaults, which the flags not given would have taken before the run's
  config.json supplied them; the checkpoint scored is named."""
  with tfds.testing.mock_data(num_examples=48):
    result = command("evaluate", f"--model_dir={mrpc_run['model_dir']}",
                     "--split=validation")
  assert result.returncode == 0, result.stderr[-2000:]
  said = [r.getMessage() for r in caplog.records]
  assert not [s for s in said if "demo" in s.lower()], said
  path, step, line = _scored(mrpc_run["model_dir"])
  assert said[0] == line
  m = json.loads(result.stdout)
  assert (m["checkpoint"], m["step"], m["examples"]) == (path, step, 48)


def test_predict_and_evaluate_refuse_what_would_mislead(demo_run, tmp_path,
                                                        command):
  """Each a clear line and exit 2, before any work."""
  bad_inputs = tmp_path / "bad.csv"
  bad_inputs.write_text("text,label\nnothing,7\nhere,9\n")
  cases = [
      ("predict", [
          f"--export_dir={demo_run['export_dir']}", "--text=hi",
          "--batch_size=0"
      ], "error: --batch_size=0 is invalid: must be >= 1"),
      ("predict", [f"--export_dir={tmp_path}", "--text=hi"],
       f"error: --export_dir={tmp_path} holds no saved_model.pb"),
      ("predict", [
          f"--export_dir={demo_run['export_dir']}", "--text=hi",
          f"--output_file={tmp_path}/no/such/out.jsonl"
      ], "error: --output_file="),
      ("evaluate", [
          f"--export_dir={demo_run['export_dir']}",
          f"--model_dir={demo_run['model_dir']}", "--num_classes=3",
          "--label_names=a,b,c", "--split=validation"
      ], "error: --num_classes=3 does not match the export"),
      ("evaluate", [
          f"--export_dir={demo_run['export_dir']}",
          f"--train_file={bad_inputs}", "--split=train"
      ], "no usable row to score"),
  ]
  for module, args, message in cases:
    result = command(module, *args)
    assert result.returncode == 2, (args, result.stderr[-2000:])
    lines = [s for s in result.stderr.splitlines() if s.startswith("error")]
    assert len(lines) == 1 and message in lines[0], (args, lines)
    assert "Traceback" not in result.stderr


def test_score_batches_rows_of_like_length_each_once():
  """`by_length`: every row once, a batch's texts within one range of word
  counts (a pair's two texts count together), at most `batch_size`."""
  words = [i * 5 % 37 for i in range(50)]
  texts = [" ".join(["w"] * n + [f"r{i}"]) for i, n in enumerate(words)]
  rows = tf.data.Dataset.from_tensor_slices((texts, list(range(50))))
  batches = list(evaluate.by_length(rows, 4))
  seen = np.concatenate([labels.numpy() for _, labels in batches])
  assert sorted(seen.tolist()) == list(range(50))
  edges = (0,) + evaluate._WORD_BOUNDARIES
  for texts_, labels in batches:
    assert len(labels) <= 4
    counts = [words[i] + 1 for i in labels.numpy()]
    ranges = {np.searchsorted(edges, n, side="right") for n in counts}
    assert len(ranges) == 1, counts
  pairs = tf.data.Dataset.from_tensor_slices(([["a b", "c"], ["d",
                                                              "e"]], [0, 1]))
  (pair_texts, labels), = list(evaluate.by_length(pairs, 4))
  assert pair_texts.shape == (2, 2) and labels.numpy().tolist() == [0, 1]
