"""The Python kinds of Config fields, checked before anything reads them:
a caller of the Python API can pass any object, where the command line's
absl flags always give the annotated kind."""

import dataclasses
import typing

from trainer.foundation import errors

# The kinds a field may hold: exactly Python's (a numpy scalar would fail
# later, when config.json is written), an int where a float belongs.
_KINDS = {
    int: ("a whole number", lambda v: type(v) is int),
    float: ("a number", lambda v: type(v) in (int, float)),
    str: ("a string", lambda v: isinstance(v, str)),
    bool: ("True or False", lambda v: type(v) is bool),
    type(None): ("None", lambda v: v is None),
}


def _kind_error(kind, value):
  """What is wrong with `value` for a field annotated `kind` (int, float,
  str, bool or a union of them), or None. A Python API caller can pass any
  object; the command line's absl flags always give the annotated kind."""
  kinds = typing.get_args(kind) or (kind,)
  if any(_KINDS[k][1](value) for k in kinds):
    return None
  wanted = " or ".join(_KINDS[k][0] for k in kinds)
  return f"must be {wanted}, not {type(value).__name__}"


def check_kinds(c):
  """Raises ConfigError for the first field of `c` of the wrong kind
  (before anything reads the fields: `complete`, `checks.validate`)."""
  for f in dataclasses.fields(c):
    value = getattr(c, f.name)
    wrong = _kind_error(f.type, value)
    if wrong:
      raise errors.ConfigError(f"--{f.name}={value!r} is invalid: {wrong}")
