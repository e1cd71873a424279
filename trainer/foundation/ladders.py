"""A ladder: a few ascending sizes a batch is fitted to, the smallest that
holds it. Length buckets (`buckets`, sizes in tokens) and shared rows
(`shared_rows`, sizes in rows) are both ladders; this module holds what they
share: the flag grammar (`parse`) and the choice of a ladder from measured
sizes (`cheapest`). No TensorFlow.
"""

import re

from trainer.foundation import errors

AUTO, NONE = "auto", "none"


def parse(flag, spec, most, least, unit):
  """A ladder flag's value -> AUTO, NONE, or a tuple of ascending ints.

  Args:
    flag: the flag's name, for errors ("--seq_buckets").
    spec: its value.
    most: at most this many sizes.
    least: each at least this (with its reason), e.g. (3, "each at least 3
      (room for [CLS], a token and [SEP])").
    unit: what a size is, plural ("lengths", "row counts"), and an example
      ("16,32,64").

  Raises:
    ConfigError: not `auto`, `none` or up to `most` ascending sizes of at
      least `least`.
  """
  spec = str(spec).strip().lower()
  if spec in (AUTO, NONE):
    return spec
  name, example = unit
  if not re.fullmatch(r"\d+(\s*,\s*\d+)*", spec):
    raise errors.ConfigError(
        f"{flag}={spec!r} is invalid: give auto, none or ascending {name}, "
        f"e.g. {example}")
  sizes = [int(x) for x in spec.split(",")]
  if len(sizes) > most:
    shown = spec if len(spec) <= 60 else spec[:57] + "..."
    raise errors.ConfigError(
        f"{flag}={shown!r} is invalid: {len(sizes)} {name}; give at most "
        f"{most} (each is a program compiled and a batch shape kept apart)")
  minimum, why = least
  if sizes != sorted(set(sizes)) or sizes[0] < minimum:
    raise errors.ConfigError(
        f"{flag}={spec!r} is invalid: the {name} must ascend, {why}")
  return tuple(sizes)


def cheapest(edges, counts, most, allowed=None):
  """The ladder over `edges` that costs least: a dynamic program over the
  ways to cut them.

  A ladder is some of `edges` (ascending), always ending at the last one;
  an item of size s runs at the smallest rung >= s, so each rung costs its
  size times the items between the rung below it and itself. `counts[j]`
  is the items of sizes in (edges[j - 1], edges[j]].

  Args:
    edges: ascending ints: the sizes a rung may take.
    counts: ints, one per edge.
    most: at most this many rungs (the last edge included).
    allowed: (items of a rung, whether it is the first rung, whether it is
      the last edge) -> whether the rung may be; default every rung.

  Returns:
    (cost, ladder) of the least cost (ties: the ladder first in tuple
    order), or None when no ladder is allowed.
  """
  allowed = allowed or (lambda n, first, last: True)
  below = [0]
  for n in counts:
    below.append(below[-1] + int(n))
  end = len(edges) - 1
  # best[k][j]: (cost, ladder) of the cheapest k rungs ending at edges[j].
  best = [{} for _ in range(most + 1)]
  for j, edge in enumerate(edges):
    n = below[j + 1]
    if allowed(n, True, j == end):
      best[1][j] = (n * int(edge), (int(edge),))
  for k in range(2, most + 1):
    for j, edge in enumerate(edges):
      options = []
      for i, (cost, ladder) in best[k - 1].items():
        n = below[j + 1] - below[i + 1]
        if i < j and allowed(n, False, j == end):
          options.append((cost + n * int(edge), ladder + (int(edge),)))
      if options:
        best[k][j] = min(options)
  found = [level[end] for level in best if end in level]
  return min(found) if found else None
