r"""A run's preprocessing as Hugging Face `tokenizers` data (tokenizer.json).

The trainer's text path is `preprocessing.clean_text` on the host, then the
loaded preprocessor's `tokenize`. Two kinds of preprocessor exist, and
their normalization differs (`TextPath.style`):

- "bert": this project's (the demo's, `trainer.convert_hf`'s): Hugging
  Face BERT's clean-up (`preprocessing.normalize`): whitespace to spaces,
  control and format characters removed, then per-character lower-casing
  and accent stripping.
- "tf_text": TF Hub's `bert_*_preprocess` (Model Garden's exporter), i.e.
  tensorflow_text's BasicTokenizer: with lower-casing, ICU's NFKC_Casefold
  ("ｈｉ" -> "hi", "ß" -> "ss", default-ignorables dropped), NFD, combining
  marks dropped; always, control and format characters become spaces.

Both then split words as tensorflow_text's BertTokenizer does (ASCII
whitespace; punctuation and CJK ideographs isolated) and run WordPiece.
`tokenizer_json` spells that out as normalizers and pre-tokenizers, so
`AutoTokenizer` gives the ids the trainer gives; `check_tokenizer` proves it
on probe texts before anything is written.
"""

import dataclasses
import json
import re
import unicodedata

from absl import logging
import tensorflow as tf

from trainer.data import preprocessing
from trainer.encoders import handles
from trainer.foundation import errors

ExportError = errors.ExportError


@dataclasses.dataclass(frozen=True)
class TextPath:
  """How a preprocessor normalizes text (module docstring)."""
  style: str  # "bert" | "tf_text"
  lower_case: bool
  strip_accents: bool


def _ids(preprocessor, texts):
  tokens = preprocessor.tokenize(preprocessing.clean_text(tf.constant(texts)))
  return tokens.merge_dims(-2, -1).to_list()


def read_text_path(preprocessor, vocab):
  """The TextPath of a loaded preprocessor, told by behaviour (a hub.load'ed
  one keeps no Python attributes): a vocabulary word upper-cased gives its
  own id when lower-casing, accented when stripping accents; two words
  joined by a control character are two words for tensorflow_text's
  BasicTokenizer (a space) and one for the "bert" clean-up (removed)."""
  words = [t for t in vocab if re.fullmatch(r"[a-z]*[aeiou][a-z]*", t)]
  words = [w for w in words if len(w) >= 3] or words
  if not words:
    raise ExportError("the preprocessor's vocabulary has no plain lower-case "
                      "word to tell its text normalization by")
  word = words[0]
  accented = re.sub("[aeiou]", lambda m: m.group(0) + "\u0301", word, 1)
  plain, upper, accent, joined, spaced = _ids(
      preprocessor,
      [word,
       word.upper(), accented, f"{word}\x07{word}", f"{word} {word}"])
  return TextPath(
      style="tf_text" if joined == spaced else "bert",
      lower_case=upper == plain,
      strip_accents=accent == plain)


def _replace(pattern, content, regex=True):
  return dict(
      type="Replace",
      pattern={"Regex" if regex else "String": pattern},
      content=content)


def _lower(text):
  """NFKC then `Lowercase`, as `tokenizers` does them (Python's own
  Unicode tables where `tokenizers` is not installed)."""
  try:
    # pylint: disable-next=g-import-not-at-top
    from tokenizers import normalizers as n
  except ImportError:
    return [unicodedata.normalize("NFKC", t).lower() for t in text]
  pipeline = n.Sequence([n.NFKC(), n.Lowercase()])
  return [pipeline.normalize_str(t) for t in text]


def casefold_steps():
  """Normalizers that turn NFKC + `Lowercase` into ICU's NFKC_Casefold
  (tensorflow_text's `case_fold_utf8`), found by folding every assigned
  code point both ways: the characters it drops (default-ignorables) in
  one regex, then one `Replace` per other difference (ß -> ss, ς -> σ,
  Cherokee to its upper case, ...)."""
  chars = [
      chr(c)
      for c in range(0x110000)
      if not 0xD800 <= c < 0xE000 and unicodedata.category(chr(c)) != "Cn"
  ]
  import tensorflow_text as text  # pylint: disable=g-import-not-at-top
  folded = text.case_fold_utf8(tf.constant(chars)).numpy()
  rules = {}
  for lowered, want in zip(_lower(chars), folded):
    want = want.decode("utf-8")
    if lowered != want and rules.setdefault(lowered, want) != want:
      # Two characters this pipeline lower-cases alike but ICU folds
      # apart: no rule can tell them; the probes check the first.
      logging.warning("case folding: %r folds two ways", lowered)
  dropped = sorted(k for k, v in rules.items() if not v and len(k) == 1)
  steps = [
      _replace("[" + "".join(f"\\x{{{ord(c):X}}}" for c in dropped) + "]", "")
  ] if dropped else []
  # Longer sources first, so a character's own rule cannot split them.
  for source in sorted(rules, key=lambda k: (-len(k), k)):
    if source not in dropped:
      steps.append(_replace(source, rules[source], regex=False))
  return steps


