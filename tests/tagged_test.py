"""Tagged sentences in: CoNLL and JSON lines files with injected defects
whose records and counts reconcile exactly, the tag set and its scheme
(IOB1 converted, BIOES refused), TFDS conll2003 under mock_data, and the
shared CoNLL-2003 files as their README counts them."""

import dataclasses
import gzip
import json
import os
import random
import re
import sys

import numpy as np
import pytest
import tensorflow as tf
import tensorflow_datasets as tfds

from conftest import ROOT
from trainer.data import counts as counts_lib
from trainer.data import sources
from trainer.data import splits as splits_lib
from trainer.data import tag_sets
from trainer.data import tagged_files
from trainer.data import tagged_sources
from trainer.foundation import errors

CONLL = os.path.join(os.path.dirname(ROOT), "shared", "data", "conll2003")
# The shared files' tags (and TFDS's, and Hugging Face's), ids as read.
NAMES = ("O", "B-LOC", "I-LOC", "B-MISC", "I-MISC", "B-ORG", "I-ORG", "B-PER",
         "I-PER")
TAGS = tag_sets.TagSet(NAMES)
ID = {name: i for i, name in enumerate(NAMES)}
# Hugging Face's conll2003 ClassLabel names (TFDS's too), in their id order.
HF_NAMES = ("O", "B-PER", "I-PER", "B-ORG", "I-ORG", "B-LOC", "I-LOC", "B-MISC",
            "I-MISC")


def _ids(*names):
  return " ".join(str(ID[n]) for n in names)


def _records(source, stripes=1):
  """[(index, line, text, tags, reason name)] of every record, by index."""
  out = []
  for chunk in source.chunks(stripes):
    assert chunk["text"].shape[1] == 1 and chunk["label"].dtype == tf.int64
    assert not chunk["label"].numpy().any()
    for i, line, text, tags, reason in zip(*(
        chunk[k].numpy() for k in ("index", "line", "text", "tags", "reason"))):
      out.append((int(i), int(line), text[0].decode(), tags.decode(),
                  sources.REASONS[reason]))
  return sorted(out)


def _counts(source):
  counts = counts_lib.count(splits_lib.Split("s", source))
  assert re.fullmatch("[0-9a-f]{16}", counts.pop("digest"))
  return counts


# A CoNLL file as the original distribution ships it (-DOCSTART- and the
# blank line after it, four columns), with one defect per bad sentence.
CONLL_LINES = [
    "-DOCSTART- -X- -X- O",  # 1
    "",
    "EU NNP B-NP B-ORG",  # 3: sentence 0
    "rejects VBZ B-VP O",
    "German JJ B-NP B-MISC",
    "",
    "Peter NNP B-NP B-PER",  # 7: sentence 1, a tag outside the set
    "Blackburn NNP I-NP B-FOO",
    "",
    "BRUSSELS NNP B-LOC",  # 10: sentence 2, three columns
    "1996-08-22 CD I-NP O",
    "",
    "The DT B-NP O",  # 13: sentence 3, a word without a tag
    "European",
    "Commission NNP I-NP I-ORG",
    "",
    "",
    "-DOCSTART- -X- -X- O",  # 18: a document break ends nothing open
    "",
    "Only\tNNP  B-NP   B-PER ",  # 20: sentence 4, tabs and runs of spaces
    "Lisbon NNP I-NP B-LOC",
    "-DOCSTART- -X- -X- O",  # 22: ends sentence 4 without a blank line
    "caf\xe9 NN B-NP O",  # 23: sentence 5, invalid UTF-8 (latin-1 bytes)
    "",
    "Last NNP B-NP B-MISC",  # 25: sentence 6, no blank line at the end
    "one NN I-NP I-MISC",
]
CONLL_RECORDS = [
    (0, 3, "EU rejects German", _ids("B-ORG", "O", "B-MISC"), "ok"),
    # A tag outside the set is found after reading: the words are kept.
    (1, 7, "Peter Blackburn", "", "tag_not_in_set"),
    (2, 10, "", "", "column_count_differs"),
    (3, 13, "", "", "word_without_tag"),
    (4, 20, "Only Lisbon", _ids("B-PER", "B-LOC"), "ok"),
    (5, 23, "", "", "invalid_utf8"),
    (6, 25, "Last one", _ids("B-MISC", "I-MISC"), "ok"),
]


