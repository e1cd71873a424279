r"""Writes seqeval_expectations.json: what `seqeval` scores on fixed cases.

tests/tagging_metrics_test.py checks trainer/evaluation/tagging.py against
this file. seqeval needs scikit-learn, which stays out of the project's
environment (Keras imports it whenever it is installed, 1.4 s more for
every TensorFlow process), so this script runs in a throwaway one:

    python3 -m venv /tmp/seqeval-venv
    /tmp/seqeval-venv/bin/pip install seqeval numpy
    /tmp/seqeval-venv/bin/python tests/data/make_seqeval_expectations.py

The cases are made here (`cases()`): seeded random sentence pairs, a few by
hand, and the shared CoNLL-2003 dev set's gold tags against a seeded
perturbation of them (left out when ../shared/data/conll2003/dev.txt is
absent). The test makes the same cases with this module and checks their
digest first. Standard library only, but seqeval in `main`.
"""

import hashlib
import json
import os
import random
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
OUT = os.path.join(HERE, "seqeval_expectations.json")
DEV = os.path.join(
    os.path.dirname(os.path.dirname(os.path.dirname(HERE))), "shared", "data",
    "conll2003", "dev.txt")
DEV_TAGS = ("O", "B-LOC", "I-LOC", "B-MISC", "I-MISC", "B-ORG", "I-ORG",
            "B-PER", "I-PER")
RANDOM_TAGS = ("O", "O", "O", "B-PER", "I-PER", "B-LOC", "I-LOC", "B-ORG",
               "I-ORG", "B-MISC-X", "I-MISC-X")  # a type holding a hyphen
RANDOM_SEEDS = tuple(range(12))
DEV_SEED = 57


def random_case(seed):
  """(gold, predicted) sentences: random tags (malformed IOB2 included: an
  I- after O or after another type), predicted either a perturbed copy of
  gold or independent."""
  rng = random.Random(seed)
  gold, predicted = [], []
  for _ in range(rng.randint(1, 40)):
    truth = [rng.choice(RANDOM_TAGS) for _ in range(rng.randint(0, 16))]
    if seed % 3 == 2:
      guess = [rng.choice(RANDOM_TAGS) for _ in truth]
    else:
      guess = [
          t if rng.random() > 0.3 else rng.choice(RANDOM_TAGS) for t in truth
      ]
    gold.append(truth)
    predicted.append(guess)
  return gold, predicted


# By hand: nothing predicted (precision 0/0), nothing true (recall 0/0),
# a type only predicted, entities that touch.
HAND_CASES = {
    "nothing_predicted": ([["B-PER", "I-PER", "O"],
                           ["B-LOC"]], [["O", "O", "O"], ["O"]]),
    "nothing_true": ([["O", "O"], ["O"]], [["B-PER", "O"], ["I-LOC"]]),
    "only_predicted_type": ([["B-PER", "O", "O"]], [["B-PER", "O", "B-ORG"]]),
    "adjacent": ([["B-PER", "B-PER", "I-PER", "I-LOC",
                   "I-LOC"]], [["B-PER", "I-PER", "I-PER", "B-LOC", "I-LOC"]]),
}


def read_conll_tags(path):
  """The tag sequences (last column) of a CoNLL file's sentences."""
  sentences, tags = [], []
  with open(path, encoding="utf-8") as f:
    for line in f:
      fields = line.split()
      if not fields or fields[0] == "-DOCSTART-":
        if tags:
          sentences.append(tags)
        tags = []
      else:
        tags.append(fields[-1])
  if tags:
    sentences.append(tags)
  return sentences


def perturbed(gold, seed, rate=0.08):
  """`gold` with each tag replaced, at `rate`, by one of DEV_TAGS."""
  rng = random.Random(seed)
  return [[t if rng.random() >= rate else rng.choice(DEV_TAGS)
           for t in s]
          for s in gold]


def cases(dev=DEV):
  """{name: (gold, predicted)}: the random cases, by hand, and the dev set's
  when `dev` exists."""
  out = {f"random_{seed}": random_case(seed) for seed in RANDOM_SEEDS}
  out.update(HAND_CASES)
  if os.path.exists(dev):
    gold = read_conll_tags(dev)
    out["dev_perturbed"] = (gold, perturbed(gold, DEV_SEED))
  return out


def digest(value):
  """A short digest of a JSON value (the sequences, the entities)."""
  return hashlib.sha256(json.dumps(value).encode()).hexdigest()[:16]


def flat_entities(sentences, entities_of):
  """[[type, start, end]] of `sentences` as seqeval numbers them: positions
  in the sentences joined with one O after each, `end` inclusive;
  `entities_of(tags)` gives a sentence's (type, start, end exclusive)."""
  out, offset = [], 0
  for tags in sentences:
    out += [[kind, offset + start, offset + end - 1]
            for kind, start, end in entities_of(tags)]
    offset += len(tags) + 1
  return out


def seqeval_scores(gold, predicted):
  """seqeval's default-mode scores, its classification report and a digest
  of the entities it reads from gold and from predicted."""
  # pylint: disable-next=g-import-not-at-top
  from seqeval.metrics import sequence_labeling as seqeval
  report = seqeval.classification_report(
      gold, predicted, output_dict=True, zero_division=0)
  entities = [
      [list(e) for e in seqeval.get_entities(s)] for s in (gold, predicted)
  ]
  return dict(
      precision=float(seqeval.precision_score(gold, predicted)),
      recall=float(seqeval.recall_score(gold, predicted)),
      f1=float(seqeval.f1_score(gold, predicted)),
      accuracy=float(seqeval.accuracy_score(gold, predicted)),
      entities_digest=digest(entities),
      report={
          name: {
              k: int(v) if k == "support" else float(v) for k, v in row.items()
          } for name, row in report.items()
      })


def main():
  import seqeval  # pylint: disable=g-import-not-at-top
  import warnings  # pylint: disable=g-import-not-at-top
  warnings.simplefilter("ignore")  # seqeval's zero-division warnings
  out = dict(
      seqeval_version=getattr(seqeval, "__version__", None) or
      _version("seqeval"),
      python=sys.version.split()[0],
      cases={})
  for name, (gold, predicted) in cases().items():
    out["cases"][name] = dict(
        digest=digest([gold, predicted]), **seqeval_scores(gold, predicted))
  with open(OUT, "w") as f:
    json.dump(out, f, indent=1, sort_keys=True)
    f.write("\n")
  print(f"wrote {OUT}: {', '.join(out['cases'])}")


def _version(package):
  from importlib import metadata  # pylint: disable=g-import-not-at-top
  return metadata.version(package)


if __name__ == "__main__":
  main()
