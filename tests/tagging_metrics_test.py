"""Token tagging metrics: conlleval's entities and scores by hand, and equal
to seqeval's (default mode) on random sentences and on the shared CoNLL dev
set's gold tags against a perturbed copy: from the fixture that
tests/data/make_seqeval_expectations.py wrote with seqeval, and live when
seqeval is installed."""

import importlib.util
import json
import os
import random

import pytest

from trainer.evaluation import tagging

# Not conftest's ROOT: this file runs without TensorFlow too, where seqeval
# is installed (`pytest --noconftest`; see test_equal_to_seqeval_live).
DATA = os.path.join(os.path.dirname(os.path.abspath(__file__)), "data")


def _load_maker():
  """tests/data/make_seqeval_expectations.py, which makes the cases."""
  path = os.path.join(DATA, "make_seqeval_expectations.py")
  spec = importlib.util.spec_from_file_location("make_seqeval_expectations",
                                                path)
  module = importlib.util.module_from_spec(spec)
  spec.loader.exec_module(module)
  return module


MAKER = _load_maker()
with open(os.path.join(DATA, "seqeval_expectations.json")) as f:
  EXPECTED = json.load(f)


def test_entities_follow_conlleval_chunking():
  cases = [
      (["B-PER", "I-PER", "O", "B-LOC"], [("PER", 0, 2), ("LOC", 3, 4)]),
      (["I-PER", "I-PER"], [("PER", 0, 2)]),  # I- opens at the start
      (["O", "I-MISC", "I-MISC", "B-MISC"], [("MISC", 1, 3), ("MISC", 3, 4)]),
      (["B-PER", "I-LOC"], [("PER", 0, 1), ("LOC", 1, 2)]),  # I- of another
      (["B-ORG", "I-ORG", "I-PER", "I-PER", "O", "O"], [("ORG", 0, 2),
                                                        ("PER", 2, 4)]),
      (["B-PER", "B-PER", "I-PER"], [("PER", 0, 1), ("PER", 1, 3)]),
      ([b"B-geo-loc", b"I-geo-loc"], [("geo-loc", 0, 2)]),  # bytes too
      (["O"], []),
      ([], []),
  ]
  for tags, want in cases:
    assert tagging.entities(tags) == want, tags
  with pytest.raises(ValueError, match="tag 'S-PER' is not IOB"):
    tagging.entities(["O", "S-PER"])


GOLD = [["B-PER", "I-PER", "O", "B-LOC"], ["B-ORG", "O"]]
PREDICTED = [["B-PER", "I-PER", "O", "B-ORG"], ["B-ORG", "O"]]


def test_scores_by_hand():
  """Gold: PER 0-2, LOC 3 and ORG 0; predicted: PER 0-2, ORG 3 and ORG 0.
  Two of three right each way; 5 of 6 tags right."""
  got = tagging.tagging_metrics(GOLD, PREDICTED)
  assert got == dict(
      precision=2 / 3,
      recall=2 / 3,
      f1=2 * (2 / 3) * (2 / 3) / (4 / 3),
      accuracy=5 / 6,
      entities=3,
      predicted_entities=3,
      correct_entities=2,
      tokens=6,
      sentences=2,
      per_type=dict(
          LOC=dict(precision=0.0, recall=0.0, f1=0.0, support=1),
          ORG=dict(precision=0.5, recall=1.0, f1=2 / 3, support=1),
          PER=dict(precision=1.0, recall=1.0, f1=1.0, support=1)))
  assert got["f1"] == pytest.approx(2 / 3, abs=1e-15)


def test_nothing_to_score_is_zero_never_nan():
  assert tagging.tagging_metrics([], []) == dict(
      precision=0.0,
      recall=0.0,
      f1=0.0,
      accuracy=0.0,
      entities=0,
      predicted_entities=0,
      correct_entities=0,
      tokens=0,
      sentences=0,
      per_type={})
  only_o = tagging.tagging_metrics([["O", "O"]], [["B-PER", "O"]])
  assert (only_o["precision"], only_o["recall"], only_o["f1"],
          only_o["accuracy"]) == (0.0, 0.0, 0.0, 0.5)
  assert only_o["per_type"] == dict(
      PER=dict(precision=0.0, recall=0.0, f1=0.0, support=0))


def test_counts_merged_batch_by_batch_score_as_the_whole():
  gold, predicted = MAKER.random_case(5)
  whole = tagging.count(gold, predicted)
  parts = [
      tagging.count(gold[i:i + 3], predicted[i:i + 3])
      for i in range(0, len(gold), 3)
  ]
  merged = tagging.merge(*parts)
  assert merged == whole
  assert json.loads(json.dumps(merged)) == whole  # JSON values
  assert tagging.report(merged) == tagging.tagging_metrics(gold, predicted)
  assert tagging.merge() == tagging.count([], [])