def _conll_bytes():
  text = "\n".join(CONLL_LINES)
  # Sentence 5 is latin-1, the rest UTF-8: a file one bad line damages.
  good, bad = text.split("caf\xe9")
  return good.encode("utf-8") + b"caf\xe9" + bad.encode("utf-8")


def test_conll_records_reasons_and_counts_reconcile(tmp_path):
  path = tmp_path / "train.txt"
  path.write_bytes(_conll_bytes())
  source = tagged_sources.FileSource(str(path), TAGS)
  layout = source.layout()
  assert (layout.file_format, layout.width, layout.tag_index,
          layout.encoding) == ("conll", 4, 3, "utf-8")
  assert _records(source) == CONLL_RECORDS
  assert _records(source, stripes=3) == CONLL_RECORDS
  assert _counts(source) == dict(
      rows_read=7,
      rows_used=3,
      rejected=dict(
          tag_not_in_set=1,
          column_count_differs=1,
          word_without_tag=1,
          invalid_utf8=1))


def test_conll_tag_column_and_gzip(tmp_path):
  """The tag in another column (the chunk tags here), from a gzip file
  whatever its name."""
  path = tmp_path / "chunks.data"
  path.write_bytes(
      gzip.compress(b"\xef\xbb\xbfEU NNP B-NP B-ORG\nrejects VBZ B-VP O\n\n"
                    b"Peter NNP B-NP B-PER\n"))
  chunk_tags = tag_sets.TagSet(("O", "B-NP", "I-NP", "B-VP", "I-VP"))
  source = tagged_sources.FileSource(str(path), chunk_tags, tag_column=2)
  assert source.layout().bom == 3
  assert _records(source) == [(0, 1, "EU rejects", "1 3", "ok"),
                              (1, 4, "Peter", "1", "ok")]
  assert tagged_sources.read_tag_set(source) == chunk_tags
  with pytest.raises(errors.DataError, match="tag column 4 is outside "):
    tagged_files.detect_layout(str(path), tag_column=4)
  with pytest.raises(errors.DataError, match="tag column 0 is outside "):
    tagged_files.detect_layout(str(path), tag_column=0)


def test_a_file_of_words_without_tags_is_refused_in_one_line(tmp_path):
  path = tmp_path / "words.txt"
  path.write_text("-DOCSTART-\n\nEU\nrejects\n")
  with pytest.raises(errors.DataError) as info:
    tagged_sources.FileSource(str(path)).layout()
  assert str(info.value) == (
      f"{path}: line 3 ('EU'), the first word line, has one column: CoNLL "
      "lines hold a word and its tag (the tag last)")


