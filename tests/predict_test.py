"""Predict: an export's classes and probabilities for raw texts, pairs,
files and TFDS splits; the Python API and the command."""

import json

import numpy as np
import pytest
import tensorflow as tf
import tensorflow_datasets as tfds

from conftest import run_module
import testing
from trainer.data import input_pipeline
from trainer.data import splits
from trainer.foundation import config as config_lib
from trainer.foundation import errors
from trainer.foundation import tasks
from trainer.serving import exported
from trainer.serving import predict
from trainer.training import inputs


@pytest.mark.slow
def test_hidden_label_test_splits_are_predictable(mrpc_run):
  summary = mrpc_run["summary"]
  serve, _ = exported.load_serving(summary["export_dir"])
  with tfds.testing.mock_data(num_examples=5):
    rows = list(
        predict.predictions(serve, predict.read_tfds("glue/mrpc", "test"), 2))
    with pytest.raises(errors.UserError, match="no feature 'question'"):
      next(predict.read_tfds("glue/mrpc", "test", text_key="question"))
  assert len(rows) == 5
  assert all(r["text"] and r["text_pair"] and len(r["probabilities"]) == 2
             for r in rows)


def test_predict_takes_pairs(mrpc_run, tmp_path, command):
  export_dir = mrpc_run["export_dir"]
  flags = ("--text=a fine day", "--text_pair=a good day", "--text=x",
           "--text_pair=y")
  result = command("predict", f"--export_dir={export_dir}", *flags)
  assert result.returncode == 0, result.stderr[-2000:]
  rows = [json.loads(line) for line in result.stdout.splitlines()]
  assert [(r["text"], r["text_pair"]) for r in rows] == [("a fine day",
                                                          "a good day"),
                                                         ("x", "y")]
  assert all(abs(sum(r["probabilities"]) - 1) < 1e-5 for r in rows)
  path = testing.pair_file(tmp_path, [('say "hi', "b", 1), ("c", "d", 0)])
  from_file = command("predict", f"--export_dir={export_dir}",
                      f"--input_file={path}", "--text_column=q,s",
                      "--quoting=none")
  assert from_file.returncode == 0, from_file.stderr[-2000:]
  assert json.loads(from_file.stdout.splitlines()[0])["text"] == 'say "hi'
  single = command("predict", f"--export_dir={export_dir}", "--text=only one")
  assert single.returncode == 2
  assert "takes sentence pairs" in single.stderr