def test_mismatched_lengths_are_refused():
  with pytest.raises(ValueError, match="2 gold sentences but 1 predicted"):
    tagging.count(GOLD, PREDICTED[:1])
  with pytest.raises(ValueError, match="sentence 1 has 2 gold tags but 1"):
    tagging.count(GOLD, [PREDICTED[0], ["O"]])


def _flat_entities(sentences):
  return MAKER.flat_entities(sentences, tagging.entities)


def _check_equal(ours, theirs, entities_digest, gold, predicted):
  """Our report against seqeval's numbers (`theirs`, as the fixture keeps
  them): micro scores, accuracy, every per-type row, and the entities."""
  for key in ("precision", "recall", "f1", "accuracy"):
    assert ours[key] == pytest.approx(theirs[key], abs=1e-12), key
  report = theirs["report"]
  types = sorted(k for k in report if not k.endswith(" avg"))
  assert sorted(ours["per_type"]) == types
  for kind in types:
    row, mine = report[kind], ours["per_type"][kind]
    assert mine["support"] == row["support"], kind
    for key, their_key in (("precision", "precision"), ("recall", "recall"),
                           ("f1", "f1-score")):
      assert mine[key] == pytest.approx(row[their_key], abs=1e-12), kind
  micro = report.get("micro avg")
  if micro:
    assert ours["entities"] == micro["support"]
    assert ours["f1"] == pytest.approx(micro["f1-score"], abs=1e-12)
  if types:
    macro = sum(ours["per_type"][k]["f1"] for k in types) / len(types)
    assert macro == pytest.approx(report["macro avg"]["f1-score"], abs=1e-12)
  mine = [_flat_entities(gold), _flat_entities(predicted)]
  assert MAKER.digest(mine) == entities_digest


def test_equal_to_seqeval_on_the_fixture():
  """The cases' numbers as seqeval gave them (make_seqeval_expectations);
  the cases are made again here and must be the ones it scored."""
  cases = MAKER.cases()
  assert set(EXPECTED["cases"]) - {"dev_perturbed"} <= set(cases)
  checked = []
  for name, theirs in sorted(EXPECTED["cases"].items()):
    if name not in cases:  # the dev set is absent here
      continue
    gold, predicted = cases[name]
    if MAKER.digest([gold, predicted]) != theirs["digest"]:
      pytest.fail(f"case {name} is not the one the fixture was made from" + (
          f" ({MAKER.DEV} changed)" if name == "dev_perturbed" else "") +
                  "; run tests/data/make_seqeval_expectations.py")
    ours = tagging.tagging_metrics(gold, predicted)
    _check_equal(ours, theirs, theirs["entities_digest"], gold, predicted)
    checked.append(name)
  assert len(checked) >= len(MAKER.RANDOM_SEEDS) + len(MAKER.HAND_CASES)


def test_dev_perturbed_is_in_the_fixture_and_checked_when_dev_is_here():
  assert "dev_perturbed" in EXPECTED["cases"]
  if not os.path.exists(MAKER.DEV):
    pytest.skip(f"{MAKER.DEV} is absent (../shared/data/conll2003)")
  gold, _ = MAKER.cases()["dev_perturbed"]
  assert len(gold) == 3250 and sum(map(len, gold)) == 51_362
  expected = EXPECTED["cases"]["dev_perturbed"]
  assert expected["report"]["micro avg"]["support"] == 5942


def test_equal_to_seqeval_live():
  """When seqeval is installed (never in the project's environment: it
  brings scikit-learn), on the fixture's cases and on fresh random ones.
  Where it is, with pytest and no TensorFlow:

      PYTHONPATH=. /tmp/seqeval-venv/bin/python -m pytest --noconftest \\
          -o addopts= tests/tagging_metrics_test.py
  """
  try:
    # pylint: disable-next=g-import-not-at-top,unused-import
    from seqeval.metrics import sequence_labeling  # noqa: F401
  except ImportError as e:
    pytest.skip(f"seqeval is not installed ({e}); the fixture test compares "
                "with its numbers")
  import warnings  # pylint: disable=g-import-not-at-top
  warnings.simplefilter("ignore")
  cases = MAKER.cases()
  rng = random.Random(2003)
  for seed in range(20):
    cases[f"fresh_{seed}"] = MAKER.random_case(rng.randrange(1 << 30))
  for name, (gold, predicted) in cases.items():
    theirs = MAKER.seqeval_scores(gold, predicted)
    ours = tagging.tagging_metrics(gold, predicted)
    _check_equal(ours, theirs, theirs["entities_digest"], gold, predicted)
    for key in ("precision", "recall", "f1", "accuracy"):
      assert ours[key] == theirs[key], (name, key)  # to the last bit