JSONL_LINES = [
    {
        "tokens": ["EU", "rejects"],
        "ner_tags": ["B-ORG", "O"]
    },  # 1
    "",
    {
        "tokens": ["a", "b"],
        "ner_tags": ["O"]
    },  # 3
    "{not json",
    {
        "tokens": ["New York", "x"],
        "ner_tags": ["B-LOC", "O"]
    },  # 5
    {
        "tokens": [],
        "ner_tags": []
    },
    {
        "tokens": ["x"],
        "ner_tags": ["B-XYZ"]
    },  # 7
    {
        "tokens": ["x"],
        "ner_tags": "O"
    },
    ["x"],  # 9
    {
        "tokens": ["\u00dcn\u00efcode", "ok"],
        "ner_tags": ["B-PER", "I-PER"]
    },
    {
        "tokens": ["", "x"],
        "ner_tags": ["O", "O"]
    },  # 11
    {
        "tokens": ["non\u00a0breaking"],
        "ner_tags": ["O"]
    },
    {
        "tokens": ["x"],
        "ner_tags": ["B PER"]
    },  # 13
    {
        "tokens": ["x"],
        "words": ["y"],
        "ner_tags": ["O"],
        "id": "13"
    },
]
JSONL_RECORDS = [
    (0, 1, "EU rejects", _ids("B-ORG", "O"), "ok"),
    (1, 3, "", "", "tag_count_differs"),
    (2, 4, "", "", "malformed_json"),
    (3, 5, "", "", "word_with_whitespace"),
    (4, 6, "", "", "empty_text"),
    (5, 7, "x", "", "tag_not_in_set"),
    (6, 8, "", "", "malformed_json"),
    (7, 9, "", "", "malformed_json"),
    (8, 10, "\u00dcn\u00efcode ok", _ids("B-PER", "I-PER"), "ok"),
    (9, 11, "", "", "word_with_whitespace"),
    (10, 12, "", "", "word_with_whitespace"),
    (11, 13, "", "", "tag_not_in_set"),
    (12, 14, "x", _ids("O"), "ok"),
]


def _write_jsonl(path, lines):
  path.write_text(
      "".join((line if isinstance(line, str) else json.dumps(line)) + "\n"
              for line in lines),
      encoding="utf-8")


def test_json_lines_records_reasons_and_counts_reconcile(tmp_path):
  path = tmp_path / "train.jsonl"
  _write_jsonl(path, JSONL_LINES)
  source = tagged_sources.FileSource(str(path), TAGS)
  assert source.layout().describe() == (
      "JSON lines (words 'tokens', tags 'ner_tags')")
  assert _records(source) == JSONL_RECORDS
  assert _records(source, stripes=4) == JSONL_RECORDS
  assert _counts(source) == dict(
      rows_read=13,
      rows_used=3,
      rejected=dict(
          tag_count_differs=1,
          malformed_json=3,
          word_with_whitespace=3,
          empty_text=1,
          tag_not_in_set=2))


def test_json_lines_of_tag_ids_words_and_tags_keys_and_detection(tmp_path):
  """A `datasets` export: ClassLabel ids with their names given; `words` and
  `tags` keys; JSON lines known by the first line whatever the name."""
  path = tmp_path / "export.data"
  _write_jsonl(
      path,
      [
          {
              "id": "0",
              "words": ["EU", "rejects", "German"],
              "tags": [3, 0, 7]
          },
          {
              "id": "1",
              "words": ["x"],
              "tags": [9]
          },  # no name for id 9
          {
              "id": "2",
              "words": ["x"],
              "tags": [True]
          },
      ])
  source = tagged_sources.FileSource(str(path), TAGS, tag_names=HF_NAMES)
  assert source.layout().describe() == ("JSON lines (words 'words', tags "
                                        "'tags')")
  assert _records(source) == [
      (0, 1, "EU rejects German", _ids("B-ORG", "O", "B-MISC"), "ok"),
      (1, 2, "", "", "tag_not_in_set"),
      (2, 3, "", "", "malformed_json"),
  ]
  with pytest.raises(
      errors.DataError,
      match="line 1 holds tag ids .* give "
      "their names in id order"):
    tagged_sources.FileSource(str(path), TAGS).layout()
  with pytest.raises(
      errors.DataError,
      match=r"no list of words \(key "
      r"text\); its keys are \['id', 'tags', 'words'\]"):
    tagged_files.detect_layout(str(path), words_key="text")
  array = tmp_path / "array.json"
  array.write_text(json.dumps([JSONL_LINES[0]]))
  with pytest.raises(
      errors.DataError, match="is a JSON array; give JSON "
      "lines"):
    tagged_files.detect_layout(str(array))