def normalizers(path):
  """The trainer's text path before the word split (`clean_text`, then the
  preprocessor's normalization, TextPath `path`) as `tokenizers`
  normalizers."""
  # pylint: disable-next=protected-access
  entities = preprocessing._ENTITIES  # the one table clean_text uses
  steps = [_replace(entity, char, regex=False) for entity, char in entities]
  if path.style == "tf_text":
    if path.lower_case:  # tensorflow_text also strips accents then
      steps += [dict(type="NFKC"), dict(type="Lowercase")] + casefold_steps()
      steps += [dict(type="NFD"), _replace(r"\p{Mn}", "")]
    steps.append(_replace(r"[\p{Cc}\p{Cf}]", " "))
    return dict(type="Sequence", normalizers=steps)
  steps += [
      _replace(r"[\t\n\r\p{Zs}]", " "),
      _replace(r"[\p{Cc}\p{Cf}\x{FFFD}]", "")
  ]
  if path.lower_case:
    steps += [_replace("\u03a3", "\u03c3", regex=False), dict(type="Lowercase")]
  if path.strip_accents:
    steps += [dict(type="NFD"), _replace(r"\p{Mn}", "")]
  return dict(type="Sequence", normalizers=steps)


# What tensorflow_text's BertTokenizer splits off as a word of its own:
# ASCII punctuation, Unicode punctuation and CJK ideographs.
_ISOLATED = (r"[\x{21}-\x{2F}\x{3A}-\x{40}\x{5B}-\x{60}\x{7B}-\x{7E}\p{P}"
             r"\x{4E00}-\x{9FFF}\x{3400}-\x{4DBF}\x{20000}-\x{2A6DF}"
             r"\x{2A700}-\x{2B73F}\x{2B740}-\x{2B81F}\x{2B820}-\x{2CEAF}"
             r"\x{F900}-\x{FAFF}\x{2F800}-\x{2FA1F}]")


def _split(pattern, behavior):
  return dict(
      type="Split",
      pattern=dict(Regex=pattern),
      behavior=behavior,
      invert=False)


def special_names(vocab, special):
  """The special tokens' names, as transformers keys them."""
  return dict(
      unk_token="[UNK]",
      sep_token=vocab[special["end_of_segment_id"]],
      pad_token=vocab[special["padding_id"]],
      cls_token=vocab[special["start_of_sequence_id"]],
      mask_token=vocab[special["mask_id"]])


def tokenizer_json(vocab, special, path):
  """tokenizer.json (a dict) of the trainer's preprocessor over `vocab`
  (tokens by id) with the special token ids `special` and TextPath
  `path`."""
  ids = {}
  for i, token in enumerate(vocab):
    ids.setdefault(token, i)
  cls = vocab[special["start_of_sequence_id"]]
  sep = vocab[special["end_of_segment_id"]]

  def template(*parts):
    kind = lambda name: "SpecialToken" if name in (cls, sep) else "Sequence"
    return [{kind(name): dict(id=name, type_id=t)} for name, t in parts]

  return {
      "version":
          "1.0",
      "truncation":
          None,
      "padding":
          None,
      "added_tokens": [
          dict(
              id=ids[t],
              content=t,
              single_word=False,
              lstrip=False,
              rstrip=False,
              normalized=False,
              special=True) for t in special_names(vocab, special).values()
      ],
      "normalizer":
          normalizers(path),
      "pre_tokenizer":
          dict(
              type="Sequence",
              pretokenizers=[
                  _split(r"[\t\n\f\r ]+", "Removed"),
                  _split(_ISOLATED, "Isolated")
              ]),
      "post_processor":
          dict(
              type="TemplateProcessing",
              single=template((cls, 0), ("A", 0), (sep, 0)),
              pair=template((cls, 0), ("A", 0), (sep, 0), ("B", 1), (sep, 1)),
              special_tokens={
                  t: dict(id=t, ids=[ids[t]], tokens=[t]) for t in (cls, sep)
              }),
      "decoder":
          dict(type="WordPiece", prefix="##", cleanup=True),
      "model":
          dict(
              type="WordPiece",
              unk_token="[UNK]",
              continuing_subword_prefix="##",
              max_input_chars_per_word=100,
              vocab=ids),
  }


