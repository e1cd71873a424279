"""The tag set of a tagging run: its names and scheme, and the scheme's rules.

Tags name entities in IOB: `O` outside any entity, `B-TYPE` opening one,
`I-TYPE` continuing it. Two dialects are read:

- IOB2 (Hugging Face's and TFDS's exports, the shared CoNLL files): `B-`
  opens every entity. Kept as is.
- IOB1 (the original CoNLL-2003 files): `I-` opens an entity, and `B-`
  appears only where an entity directly follows one of its own type.
  Converted to IOB2 sentence by sentence as records are read
  (`trainer.data.tagged`). The conversion is conlleval's reading of the
  tags (an `I-X` after `O` or after another type opens an entity), so it
  changes no entity the metric would count; on IOB2 tags it changes nothing.

Anything else (BIOES/IOBES's `S-`/`E-`, BILOU's `U-`/`L-`, bare types) is
refused in one line. Pure Python: no TensorFlow.
"""

import dataclasses

from trainer.foundation import errors

SCHEMES = ("iob2", "iob1")
OUTSIDE = "O"

# Prefixes of the schemes a file may be in by mistake, for the refusal.
_OTHER_SCHEMES = (("SE", "BIOES (S-/E- tags)"), ("UL", "BILOU (U-/L- tags)"))


def split_tag(name):
  """(prefix, type) of an IOB tag name: ("O", "") or ("B", "PER"); None when
  `name` is not one."""
  if name == OUTSIDE:
    return OUTSIDE, ""
  if (len(name) > 2 and name[0] in "BI" and name[1] == "-" and
      not any(c.isspace() for c in name)):
    return name[0], name[2:]
  return None


def tag_problem(name):
  """Why `name` is not an IOB tag (None when it is), for a one-line error."""
  if split_tag(name) is not None:
    return None
  for prefixes, scheme in _OTHER_SCHEMES:
    if name[:1] in prefixes and name[1:2] == "-":
      return (f"tag {name!r} is not IOB: the tags look {scheme}; the trainer "
              "reads IOB2 (B- opens every entity) or IOB1 (converted): "
              "convert the tags to IOB2")
  if not name or any(c.isspace() for c in name):
    return f"tag {name!r} is empty or holds whitespace"
  return (f"tag {name!r} is not IOB (O, B-TYPE or I-TYPE); the trainer reads "
          "IOB2 (B- opens every entity) or IOB1 (converted): convert the "
          "tags to IOB2")


def iob1_to_iob2(tags):
  """The IOB2 tags of one sentence's IOB1 `tags` (names): an `I-X` not
  directly after a tag of type X becomes `B-X`. On IOB2 tags the identity."""
  out, previous = [], ""
  for name in tags:
    prefix, kind = split_tag(name)
    out.append(f"B-{kind}" if prefix == "I" and kind != previous else name)
    previous = kind
  return out


def openings(tags):
  """(entities, opened by I-) of one sentence's tags (names), by conlleval's
  chunking: an entity opens at `B-X`, or at `I-X` not directly after type
  X. An IOB2 sentence has no entity opened by `I-`; an IOB1 one may."""
  entities = by_inside = 0
  previous = ""
  for name in tags:
    prefix, kind = split_tag(name)
    if prefix == "B" or (prefix == "I" and kind != previous):
      entities += 1
      by_inside += prefix == "I"
    previous = kind
  return entities, by_inside


def complete(types):
  """The tag names of entity `types`: O first, then B- and I- of each type
  in sorted order (so the ids are the same whichever file, or order, the
  types were read from, and every B- has its I-)."""
  names = [OUTSIDE]
  for kind in sorted(set(types)):
    names += [f"B-{kind}", f"I-{kind}"]
  return tuple(names)


@dataclasses.dataclass(frozen=True)
class TagSet:
  """The tags a run predicts, and the scheme of its data.

  Attributes:
    names: tuple of str; tag id i is `names[i]`. IOB2 names (`O`, `B-X`,
      `I-X`), unique, `O` among them, every `I-X` with its `B-X`.
    scheme: "iob2", or "iob1": the data's tags are IOB1 and each sentence is
      converted to IOB2 as it is read (`names` are the converted tags').
  """

  names: tuple
  scheme: str = "iob2"

  def __post_init__(self):
    object.__setattr__(self, "names", tuple(self.names))
    problem = names_problem(self.names)
    if problem:
      raise errors.DataError(f"tag set {list(self.names)[:12]}: {problem}")
    if self.scheme not in SCHEMES:
      raise errors.DataError(f"tag scheme {self.scheme!r}: choose one of "
                             f"{', '.join(SCHEMES)}")

  def __len__(self):
    return len(self.names)

  @property
  def types(self):
    """The entity types, sorted: ("LOC", "MISC", ...)."""
    return tuple(sorted({split_tag(n)[1] for n in self.names} - {""}))

  def ids(self, names):
    """Tag ids of tag `names` (KeyError for a name outside the set)."""
    index = {name: i for i, name in enumerate(self.names)}
    return [index[name] for name in names]

  def to_json(self):
    """A JSON value for config.json: {"names": [...], "scheme": ...}."""
    return dict(names=list(self.names), scheme=self.scheme)

  @classmethod
  def from_json(cls, value):
    """The TagSet `to_json` gave."""
    return cls(tuple(value["names"]), value["scheme"])


def names_problem(names):
  """Why `names` cannot be a tag set (None when they can)."""
  for name in names:
    problem = tag_problem(name) if isinstance(
        name, str) else (f"tag {name!r} is not a string")
    if problem:
      return problem
  if len(set(names)) != len(names):
    twice = sorted({n for n in names if names.count(n) > 1})
    return f"tags {twice} are listed twice"
  if OUTSIDE not in names:
    return "it has no O tag (outside any entity)"
  missing = sorted(f"B-{n[2:]}" for n in names
                   if n.startswith("I-") and f"B-{n[2:]}" not in names)
  if missing:
    return f"{missing} missing: every I- tag needs the B- of its type"
  return None


def conversion_tables(tag_set):
  """Per tag id, as lists for a TF lookup: its type's index (-1 for O),
  whether it is an I- tag, and the id of its type's B- tag (itself for O
  and B-): what converting IOB1 ids to IOB2 needs (`tagged`)."""
  types = {kind: i for i, kind in enumerate(tag_set.types)}
  kind_of, inside, begin = [], [], []
  for i, name in enumerate(tag_set.names):
    prefix, kind = split_tag(name)
    kind_of.append(types.get(kind, -1))
    inside.append(prefix == "I")
    begin.append(tag_set.names.index(f"B-{kind}") if prefix == "I" else i)
  return kind_of, inside, begin