def _tags_of(records, names=NAMES):
  return [[names[int(i)] for i in r[3].split()] for r in records]


def test_iob1_to_iob2_by_hand():
  cases = [
      (["I-PER", "I-PER", "O", "I-LOC"], ["B-PER", "I-PER", "O", "B-LOC"]),
      # Two persons side by side: IOB1's only B-.
      (["I-PER", "B-PER", "I-PER"], ["B-PER", "B-PER", "I-PER"]),
      (["I-ORG", "I-LOC", "I-LOC"], ["B-ORG", "B-LOC", "I-LOC"]),
      (["O", "I-MISC", "O", "O"], ["O", "B-MISC", "O", "O"]),
      # IOB2 is left as it is.
      (
          ["B-PER", "I-PER", "O", "B-LOC", "B-LOC"],) * 2,
      ([], []),
  ]
  for iob1, iob2 in cases:
    assert tag_sets.iob1_to_iob2(iob1) == iob2, iob1
    assert tag_sets.iob1_to_iob2(iob2) == iob2
  assert tag_sets.openings(["I-PER", "B-PER", "I-PER", "O", "I-LOC"]) == (3, 2)
  assert tag_sets.openings(["B-PER", "I-PER", "I-LOC"]) == (2, 1)


def _to_iob2(ids):
  # pylint: disable-next=protected-access
  return tagged_sources._to_iob2(tf.ragged.constant(ids, tf.int64),
                                 TAGS).to_list()


def test_the_tf_conversion_is_the_python_one_eagerly_and_in_tf_data():
  rng = random.Random(57)
  sentences = [[rng.randrange(len(NAMES))
                for _ in range(rng.randrange(0, 9))]
               for _ in range(300)]
  sentences[5] = [ID["I-PER"], -1, ID["I-PER"]]  # an unknown tag is kept
  want = []
  for ids in sentences:
    names = [NAMES[i] if i >= 0 else "?" for i in ids]
    # An unknown tag ends any entity, as any other type would.
    pieces = " ".join(names).split("?")
    converted = []
    for k, piece in enumerate(pieces):
      converted += tag_sets.iob1_to_iob2(
          piece.split()) + (["?"] if k < len(pieces) - 1 else [])
    want.append([ID[n] if n != "?" else -1 for n in converted])
  assert _to_iob2(sentences) == want
  ds = tf.data.Dataset.from_tensor_slices(
      tf.ragged.constant(sentences, tf.int64)).ragged_batch(64)
  got = []
  # pylint: disable-next=protected-access
  for batch in ds.map(lambda ids: tagged_sources._to_iob2(ids, TAGS)):
    got += batch.to_list()
  assert got == want


IOB1_CONLL = """EU NNP I-ORG
rejects VBZ O
German JJ I-MISC

Peter NNP I-PER
Blackburn NNP I-PER
Paul NNP B-PER

BRUSSELS NNP I-LOC
"""


def test_iob1_is_read_converted_with_one_log_line(tmp_path, caplog,
                                                  info_logging):
  del info_logging
  path = tmp_path / "eng.train"
  path.write_text(IOB1_CONLL)
  source = tagged_sources.FileSource(str(path))
  tag_set = tagged_sources.read_tag_set(source)
  assert tag_set == tag_sets.TagSet(NAMES, "iob1")
  said = [r.getMessage() for r in caplog.records if "IOB1" in r.getMessage()]
  assert said == [
      f"{path}: the tags are IOB1 (4 of 5 entities open with I-, the first "
      "in the sentence at line 1); each sentence is converted to IOB2 as it "
      "is read"
  ]
  records = _records(dataclasses.replace(source, tag_set=tag_set))
  assert _tags_of(records) == [["B-ORG", "O", "B-MISC"],
                               ["B-PER", "I-PER", "B-PER"], ["B-LOC"]]
  # The same tags given by name: the scheme is still read from the data.
  given = tagged_sources.read_tag_set(source, HF_NAMES)
  assert given == tag_sets.TagSet(HF_NAMES, "iob1")


