"""The export: a trained model serving raw strings, in a process without
the project, as the trainer's own eval step scores them."""

import json
import logging
import os
import shutil

import numpy as np
import pytest
import tensorflow as tf

from conftest import run_outside_project
import testing
from trainer.data import input_pipeline
from trainer.data import preprocessing
from trainer.data import sources
from trainer.data import splits as splits_lib
from trainer.encoders import native
from trainer.foundation import tasks
from trainer.model import classifier
from trainer.runtime import run_lock
from trainer.serving import export
from trainer.serving import exported
from trainer.serving import run_folder
from trainer.training import train_step

TEXTS = [
    "the movie was great", "my day was awful", "&quot;lovely&quot; food",
    "Caf\u00e9 r\u00e9sum\u00e9 \U0001F600 @user http://t.co/x", "zzz qqq",
    "the service was horrible " * 30
]


@pytest.mark.core
def test_training_exports_at_the_end(demo_run):
  assert demo_run["export_dir"] == os.path.join(demo_run["model_dir"], "export",
                                                "20")
  assert tf.io.gfile.exists(
      os.path.join(demo_run["export_dir"], "saved_model.pb"))
  leftovers = [
      n for n in tf.io.gfile.listdir(os.path.dirname(demo_run["export_dir"]))
      if n.startswith(".tmp")
  ]
  assert not leftovers


