"""Export, predict and evaluate: the trained model serving raw strings."""

import json
import os

import numpy as np
import pytest
import tensorflow as tf

from conftest import run_module
from conftest import run_outside_project
from trainer.base import config as config_lib
from trainer import export
from trainer.data import input_pipeline
from trainer.base import metrics
from trainer.model import classifier as model_lib
from trainer.data import preprocessing
from trainer.data import sources
from trainer.loop import train_lib
from trainer.loop import train_step

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TEXTS = [
    "the movie was great", "my day was awful", "&quot;lovely&quot; food",
    "Caf\u00e9 r\u00e9sum\u00e9 \U0001F600 @user http://t.co/x", "zzz qqq",
    "the service was horrible " * 30
]


@pytest.fixture(scope="module")
def run(tmp_path_factory, demo_paths):
  model_dir = str(tmp_path_factory.mktemp("run"))
  c = config_lib.Config(
      model_dir=model_dir,
      demo_cache_dir=demo_paths["root"],
      train_steps=20,
      seq_length=32,
      batch_size=16,
      learning_rate=1e-3,
      steps_per_loop=10,
      checkpoint_every=10)
  summary = train_lib.run(c)
  return dict(
      model_dir=model_dir, summary=summary, export_dir=summary["export_dir"])


@pytest.fixture(autouse=True)
def _demo_cache(demo_paths, monkeypatch):
  """Subprocesses find the session's demo assets instead of ~/.cache."""
  monkeypatch.setenv("BERT_TRAINER_CACHE", os.path.dirname(demo_paths["root"]))


@pytest.mark.core
def test_training_exports_at_the_end(run):
  assert run["export_dir"] == os.path.join(run["model_dir"], "export", "20")
  assert tf.io.gfile.exists(os.path.join(run["export_dir"], "saved_model.pb"))
  leftovers = [
      n for n in tf.io.gfile.listdir(os.path.dirname(run["export_dir"]))
      if n.startswith(".tmp")
  ]
  assert not leftovers


@pytest.mark.core
@pytest.mark.slow
def test_fresh_process_without_trainer_serves_strings(run, tmp_path):
  out = run_outside_project(
      tmp_path, f"""
import json, sys
import tensorflow as tf
import tensorflow_text  # noqa: F401  registers the preprocessor's ops
serve = tf.saved_model.load({run['export_dir']!r}).signatures[
    "serving_default"]
out = serve(text=tf.constant({TEXTS!r}))
print(json.dumps(dict(
    trainer_imported="trainer" in sys.modules,
    shapes={{k: v.shape.as_list() for k, v in out.items()}},
    dtypes={{k: v.dtype.name for k, v in out.items()}},
    sums=out["probabilities"].numpy().sum(-1).tolist(),
    names=[n.decode() for n in out["class_names"].numpy()])))
""")
  assert out["trainer_imported"] is False
  n = len(TEXTS)
  assert out["shapes"] == dict(
      probabilities=[n, 2], class_ids=[n], class_names=[n])
  assert out["dtypes"] == dict(
      probabilities="float32", class_ids="int32", class_names="string")
  np.testing.assert_allclose(out["sums"], 1.0, atol=1e-6)
  assert set(out["names"]) <= {"negative", "positive"}


@pytest.mark.core
def test_export_matches_trainer_eval_step_and_token_ids(run, tmp_path):
  loaded = tf.saved_model.load(run["export_dir"])
  served = loaded.signatures["serving_default"](text=tf.constant(TEXTS))
  exported_ids = loaded.signatures["preprocess"](text=tf.constant(TEXTS))
  # The trainer's side: its input pipeline over a file of the same texts and
  # its predict step on the classifier restored from the same checkpoint.
  path = tmp_path / "t.csv"
  path.write_text("text,label\n" +
                  "".join('"' + t.replace('"', '""') + '",0\n' for t in TEXTS))
  c, preprocessor, model, _, step = export.load_classifier(run["model_dir"])
  assert step == 20
  split = input_pipeline.Split("t", sources.FileSource(str(path), {0: 0}))
  packer = preprocessing.make_packer(preprocessor, c.seq_length)
  batch = next(iter(input_pipeline.eval_dataset(split, packer, len(TEXTS))))
  probs = train_step.make_predict_step(model)(batch)
  np.testing.assert_allclose(
      served["probabilities"].numpy(), probs.numpy(), atol=1e-5)
  for key in train_step.ENCODER_KEYS:
    np.testing.assert_array_equal(exported_ids[key].numpy(), batch[key].numpy())