@pytest.mark.core
@pytest.mark.slow
def test_predict_end_to_end(demo_run, tmp_path, command):
  """The texts in a real process (as on the TPU VM's stack); a file, in
  this one."""
  result = run_module("trainer.predict",
                      f"--export_dir={demo_run['export_dir']}",
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
  result = command("predict", f"--export_dir={demo_run['export_dir']}",
                   f"--input_file={inputs}", "--text_column=tweet",
                   f"--output_file={out}", "--batch_size=64")
  assert result.returncode == 0, result.stderr[-2000:]
  lines = out.read_text().strip().splitlines()
  assert lines[0] == "text,class_id,class_name,probabilities"
  assert len(lines) == 301 and lines[300].startswith("tweet 299,")


@pytest.mark.parametrize("name,text,level,read,scored", [
    ("empty.txt", "", "WARNING", 0, 0),
    ("header_only.csv", "text,label\n", "WARNING", 0, 0),
    ("three.txt", "a\nb\nc\n", "INFO", 3, 3),
    ("skips.csv", "text,label\nfine,1\n,0\n", "INFO", 2, 1),
])
def test_predict_says_how_many_rows_it_read_and_scored(demo_run, tmp_path,
                                                       command, caplog,
                                                       info_logging, name, text,
                                                       level, read, scored):
  """An input with no row ends in one line saying so (exit 0, nothing on
  stdout: the predictions' stream holds predictions only); others in the
  same line with their counts (a CSV's skipped rows are read, not
  scored)."""
  path = tmp_path / name
  path.write_text(text)
  result = command("predict", f"--export_dir={demo_run['export_dir']}",
                   f"--input_file={path}")
  assert result.returncode == 0, result.stderr[-2000:]
  assert len(result.stdout.splitlines()) == scored
  said = [(r.levelname, r.getMessage())
          for r in caplog.records
          if "scored" in r.getMessage()]
  assert said == [(level, f"--input_file={path}: {read} rows read, {scored} "
                   "scored")]


def test_predictions_batch_by_length_and_keep_the_input_order(demo_run):
  """Texts of mixed lengths are sorted into batches of like length (each
  packed to its own bucket) and come back in the order given, each with
  the probabilities it gets alone."""
  serve, _ = exported.load_serving(demo_run["export_dir"])
  texts = [("word " * (i * 7 % 13)) + f"text {i}" for i in range(21)]
  rows = list(predict.predictions(serve, iter(texts), batch_size=4))
  assert [r["text"] for r in rows] == texts
  for text, row in zip(texts, rows):
    alone = serve(text=tf.constant([text]))["probabilities"].numpy()[0]
    np.testing.assert_allclose(row["probabilities"], alone, atol=1e-5)
  with pytest.raises(predict.PredictError, match="takes one text"):
    list(predict.predictions(serve, iter([("a", "b")]), batch_size=4))


def test_the_python_api_refuses_what_is_not_a_list_of_texts(demo_run):
  """One string where a list belongs would be read as its characters; a
  non-string text fails deep in TensorFlow; both are one line. An empty
  list gives no rows."""
  export_dir = demo_run["export_dir"]
  with pytest.raises(errors.UserError) as e:
    predict.predict(export_dir, "what a day")
  assert str(e.value) == ("texts must be a list of texts, not one string: "
                          "give ['what a day']")
  with pytest.raises(errors.UserError) as e:
    list(predict.predict(export_dir, ["fine", 7]))
  assert str(e.value) == "texts[1] is int (7), not a string"
  with pytest.raises(errors.UserError) as e:
    predict.predict(export_dir, ["a"], "b")
  assert str(e.value).startswith("text_pairs must be a list of texts")
  assert list(predict.predict(export_dir, [])) == []
  with pytest.raises(errors.UserError, match="give --text"):
    predict.predict(export_dir)


def test_user_error_is_where_the_readme_says():
  import trainer  # pylint: disable=g-import-not-at-top
  assert trainer.UserError is errors.UserError
  assert trainer.errors.UserError is errors.UserError
  assert issubclass(trainer.Preempted, trainer.UserError)
  assert issubclass(errors.ConfigError, trainer.UserError)


def _three_files(tmp_path):
  """(path, flags for training and evaluate, predict's keyword arguments) of
  three layouts: a headerless ISO-8859-1 Sentiment140 file, a UTF-8 TSV
  with a byte-order mark, and a GLUE TSV whose quotes are plain characters.
  Each holds a malformed row and an empty text, which every reader skips."""
  s140 = tmp_path / "tweets.csv"
  rows = [
      f'"{y}","{i}","Mon Apr 06","NO_QUERY","u{i}","caf\xe9 n\xb0{i} '
      f'{"good" if y else "bad"}"\n' for i, y in enumerate([0, 4] * 30)
  ]
  rows[7] = '"4","7","Mon","NO_QUERY","u7"\n'  # five columns: malformed
  rows[11] = '"0","11","Mon","NO_QUERY","u11","  "\n'  # empty text
  s140.write_bytes("".join(rows).encode("iso-8859-1"))
  bom = tmp_path / "bom.tsv"
  lines = [
      f"\u00e9t\u00e9 {i} \u201cquoted\u201d\t{i % 2}\n" for i in range(40)
  ]
  lines[5] = "a\tb\tc\n"
  bom.write_bytes(b"\xef\xbb\xbf" + ("text\tlabel\n" + "".join(lines)).encode())
  glue = tmp_path / "glue.tsv"
  pairs = [f'{i}\tsay "hi {i}\tand "bye\t{i % 2}\n' for i in range(40)]
  pairs[3] = '3\t\tnothing\t1\n'
  glue.write_text("id\tq\ts\tlabel\n" + "".join(pairs))
  pair = dict(text_column="q,s", quoting="none")
  return [(str(s140), {}, {}, 58), (str(bom), {}, {}, 39),
          (str(glue), pair, pair, 39)]


def test_predict_evaluate_and_training_read_a_file_alike(tmp_path):
  """One file fed to the three readers gives the same texts, in order:
  training's (train and validation carved from it), evaluate's
  (`--input_file`) and predict's (labels not read)."""
  for path, flags, kwargs, rows in _three_files(tmp_path):
    c = config_lib.Config(train_file=path, validation_fraction=0.3, **flags)
    task = tasks.resolve(c)
    data = inputs.data_spec(c, task)
    carved = splits.make_splits(task, data)
    by_index = {}
    for name in ("train", "validation"):
      for chunk in carved[name].chunks().as_numpy_iterator():
        for i, t, r in zip(chunk["index"], chunk["text"], chunk["reason"]):
          if not r:
            by_index[int(i)] = tuple(x.decode() for x in t)
    trained = [by_index[i] for i in sorted(by_index)]
    evaluated = [
        tuple(x.decode()
              for x in np.atleast_1d(t))
        for t, _ in input_pipeline.usable_rows(
            splits.file_split(task, data, path)).as_numpy_iterator()
    ]
    predicted = [
        t if isinstance(t, tuple) else (t,)
        for t in predict.read_texts(path, **kwargs)
    ]
    assert predicted == evaluated == trained, path
    assert len(predicted) == rows, path
  assert predicted[0] == ('say "hi 0', 'and "bye')