@pytest.mark.core
@pytest.mark.slow
def test_fresh_process_without_trainer_serves_strings(demo_run, tmp_path):
  out = run_outside_project(
      tmp_path, f"""
import json, sys
import tensorflow as tf
import tensorflow_text  # noqa: F401  registers the preprocessor's ops
serve = tf.saved_model.load({demo_run['export_dir']!r}).signatures[
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
def test_export_matches_trainer_eval_step_and_token_ids(demo_run, tmp_path):
  loaded = tf.saved_model.load(demo_run["export_dir"])
  served = loaded.signatures["serving_default"](text=tf.constant(TEXTS))
  exported_ids = loaded.signatures["preprocess"](text=tf.constant(TEXTS))
  # The trainer's side: its input pipeline over a file of the same texts and
  # its predict step on the classifier restored from the same checkpoint.
  path = tmp_path / "t.csv"
  path.write_text("text,label\n" +
                  "".join('"' + t.replace('"', '""') + '",0\n' for t in TEXTS))
  c = run_folder.read_run_config(demo_run["model_dir"])
  preprocessor, model, _, step = run_folder.load_classifier(c)
  assert step == 20
  split = splits_lib.Split("t", sources.FileSource(str(path), {0: 0}))
  packer = preprocessing.make_packer(preprocessor, c.seq_length)
  batch = next(
      iter(
          input_pipeline.eval_dataset(
              split, input_pipeline.labelled(packer),
              testing.layout((c.seq_length,), len(TEXTS), 8))))
  probs = train_step.make_predict_step(model)(batch)
  np.testing.assert_allclose(
      served["probabilities"].numpy(), probs.numpy(), atol=1e-5)
  for key in preprocessing.ENCODER_INPUTS:
    np.testing.assert_array_equal(exported_ids[key].numpy(), batch[key].numpy())


@pytest.mark.core
def test_a_text_gets_the_same_probabilities_in_every_bucket(demo_run):
  """The demo run trained in buckets (8, 16, 32) (auto, as conftest sets): a
  request is packed to the smallest that holds its longest text, and a text's
  probabilities do not depend on which one that was, nor on --seq_length
  for all."""
  assert demo_run["summary"]["buckets"] == [8, 16, 32]
  loaded = tf.saved_model.load(demo_run["export_dir"])
  serve, preprocess = (
      loaded.signatures[k] for k in ("serving_default", "preprocess"))
  short = ["the movie was great", "my day was awful", "", "zzz qqq"]
  longer = short + ["the service was horrible " * 3]
  longest = short + [TEXTS[-1]]
  ids = [
      preprocess(text=tf.constant(t))["input_word_ids"]
      for t in (short, longer, longest)
  ]
  assert [i.shape[1] for i in ids] == [8, 16, 32]
  np.testing.assert_array_equal(ids[0], ids[1][:4, :8])
  assert (ids[1][:4, 8:].numpy() == 0).all()
  alone, among_long, among_longest = (
      serve(text=tf.constant(t))["probabilities"].numpy()
      for t in (short, longer, longest))
  np.testing.assert_allclose(alone, among_long[:4], atol=1e-5)
  np.testing.assert_allclose(alone, among_longest[:4], atol=1e-5)
  # The same classifier served at --seq_length only: the same numbers.
  c = run_folder.read_run_config(demo_run["model_dir"])
  preprocessor, model, _, _ = run_folder.load_classifier(c)
  fixed = export.serving_module(model, preprocessor, c.seq_length,
                                tasks.resolve(c))
  assert fixed.preprocess(tf.constant(short))["input_word_ids"].shape[1] == 32
  np.testing.assert_allclose(
      fixed.serve(tf.constant(short))["probabilities"].numpy(),
      alone,
      atol=1e-5)


def test_bad_input_at_serving(demo_run):
  serve = tf.saved_model.load(
      demo_run["export_dir"]).signatures["serving_default"]
  awkward = [b"", b"   \t ", b"bad \xff\xfe\xc3 bytes", b"word " * 20_000]
  for texts in ([awkward[0]], awkward, [b"fine"] * 1000):
    out = serve(text=tf.constant(texts))
    probs = out["probabilities"].numpy()
    assert probs.shape == (len(texts), 2)
    assert np.isfinite(probs).all()
    np.testing.assert_allclose(probs.sum(-1), 1.0, atol=1e-5)


def test_interrupted_export_leaves_no_folder_under_the_final_name(
    demo_run, tmp_path, monkeypatch):
  c = run_folder.read_run_config(demo_run["model_dir"])
  preprocessor, model, _, _ = run_folder.load_classifier(c)
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


@pytest.mark.slow
def test_the_pair_export_serves_without_the_project_as_the_eval_step(
    mrpc_run, tmp_path):
  model_dir, summary = mrpc_run["model_dir"], mrpc_run["summary"]
  served = run_outside_project(
      tmp_path, f"""
import json, sys
import tensorflow as tf
import tensorflow_text  # noqa: F401  registers the preprocessor's ops
serve = tf.saved_model.load({summary['export_dir']!r}).signatures[
    "serving_default"]
out = serve(text=tf.constant({[p[0] for p in testing.PAIRS]!r}),
            text_pair=tf.constant({[p[1] for p in testing.PAIRS]!r}))
print(json.dumps(dict(trainer="trainer" in sys.modules,
                      probabilities=out["probabilities"].numpy().tolist())))
""")
  assert served["trainer"] is False
  # The trainer's side: its pipeline over a TSV of the same pairs and its
  # predict step on the model restored from the same checkpoint.
  path = testing.pair_file(tmp_path, [(a, b, 0) for a, b in testing.PAIRS])
  c = run_folder.read_run_config(model_dir)
  preprocessor, model, _, _ = run_folder.load_classifier(c)
  source = sources.FileSource(path, {"0": 0}, text_column="q,s", quoting="none")
  packer = preprocessing.make_packer(preprocessor, c.seq_length)
  # An empty-looking side (zero-width characters only) is not empty raw
  # text, so all six pairs are usable.
  batch = next(
      iter(
          input_pipeline.eval_dataset(
              splits_lib.Split("t", source), input_pipeline.labelled(packer),
              testing.layout((c.seq_length,), len(testing.PAIRS), 8))))
  probabilities = train_step.make_predict_step(model)(batch)
  np.testing.assert_allclose(
      served["probabilities"], probabilities.numpy(), atol=1e-5)


def test_a_copied_run_folder_works_from_where_it_now_is(demo_run, tmp_path,
                                                        command, caplog):
  """A run folder copied elsewhere (another bucket, a laptop) exports,
  evaluates, predicts and resumes there, never writing where it was; a
  config.json of another version (a field it no longer has, one it lacks)
  is read with a warning."""
  copy = tmp_path / "moved"
  shutil.copytree(demo_run["model_dir"], copy)
  config_path = copy / "config.json"
  saved = json.loads(config_path.read_text())
  saved["config"]["a_removed_flag"] = 3
  del saved["config"]["keep_checkpoints"]
  config_path.write_text(json.dumps(saved))
  before = testing.tree_digest(demo_run["model_dir"])
  caplog.set_level(logging.WARNING)

  # While a run holds the folder (a trainer: its lock), an export into
  # it waits its turn; one elsewhere only reads the run and goes ahead.
  with run_lock.Lock(str(copy), "trainer.main"):
    busy = command("export", f"--model_dir={copy}")
    assert busy.returncode == 2 and "is in use by trainer.main" in busy.stderr
    outside = command("export", f"--model_dir={copy}",
                      f"--export_base_dir={tmp_path}/elsewhere")
    assert outside.returncode == 0, outside.stderr
    assert outside.stdout.strip() == f"{tmp_path}/elsewhere/20"
  exported = command("export", f"--model_dir={copy}",
                     f"--checkpoint={copy}/checkpoints/ckpt-10")
  assert exported.returncode == 0, exported.stderr
  assert exported.stdout.strip() == f"{copy}/export/10"
  assert "ignoring a_removed_flag (not a flag of this version)" in caplog.text
  scored = command("evaluate", f"--model_dir={copy}", "--split=validation")
  assert scored.returncode == 0, scored.stderr
  assert json.loads(scored.stdout)["accuracy"] == pytest.approx(
      demo_run["summary"]["eval_accuracy"], abs=1e-6)
  predicted = command("predict", f"--export_dir={copy}/export/10",
                      "--text=what a day")
  assert predicted.returncode == 0, predicted.stderr
  resumed = command("main", f"--model_dir={copy}", "--train_steps=24",
                    "--seq_length=32", "--batch_size=16",
                    "--learning_rate=1e-3", "--steps_per_loop=10",
                    "--checkpoint_every=10",
                    f"--demo_cache_dir={saved['config']['demo_cache_dir']}")
  assert resumed.returncode == 0, resumed.stderr
  summary = json.loads((copy / "summary.json").read_text())
  assert (summary["start_step"], summary["final_step"]) == (20, 24)
  assert summary["export_dir"].startswith(f"{copy}/export/")
  assert testing.tree_digest(demo_run["model_dir"]) == before  # nothing written


def test_the_shared_rows_signature_serves_as_serving_default(
    demo_paths, tmp_path):
  """An export whose encoder is this project's also serves several texts a
  row (`serve_shared_rows`): the outputs of serving_default, in the input's
  order, for texts (long, empty-looking, none at all) and pairs, under
  either pooling; it is the signature `load_serving` (predict, evaluate)
  picks."""
  preprocessor = tf.saved_model.load(demo_paths["preprocessor"])
  encoder = native.NativeEncoder.load(
      tf.saved_model.load(demo_paths["encoder"]))
  for pooling, pairs in (("cls", False), ("cls", True), ("mean", False)):
    model = classifier.Classifier(encoder, 2, seed=5, pooling=pooling)
    task = tasks.Task(
        source="file",
        num_classes=2,
        class_names=("no", "yes"),
        metrics=("accuracy",),
        text_fields=("a", "b") if pairs else ("text",))
    path = export.write(model, preprocessor, 32, task,
                        str(tmp_path / f"export_{pooling}{int(pairs)}"))
    signatures = tf.saved_model.load(path).signatures
    inputs = (
        dict(
            text=tf.constant([p[0] for p in testing.PAIRS]),
            text_pair=tf.constant([p[1] for p in testing.PAIRS]))
        if pairs else dict(text=tf.constant(TEXTS)))
    one, shared = (
        signatures[k](**inputs)
        for k in ("serving_default", exported.SHARED_ROWS))
    np.testing.assert_allclose(
        shared["probabilities"].numpy(),
        one["probabilities"].numpy(),
        atol=1e-6)
    assert shared["class_names"].numpy().tolist() == one["class_names"].numpy(
    ).tolist()
    serve, classes = exported.load_serving(path)
    assert classes == 2 and exported.pairs(serve) == pairs
    assert serve.structured_outputs.keys() == one.keys()
    empty = signatures[exported.SHARED_ROWS](**{
        k: tf.constant([], tf.string) for k in inputs
    })
    assert empty["probabilities"].shape == (0, 2)