def test_bioes_and_other_schemes_are_refused_in_one_line(tmp_path):
  path = tmp_path / "bioes.txt"
  path.write_text("EU NNP S-ORG\n\nPeter NNP B-PER\nBlackburn NNP E-PER\n")
  with pytest.raises(errors.DataError) as info:
    tagged_sources.read_tag_set(tagged_sources.FileSource(str(path)))
  assert str(info.value) == (
      f"{path} line 1: tag 'S-ORG' is not IOB: the tags look BIOES (S-/E- "
      "tags); the trainer reads IOB2 (B- opens every entity) or IOB1 "
      "(converted): convert the tags to IOB2")
  path.write_text("EU NNP ORG\n")
  with pytest.raises(
      errors.DataError,
      match="line 1: tag 'ORG' is not IOB "
      r"\(O, B-TYPE or I-TYPE\)"):
    tagged_sources.read_tag_set(tagged_sources.FileSource(str(path)))


def test_tag_sets_are_values_with_their_checks():
  assert tag_sets.complete(["PER", "LOC",
                            "PER"]) == ("O", "B-LOC", "I-LOC", "B-PER", "I-PER")
  assert TAGS.types == ("LOC", "MISC", "ORG", "PER")
  assert len(TAGS) == 9 and TAGS.ids(["O", "I-PER"]) == [0, 8]
  value = json.loads(json.dumps(tag_sets.TagSet(HF_NAMES, "iob1").to_json()))
  assert value == dict(names=list(HF_NAMES), scheme="iob1")
  assert tag_sets.TagSet.from_json(value) == tag_sets.TagSet(HF_NAMES, "iob1")
  for names, problem in (
      (("B-PER", "I-PER"), "it has no O tag"),
      (("O", "B-PER", "O"), r"tags \['O'\] are listed twice"),
      (("O", "I-PER"), r"\['B-PER'\] missing: every I- tag needs the B-"),
      (("O", "S-PER"), "the tags look BIOES"),
      (("O", "U-PER"), "the tags look BILOU"),
      (("O", "B-"), "tag 'B-' is not IOB"),
      (("O", "B-New York"), "empty or holds whitespace"),
  ):
    with pytest.raises(errors.DataError, match=problem):
      tag_sets.TagSet(names)
  with pytest.raises(errors.DataError, match="tag scheme 'bioes': choose"):
    tag_sets.TagSet(NAMES, "bioes")


def test_too_many_bad_sentences_stop_naming_file_lines_and_reason(tmp_path):
  lines = []
  for i in range(20):
    lines += [f"w{i} NN O", f"x{i} NN {'B-FOO' if i % 4 == 3 else 'B-PER'}", ""]
  path = tmp_path / "dev.txt"
  path.write_text("\n".join(lines))
  split = splits_lib.Split("validation",
                           tagged_sources.FileSource(str(path), TAGS))
  counts = counts_lib.count(split)
  assert counts["rejected"] == dict(tag_not_in_set=5)
  with pytest.raises(errors.DataError) as info:
    counts_lib.check_bad_fraction(split, counts, 0.1)
  assert str(info.value) == (
      f"{path}: 5 of 20 rows rejected (tag_not_in_set: 5), more than "
      "--max_bad_fraction=0.1; most are tag_not_in_set, e.g. lines 10, 22, "
      "34. Check the file's format (CoNLL: a word and its tag a line, the "
      "same columns on every line, a blank line between sentences; JSON "
      "lines: an object a line with equally long lists of words and tags), "
      "the tag column and the tag set.")
  counts_lib.check_bad_fraction(split, counts, 0.25)  # skipped, counted
  assert tagged_sources.first_bad_row(split) == (
      f"{path} line 10: tag_not_in_set")
  clean = tmp_path / "clean.txt"
  clean.write_text("w NN O\n")
  assert tagged_sources.first_bad_row(
      splits_lib.Split("s", tagged_sources.FileSource(str(clean),
                                                      TAGS))) is None