def test_bad_input_at_serving(run):
  serve = tf.saved_model.load(run["export_dir"]).signatures["serving_default"]
  awkward = [b"", b"   \t ", b"bad \xff\xfe\xc3 bytes", b"word " * 20_000]
  for texts in ([awkward[0]], awkward, [b"fine"] * 1000):
    out = serve(text=tf.constant(texts))
    probs = out["probabilities"].numpy()
    assert probs.shape == (len(texts), 2)
    assert np.isfinite(probs).all()
    np.testing.assert_allclose(probs.sum(-1), 1.0, atol=1e-5)


def test_interrupted_export_leaves_no_folder_under_the_final_name(
    run, tmp_path, monkeypatch):
  c, preprocessor, model, _, _ = export.load_classifier(run["model_dir"])
  module = export.ServingModule(preprocessor, model, c.seq_length,
                                ["negative", "positive"])
  target = str(tmp_path / "export" / "7")
  real_save = tf.saved_model.save

  def save_then_crash(obj, path, **kwargs):
    real_save(obj, path, **kwargs)  # a complete write ...
    raise OSError("disk vanished")  # ... then the process is interrupted

  monkeypatch.setattr(tf.saved_model, "save", save_then_crash)
  with pytest.raises(OSError):
    export.write_export(module, target)
  assert not tf.io.gfile.exists(target)
  assert tf.io.gfile.listdir(str(tmp_path / "export")) == []
  monkeypatch.setattr(tf.saved_model, "save", real_save)
  export.write_export(module, target)
  assert tf.io.gfile.exists(os.path.join(target, "saved_model.pb"))


@pytest.mark.core
@pytest.mark.slow
def test_predict_end_to_end(run, tmp_path):
  result = run_module("trainer.predict", f"--export_dir={run['export_dir']}",
                      "--text=the food was great",
                      "--text=the traffic was horrible")
  assert result.returncode == 0, result.stderr[-2000:]
  rows = [json.loads(line) for line in result.stdout.strip().splitlines()]
  texts = [r["text"] for r in rows]
  assert texts == ["the food was great", "the traffic was horrible"]
  for r in rows:
    assert r["class_name"] in ("negative", "positive")
    assert abs(sum(r["probabilities"]) - 1) < 1e-5
  inputs = tmp_path / "in.csv"
  inputs.write_text("id,tweet\n" +
                    "".join(f"{i},tweet {i}\n" for i in range(300)))
  out = tmp_path / "out.csv"
  result = run_module("trainer.predict", f"--export_dir={run['export_dir']}",
                      f"--input_file={inputs}", "--text_column=tweet",
                      f"--output_file={out}", "--batch_size=64")
  assert result.returncode == 0, result.stderr[-2000:]
  lines = out.read_text().strip().splitlines()
  assert lines[0] == "text,class_id,class_name,probabilities"
  assert len(lines) == 301 and lines[300].startswith("tweet 299,")


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


@pytest.mark.slow
def test_evaluate_end_to_end_agrees_with_training_eval(run, tmp_path):
  out = tmp_path / "metrics.json"
  result = run_module("trainer.evaluate", f"--export_dir={run['export_dir']}",
                      f"--model_dir={run['model_dir']}", "--split=validation",
                      f"--output_file={out}",
                      f"--tensorboard_dir={tmp_path / 'tb'}")
  assert result.returncode == 0, result.stderr[-2000:]
  m = json.loads(out.read_text())
  assert m["examples"] == 1000 and m["rows_read"] == 1000
  assert m["excluded"] == {}
  # Same checkpoint, same validation rows: the accuracy the run logged.
  assert m["accuracy"] == pytest.approx(
      run["summary"]["eval_accuracy"], abs=1e-6)
  assert sorted(m["per_class"]) == ["negative", "positive"]
  assert np.array(m["confusion_matrix"]).sum() == 1000
  assert 0.0 <= m["roc_auc"] <= 1.0 and "macro_f1" in m
  # TensorBoard's pictures, read back from the event files: the run's last
  # eval (accumulated on the replica) and evaluate's (on the host).
  (tn, fp), (fn, tp) = m["confusion_matrix"]
  trained = _eval_pictures(os.path.join(run["model_dir"], "summaries", "eval"))
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


