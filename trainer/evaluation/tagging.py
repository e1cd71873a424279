"""Token tagging metrics (pure Python): entity-level precision, recall and F1
over exact spans, per entity type, and token accuracy.

Entities are read from IOB tag names by conlleval's chunking rules, which
are `seqeval`'s default mode (not its strict mode): an entity opens at
`B-X`, and at an `I-X` that does not continue an entity of type X (at a
sentence's start, after `O`, after another type); it runs over the `I-X`
that follow. A predicted entity is correct when its type, start and end
are a gold entity's. Precision is correct / predicted, recall correct /
gold, F1 their harmonic mean (each 0 when undefined, as seqeval's default);
micro-averaged over all entities, and per type. Token accuracy counts every
tag, `O` included.

Scores come from sums: `count` gives a batch's, `merge` adds batches (or
hosts), `report` scores them once at the end, so an eval streamed batch by
batch scores exactly as the whole set at once. `tagging_metrics` is the
three in one call.
"""

from trainer.data import tag_sets


def _parts(name):
  """(prefix, type) of a tag name (str or bytes); ValueError if not IOB."""
  if isinstance(name, bytes):
    name = name.decode("utf-8")
  parts = tag_sets.split_tag(name)
  if parts is None:
    raise ValueError(f"tag {name!r} is not IOB (O, B-TYPE or I-TYPE)")
  return parts


def entities(tags):
  """The entities of one sentence's tags, by conlleval's chunking.

  Args:
    tags: the sentence's tag names (IOB: O, B-X, I-X), str or bytes.

  Returns:
    [(type, start, end)]: word positions, `end` exclusive, in order.
  """
  out, kind, start = [], None, 0
  for i, name in enumerate(tags):
    prefix, tag_type = _parts(name)
    if kind is not None and (prefix != "I" or tag_type != kind):
      out.append((kind, start, i))
      kind = None
    if prefix != "O" and kind is None:
      kind, start = tag_type, i
  if kind is not None:
    out.append((kind, start, len(tags)))
  return out


def count(gold, predicted):
  """The sums behind the scores of a batch of sentences.

  Args:
    gold: sentences, each a sequence of tag names.
    predicted: the same sentences' predicted tag names, as many per
      sentence.

  Returns:
    {"sentences": int, "tokens": int, "correct_tokens": int, "per_type":
     {type: {"gold": int, "predicted": int, "correct": int}}}: JSON values
    that `merge` adds up.
  """
  if len(gold) != len(predicted):
    raise ValueError(f"{len(gold)} gold sentences but {len(predicted)} "
                     "predicted")
  tokens = correct = 0
  per_type = {}
  for i, (truth, guess) in enumerate(zip(gold, predicted)):
    if len(truth) != len(guess):
      raise ValueError(f"sentence {i} has {len(truth)} gold tags but "
                       f"{len(guess)} predicted")
    tokens += len(truth)
    correct += sum(_parts(a) == _parts(b) for a, b in zip(truth, guess))
    true_entities, guessed = set(entities(truth)), set(entities(guess))
    for key, found in (("gold", true_entities), ("predicted", guessed),
                       ("correct", true_entities & guessed)):
      for kind, _, _ in found:
        sums = per_type.setdefault(kind, dict(gold=0, predicted=0, correct=0))
        sums[key] += 1
  return dict(
      sentences=len(gold),
      tokens=tokens,
      correct_tokens=correct,
      per_type=per_type)


def merge(*counts):
  """The sums of several `count`s (batches, hosts) as one."""
  out = dict(sentences=0, tokens=0, correct_tokens=0, per_type={})
  for part in counts:
    for key in ("sentences", "tokens", "correct_tokens"):
      out[key] += part[key]
    for kind, sums in part["per_type"].items():
      into = out["per_type"].setdefault(kind,
                                        dict(gold=0, predicted=0, correct=0))
      for key, n in sums.items():
        into[key] += n
  return out


def _scores(correct, predicted, gold):
  """(precision, recall, f1), each 0.0 when its denominator is 0; in
  seqeval's order of operations, so equal to its floats."""
  precision = correct / predicted if predicted else 0.0
  recall = correct / gold if gold else 0.0
  f1 = (2 * precision * recall / (precision + recall) if precision +
        recall else 0.0)
  return precision, recall, f1


def report(counts):
  """The scores of summed `counts`, keyed as the eval report prints them.

  Returns:
    {"precision", "recall", "f1": float (entities, micro-averaged),
     "accuracy": float (tokens), "entities", "predicted_entities",
     "correct_entities", "tokens", "sentences": int,
     "per_type": {type: {"precision", "recall", "f1": float, "support":
     int (gold entities)}}}, types sorted; a type only predicted has
    support 0.
  """
  per_type, totals = {}, dict(gold=0, predicted=0, correct=0)
  for kind in sorted(counts["per_type"]):
    sums = counts["per_type"][kind]
    precision, recall, f1 = _scores(sums["correct"], sums["predicted"],
                                    sums["gold"])
    per_type[kind] = dict(
        precision=precision, recall=recall, f1=f1, support=sums["gold"])
    for key in totals:
      totals[key] += sums[key]
  precision, recall, f1 = _scores(totals["correct"], totals["predicted"],
                                  totals["gold"])
  tokens = counts["tokens"]
  return dict(
      precision=precision,
      recall=recall,
      f1=f1,
      accuracy=counts["correct_tokens"] / tokens if tokens else 0.0,
      entities=totals["gold"],
      predicted_entities=totals["predicted"],
      correct_entities=totals["correct"],
      tokens=tokens,
      sentences=counts["sentences"],
      per_type=per_type)


def tagging_metrics(gold, predicted):
  """`report(count(gold, predicted))`: the scores of sentences' predicted
  tags against their gold tags (each a list of tag-name lists)."""
  return report(count(gold, predicted))