def _old_digests(chunk):
  """counts._row_digests as it was before tags: a text row's digest must
  not change."""
  label = tf.strings.as_string(chunk["label"])
  fields = tf.strings.reduce_join(chunk["text"], axis=1, separator="\x1f")
  keys = tf.strings.join([
      tf.strings.as_string(chunk["index"]), fields, label,
      tf.strings.as_string(chunk["reason"])
  ],
                         separator="\x1e")
  return tf.bitcast(tf.fingerprint(keys), tf.int64)


def test_the_digest_holds_the_tags_and_no_text_digest_changes(tmp_path):
  # pylint: disable=protected-access
  text_chunk = dict(
      index=tf.constant([0, 1], tf.int64),
      line=tf.constant([2, 3], tf.int64),
      text=tf.constant([["a"], ["b"]]),
      label=tf.constant([1, 0], tf.int64),
      reason=tf.constant([0, 3], tf.int32))
  assert (counts_lib._row_digests(text_chunk).numpy() == _old_digests(
      text_chunk).numpy()).all()
  a, b = tmp_path / "a.txt", tmp_path / "b.txt"
  a.write_text("EU NNP B-ORG\nrejects VBZ O\n")
  b.write_text("EU NNP B-PER\nrejects VBZ O\n")  # one tag differs
  digest = lambda p: counts_lib.count(
      splits_lib.Split("s", tagged_sources.FileSource(str(p), TAGS)))["digest"]
  assert digest(a) != digest(b)
  chunk = next(iter(tagged_sources.FileSource(str(a), TAGS).chunks()))
  assert (counts_lib._row_digests(chunk).numpy()
          != _old_digests(chunk).numpy()).all()


def test_python_and_tf_agree_on_what_whitespace_is():
  """A word with whitespace is refused by Python (files) and by RE2 (TFDS);
  they must agree on every code point."""
  points = [c for c in range(sys.maxunicode + 1) if not 0xD800 <= c < 0xE000]
  words = tf.constant([f"a{chr(c)}b".encode("utf-8") for c in points])
  # pylint: disable-next=protected-access
  empty_or_spaced = tagged_sources._empty_or_spaced
  spaced = empty_or_spaced(words).numpy()
  python = [chr(c).isspace() for c in points]
  differ = [hex(c) for c, s, p in zip(points, spaced, python) if s != p]
  assert not differ
  assert sum(python) == 29
  assert empty_or_spaced(tf.constant([""])).numpy()[0]


def _conll2003_mock(examples):
  """TFDS conll2003 splits of `examples` {split: [(tokens, ner ids)]}, in
  the builder's features (tokens, pos, chunks, ner)."""

  def as_dataset(self, split, **kwargs):
    del self, kwargs
    rows = examples[str(split)]

    def generate():
      for tokens, ner in rows:
        yield dict(
            tokens=tokens,
            ner=ner,
            pos=[0] * len(tokens),
            chunks=[0] * len(tokens))

    spec = dict(
        tokens=tf.TensorSpec([None], tf.string),
        ner=tf.TensorSpec([None], tf.int64),
        pos=tf.TensorSpec([None], tf.int64),
        chunks=tf.TensorSpec([None], tf.int64))
    return tf.data.Dataset.from_generator(generate, output_signature=spec)

  return tfds.testing.mock_data(as_dataset_fn=as_dataset)