@pytest.mark.slow
def test_evaluate_scores_every_row_of_one_labelled_file(run, tmp_path):
  """`evaluate --export_dir=E --input_file=F`: the whole file (no carve, no
  training data flags), bad rows excluded and counted by reason."""
  data = tmp_path / "test.tsv"
  rows = [
      f"{'great fun' if i % 2 else 'awful day'} {i}\t{i % 2}"
      for i in range(300)
  ]
  data.write_text("text\tlabel\n" +
                  "\n".join(rows + ["\t1", "fine\t7", "fine\tx"]) + "\n")
  result = run_module("trainer.evaluate", f"--export_dir={run['export_dir']}",
                      f"--input_file={data}")
  assert result.returncode == 0, result.stderr[-2000:]
  m = json.loads(result.stdout)
  assert (m["rows_read"], m["rows_used"], m["examples"]) == (303, 300, 300)
  assert m["excluded"] == dict(
      empty_text=1, label_not_in_map=1, label_not_a_number=1)
  assert (m["split"], m["data"]) == ("input", str(data))
  assert np.array(m["confusion_matrix"]).sum(axis=1).tolist() == [150, 150]


@pytest.mark.slow
def test_evaluate_a_run_by_its_model_dir(run, tmp_path):
  """The README's `evaluate --model_dir=RUN --split=validation`: the run's
  best checkpoint and its own data flags."""
  result = run_module("trainer.evaluate", f"--model_dir={run['model_dir']}",
                      "--split=validation")
  assert result.returncode == 0, result.stderr[-2000:]
  m = json.loads(result.stdout)
  assert m["examples"] == 1000
  assert m["accuracy"] == pytest.approx(
      run["summary"]["eval_accuracy"], abs=1e-6)


@pytest.mark.slow
def test_predict_and_evaluate_refuse_what_would_mislead(run, tmp_path):
  """Each a clear line and exit 2, before any work."""
  bad_inputs = tmp_path / "bad.csv"
  bad_inputs.write_text("text,label\nnothing,7\nhere,9\n")
  cases = [
      ("trainer.predict",
       [f"--export_dir={run['export_dir']}", "--text=hi",
        "--batch_size=0"], "error: --batch_size=0 is invalid: must be >= 1"),
      ("trainer.predict", [f"--export_dir={tmp_path}", "--text=hi"],
       f"error: --export_dir={tmp_path} holds no saved_model.pb"),
      ("trainer.predict", [
          f"--export_dir={run['export_dir']}", "--text=hi",
          f"--output_file={tmp_path}/no/such/out.jsonl"
      ], "error: --output_file="),
      ("trainer.evaluate", [
          f"--export_dir={run['export_dir']}",
          f"--model_dir={run['model_dir']}", "--num_classes=3",
          "--label_names=a,b,c", "--split=validation"
      ], "error: --num_classes=3 does not match the export"),
      ("trainer.evaluate", [
          f"--export_dir={run['export_dir']}", f"--train_file={bad_inputs}",
          "--split=train"
      ], "no usable row to score"),
  ]
  for module, args, message in cases:
    result = run_module(module, *args)
    assert result.returncode == 2, (args, result.stderr[-2000:])
    errors = [s for s in result.stderr.splitlines() if s.startswith("error")]
    assert len(errors) == 1 and message in errors[0], (args, errors)
    assert "Traceback" not in result.stderr