def tokenizer_config(vocab, special, path, max_length):
  """tokenizer_config.json: `PreTrainedTokenizerFast` (tokenizer.json as
  written), the special tokens matched as text (a tweet's "[SEP]" is
  split, as the trainer splits it), the token types returned."""
  return dict(
      special_names(vocab, special),
      tokenizer_class="PreTrainedTokenizerFast",
      do_lower_case=path.lower_case,
      strip_accents=path.strip_accents,
      model_max_length=max_length,
      split_special_tokens=True,
      model_input_names=["input_ids", "token_type_ids", "attention_mask"],
      padding_side="right",
      truncation_side="right",
      clean_up_tokenization_spaces=False)


def read_vocab(preprocessor, handle):
  """The loaded preprocessor's vocabulary (tokens by id): its vocab_file
  asset (this project's), else the SavedModel's assets/vocab.txt."""
  asset = getattr(getattr(preprocessor, "vocab_file", None), "asset_path", None)
  if asset is not None:
    path = asset.numpy().decode("utf-8")
  else:  # TF Hub's: in its folder (for a URL, the TF Hub cache's copy)
    folder = handles.local_folder(handle, "preprocessor_handle")
    path = f"{folder.rstrip('/')}/assets/vocab.txt"
  if not tf.io.gfile.exists(path):
    raise ExportError(f"--preprocessor_handle={handle} has no WordPiece "
                      "vocabulary (assets/vocab.txt); it is not supported by "
                      "the Hugging Face export")
  with tf.io.gfile.GFile(path) as f:
    return [line.rstrip("\n") for line in f]


# Texts the exported tokenizer is checked on before anything is written.
PROBES = (
    "Caf\u00e9 &amp; cr\u00e8me &lt;3 &quot;ok&quot;",
    "\uff48\uff49 Stra\u00dfe \u0130stanbul \u03a3\u039f\u03a3 \u1e9e",
    "tab\tnbsp\u00a0zero\u200bwidth\ufeff bom \x07bell soft\u00adhyphen",
    "\u65e5\u672c\u8a9e\u4e2d\u6587 \u041f\u0440\u0438\u0432\u0435\u0442",
    "I \u2764\ufe0f NY \U0001f600 #x [CLS] [SEP] [MASK] a|b ~`^",
    "line\u2028sep \u0915\u093f \u00c5ngstr\u00f6m \ufb01ne \u2460 \u3000x",
    "\u13a0\uab70 \u1f80 \u0390 caf\u0065\u0301 \u212b", "", "Hello, World!")


def check_tokenizer(preprocessor, tokenizer):
  """ExportError unless `tokenizer` (tokenizer.json, a dict) gives the
  loaded preprocessor's ids on `PROBES`; skipped, and said, when the
  `tokenizers` package is not installed."""
  try:
    import tokenizers  # pylint: disable=g-import-not-at-top
  except ImportError:
    logging.warning("tokenizers is not installed: the exported tokenizer "
                    "was not checked against the preprocessor")
    return
  backend = tokenizers.Tokenizer.from_str(json.dumps(tokenizer))
  backend.encode_special_tokens = True
  want = _ids(preprocessor, list(PROBES))
  for text, ids in zip(PROBES, want):
    got = backend.encode(text, add_special_tokens=False).ids
    if got != ids:
      raise ExportError(
          f"the preprocessor tokenizes {text!r} as {ids}, a tokenizer.json "
          f"of this trainer's text path as {got}: its text normalization "
          "is not supported by the Hugging Face export")


def files(preprocessor, handle, max_length):
  """{file name: bytes} of the tokenizer files for the loaded preprocessor
  (`handle` its location) packing to `max_length`."""
  vocab = read_vocab(preprocessor, handle)
  special = preprocessing.special_tokens(preprocessor)
  path = read_text_path(preprocessor, vocab)
  tokenizer = tokenizer_json(vocab, special, path)
  check_tokenizer(preprocessor, tokenizer)
  # What `tokenizers.Tokenizer.from_file` applies by default: the trained
  # length. transformers ignores it unless asked (truncation=True), then
  # cuts at tokenizer_config's model_max_length, the same length.
  tokenizer["truncation"] = dict(
      direction="Right",
      max_length=max_length,
      strategy="LongestFirst",
      stride=0)
  as_json = lambda d: json.dumps(d, indent=2).encode("utf-8") + b"\n"
  return {
      "vocab.txt": ("\n".join(vocab) + "\n").encode("utf-8"),
      "tokenizer.json":
          as_json(tokenizer),
      "tokenizer_config.json":
          as_json(tokenizer_config(vocab, special, path, max_length)),
      "special_tokens_map.json":
          as_json(special_names(vocab, special)),
  }
