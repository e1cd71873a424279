"""The docs name files that exist.

Every `trainer/...py` path named in README.md, BUILD_NOTES.md,
benchmarks/RESULTS.md and docs/*.md is a file of the project, and every
relative markdown link `[text](path)` in them points at an existing file or
folder. Paths are relative to the project root, links to the document's own
folder (as GitHub renders them). Pure text: no TensorFlow, no trainer import.
"""

import glob
import os
import re

import pytest

# The project root, as tests/conftest.py computes it (the parent of tests/).
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

DOCS = sorted(["README.md", "BUILD_NOTES.md", "benchmarks/RESULTS.md"] + [
    os.path.relpath(p, ROOT).replace(os.sep, "/")
    for p in glob.glob(os.path.join(ROOT, "docs", "*.md"))
])

# A `trainer/...py` path: not the tail of a longer name (`my_trainer/x.py`).
TRAINER_PATH = re.compile(r"(?<![\w.-])trainer/[\w/]+\.py")

# `trainer/commands/X.py`: a one-capital-letter stem stands for any module of
# the folder (`python -m trainer.X` runs `trainer/commands/X.py`); the folder
# must then hold modules.
PLACEHOLDER = re.compile(r"^[A-Z]$")

# An inline link or image, `[text](target "title")`; the target may be in <>.
LINK = re.compile(r"\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")
FENCE = re.compile(r"^(```|~~~).*?^\1", re.M | re.S)
INLINE_CODE = re.compile(r"`[^`\n]*`")
EXTERNAL = re.compile(r"^([a-z][a-z0-9+.-]*:|//|#)", re.I)


def _read(doc):
  with open(os.path.join(ROOT, doc), encoding="utf-8") as f:
    return f.read()


def _line_of(text, index):
  return text.count("\n", 0, index) + 1


def _exists(path):
  folder, name = os.path.split(path)
  stem = name[:-len(".py")]
  if PLACEHOLDER.match(stem):
    return bool(glob.glob(os.path.join(ROOT, folder, "*.py")))
  return os.path.isfile(os.path.join(ROOT, path))


def missing_trainer_paths(text):
  """[(line, path)] of the `trainer/...py` paths in `text` that do not exist
  (the known-ahead names aside)."""
  return [(_line_of(text, m.start()), m.group())
          for m in TRAINER_PATH.finditer(text)
          if not _exists(m.group())]


def _blank(match):
  """The match replaced by spaces, newlines kept (line numbers stay)."""
  return re.sub(r"[^\n]", " ", match.group())


def broken_links(text, folder):
  """[(line, target)] of the relative links in `text` (code aside) whose
  target does not exist under `folder`."""
  prose = INLINE_CODE.sub(_blank, FENCE.sub(_blank, text))
  out = []
  for m in LINK.finditer(prose):
    target = m.group(1)
    if EXTERNAL.match(target):
      continue
    path = re.split(r"[#?]", target, maxsplit=1)[0]
    if not os.path.exists(os.path.normpath(os.path.join(folder, path))):
      out.append((_line_of(prose, m.start()), target))
  return out


def _report(doc, problems):
  return "\n".join(f"{doc}:{line}: {what}" for line, what in problems)


@pytest.mark.parametrize("doc", DOCS)
def test_named_trainer_paths_exist(doc):
  missing = missing_trainer_paths(_read(doc))
  assert not missing, ("these trainer paths do not exist:\n" +
                       _report(doc, missing))


@pytest.mark.parametrize("doc", DOCS)
def test_relative_links_point_at_files(doc):
  folder = os.path.dirname(os.path.join(ROOT, doc))
  broken = broken_links(_read(doc), folder)
  assert not broken, "these links point nowhere:\n" + _report(doc, broken)


def test_the_checks_find_what_they_should():
  text = ("see trainer/runtime/stack.py, `trainer/nowhere/gone.py`,\n"
          "trainer/commands/X.py, trainer/training/finish.py and "
          "my_trainer/x.py\n"
          "[ok](README.md) [gone](no/such.md#part) [web](https://x.org/a.md)"
          " [here](#anchor) `[code](not/checked.md)`\n"
          "```\n[fenced](not/checked.md)\n```\n")
  assert missing_trainer_paths(text) == [(1, "trainer/nowhere/gone.py")]
  assert broken_links(text, ROOT) == [(3, "no/such.md#part")]