def test_metrics_against_a_hand_computation():
  labels = [0, 0, 0, 1, 1, 1, 1, 1]
  p1 = [0.1, 0.6, 0.3, 0.8, 0.4, 0.9, 0.7, 0.2]
  probs = np.stack([1 - np.array(p1), np.array(p1)], axis=1)
  m = metrics.classification_metrics(labels, probs, ["neg", "pos"])
  # predicted: 0 1 0 1 0 1 1 0 -> TN=2 FP=1 FN=2 TP=3
  assert m["confusion_matrix"] == [[2, 1], [2, 3]]
  assert m["accuracy"] == pytest.approx(5 / 8)
  assert m["per_class"]["pos"] == pytest.approx(
      dict(precision=3 / 4, recall=3 / 5, f1=2 / 3, support=5))
  assert m["per_class"]["neg"] == pytest.approx(
      dict(precision=2 / 4, recall=2 / 3, f1=4 / 7, support=3))
  assert m["macro_f1"] == pytest.approx((2 / 3 + 4 / 7) / 2)
  # AUC: pairs (pos, neg) ranked right: 0.8>{.1,.6,.3}=3, .4>{.1,.3}=2,
  # .9=3, .7>{.1,.6,.3}=3, .2>{.1}=1 -> 12 of 15.
  assert m["roc_auc"] == pytest.approx(12 / 15)
  assert metrics.roc_auc([0, 1, 1], [0.5, 0.5, 0.9]) == pytest.approx(0.75)


def test_pr_curve_against_a_hand_computation():
  # Buckets of 1/4: p = 0.1 -> 0, 0.3 -> 1, 0.5 -> 2 (the edge is the upper
  # bucket's), 0.99 and 1.0 -> 3.
  positive, negative = metrics.pr_histograms([1, 0, 1, 1, 0, 1],
                                             [0.5, 0.1, 0.99, 0.3, 0.5, 1.0],
                                             buckets=4)
  assert positive.tolist() == [0, 1, 1, 2] and negative.tolist() == [1, 0, 1, 0]
  curve = metrics.pr_curve(positive, negative)
  assert curve["thresholds"].tolist() == [0, 0.25, 0.5, 0.75, 1]
  # Predicted positive at threshold t: p >= t.
  assert curve["true_positive_counts"].tolist() == [4, 4, 3, 2, 0]
  assert curve["false_positive_counts"].tolist() == [2, 1, 1, 0, 0]
  assert curve["true_negative_counts"].tolist() == [0, 1, 1, 2, 2]
  assert curve["false_negative_counts"].tolist() == [0, 0, 1, 2, 4]
  assert curve["precision"].tolist() == [4 / 6, 4 / 5, 3 / 4, 1, 0]
  assert curve["recall"].tolist() == [1, 1, 0.75, 0.5, 0]


def test_eval_step_counts_match_the_host_metrics(no_dropout_encoder):
  """The replica's confusion and PR histograms (float32 sums of weights)
  equal the NumPy ones of the same probabilities; padding counts nothing."""
  encoder = tf.saved_model.load(no_dropout_encoder)
  model = model_lib.Classifier(encoder, 2, 0.0, seed=3)
  rng = np.random.default_rng(0)
  batch = dict(
      input_word_ids=tf.constant(rng.integers(5, 60, [24, 16]), tf.int32),
      input_mask=tf.ones([24, 16], tf.int32),
      input_type_ids=tf.zeros([24, 16], tf.int32),
      label=tf.constant(rng.integers(0, 2, [24]), tf.int32),
      weight=tf.constant([1.0] * 20 + [0.0] * 4))
  out = train_step.make_eval_step(model, 2)(batch)
  probabilities = tf.nn.softmax(
      model(train_step.encoder_inputs(batch), training=False)).numpy()[:20]
  labels = batch["label"].numpy()[:20]
  host = metrics.classification_metrics(labels, probabilities, ["a", "b"])
  assert out["confusion"].numpy().tolist() == host["confusion_matrix"]
  positive, negative = metrics.pr_histograms(labels, probabilities[:, 1])
  assert out["positive_histogram"].numpy().tolist() == positive.tolist()
  assert out["negative_histogram"].numpy().tolist() == negative.tolist()
  assert float(out["weight_sum"]) == 20.0