def test_tfds_conll2003_records_with_its_class_names():
  hf = {name: i for i, name in enumerate(HF_NAMES)}
  train = [
      (["EU", "rejects", "German"], [hf["B-ORG"], hf["O"], hf["B-MISC"]]),
      (["Peter", "Blackburn"], [hf["B-PER"], hf["I-PER"]]),
      (["New York", "x"], [hf["B-LOC"], hf["O"]]),
      ([], []),
      (["a", "b"], [0]),
      (["Lisbon"], [hf["B-LOC"]]),
  ]
  with _conll2003_mock({"train": train, "dev": train[:2]}):
    raw = tagged_sources.TfdsSource("conll2003", "train")
    tag_set = tagged_sources.read_tag_set(raw)
    assert tag_set == tag_sets.TagSet(NAMES)  # sorted, not TFDS's order
    source = dataclasses.replace(raw, tag_set=tag_set)
    assert source.describe() == "TFDS conll2003 split train"
    records = _records(source)
    counts = _counts(source)
  assert records == [
      (0, 1, "EU rejects German", _ids("B-ORG", "O", "B-MISC"), "ok"),
      (1, 2, "Peter Blackburn", _ids("B-PER", "I-PER"), "ok"),
      (2, 3, "", "", "word_with_whitespace"),
      (3, 4, "", "", "empty_text"),
      (4, 5, "", "", "tag_count_differs"),
      (5, 6, "Lisbon", _ids("B-LOC"), "ok"),
  ]
  assert counts == dict(
      rows_read=6,
      rows_used=3,
      rejected=dict(word_with_whitespace=1, empty_text=1, tag_count_differs=1))


def test_tfds_conll2003_random_mock_data_reconciles():
  """tfds.testing.mock_data's own random conll2003: words of random letters
  and spaces, tags of random ids, each list of its own length (so nearly
  every sentence is rejected, each for the reason its data shows)."""
  with tfds.testing.mock_data(num_examples=20):
    examples = list(tfds.load("conll2003", split="train").as_numpy_iterator())
    source = tagged_sources.TfdsSource("conll2003", "train", tag_set=TAGS)
    records = _records(source)
  assert len(records) == len(examples) == 20
  for (_, line, text, tags, reason), ex in zip(records, examples):
    words = [w.decode() for w in ex["tokens"]]
    if len(words) != len(ex["ner"]):
      want = "tag_count_differs"
    elif any(not w or " " in w for w in words):
      want = "word_with_whitespace"
    else:
      want = "ok"
    assert reason == want
    if want == "ok":
      assert text.split(" ") == words
      read = [NAMES[int(i)] for i in tags.split()]
      assert read == [HF_NAMES[i] for i in ex["ner"]]


def _shared(name):
  path = os.path.join(CONLL, name)
  if not os.path.exists(path):
    pytest.skip(f"{path} is absent (../shared/data/conll2003)")
  return path


def test_the_shared_conll2003_files_as_their_readme_counts_them():
  train = tagged_sources.FileSource(_shared("train.txt"))
  tag_set = tagged_sources.read_tag_set(train)
  assert tag_set == tag_sets.TagSet(NAMES, "iob2")
  for name, sentences, tokens in (("train.txt", 14_041, 203_621),
                                  ("dev.txt", 3_250, 51_362)):
    source = tagged_sources.FileSource(_shared(name), tag_set)
    assert _counts(source) == dict(
        rows_read=sentences, rows_used=sentences, rejected={})
    read = entities = 0
    begins = [ID[n] for n in NAMES if n.startswith("B-")]
    for chunk in source.chunks(stripes=4 if name == "dev.txt" else 1):
      ids = tf.strings.split(chunk["tags"], " ")
      words = tf.strings.split(chunk["text"][:, 0], " ")
      assert (ids.row_lengths().numpy() == words.row_lengths().numpy()).all()
      flat = tf.strings.to_number(ids.flat_values, tf.int64).numpy()
      read += len(flat)
      entities += int(np.isin(flat, begins).sum())  # IOB2: B- opens each
    assert read == tokens, name
    assert entities == {"train.txt": 23_499, "dev.txt": 5_942}[name]
