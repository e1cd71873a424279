"""The house rules of trainer/, read from the source with `ast`.

Each module owns one thing and imports only below itself: no import circle,
no module over 450 lines, no function over 60, and no function-level import
of a trainer module except the two that keep start-up light (main.py's, so
`--help` does not load TensorFlow; the package's lazy API).
"""

import ast
import os

import pytest

from conftest import ROOT

PACKAGE = os.path.join(ROOT, "trainer")


def _modules():
  """Dotted names under trainer/ ("main", "loop.train_lib", ...)."""
  out = []
  for folder, _, names in os.walk(PACKAGE):
    rel = os.path.relpath(folder, PACKAGE)
    prefix = "" if rel == "." else rel.replace(os.sep, ".") + "."
    out += [prefix + n[:-3] for n in names if n.endswith(".py")]
  return sorted(out)


MODULES = _modules()
# (module, imported module): deliberate, each with a comment saying why.
DELIBERATE_LATE_IMPORTS = {("main", "loop.train_lib"),
                           ("__init__", "base.config"),
                           ("__init__", "loop.train_lib")}


def _path(module):
  return os.path.join(PACKAGE, *module.split(".")) + ".py"


def _tree(module):
  with open(_path(module)) as f:
    return ast.parse(f.read())


def _trainer_imports(node):
  """Dotted names (below trainer.) of the trainer modules a node imports."""
  if isinstance(node, ast.ImportFrom) and (node.module or "").startswith(
      "trainer"):
    base = node.module.split(".", 1)[1] + "." if "." in node.module else ""
    return [base + alias.name for alias in node.names]
  if isinstance(node, ast.Import):
    return [
        a.name.split(".", 1)[1]
        for a in node.names
        if a.name.startswith("trainer.")
    ]
  return []


def _top_level_imports(module):
  out = set()
  for node in _tree(module).body:
    out.update(m for m in _trainer_imports(node) if m in MODULES)
  return out


def test_no_import_circle():
  graph = {m: _top_level_imports(m) for m in MODULES}
  state = {}

  def visit(m, path):
    if state.get(m) == "done":
      return
    assert state.get(m) != "active", " -> ".join(path + [m])
    state[m] = "active"
    for dep in sorted(graph[m]):
      visit(dep, path + [m])
    state[m] = "done"

  for m in MODULES:
    visit(m, [])


def test_errors_is_the_bottom_and_imports_nothing_of_the_trainer():
  assert _top_level_imports("base.errors") == set()
  assert _top_level_imports("base.stack") == set()  # runs as a script too


@pytest.mark.parametrize("module", MODULES)
def test_module_and_function_sizes(module):
  with open(_path(module)) as f:
    lines = f.read().count("\n")
  assert lines <= 450, f"trainer/{module}.py has {lines} lines"
  for node in ast.walk(_tree(module)):
    if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
      length = node.end_lineno - node.lineno + 1
      assert length <= 60, (f"trainer/{module}.py: {node.name} has {length} "
                            "lines")


@pytest.mark.parametrize("module", MODULES)
def test_function_level_imports_are_the_deliberate_ones(module):
  for node in ast.walk(_tree(module)):
    if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
      for inner in ast.walk(node):
        for name in _trainer_imports(inner):
          if name not in MODULES:
            continue
          assert (module, name) in DELIBERATE_LATE_IMPORTS, (
              f"trainer/{module}.py imports trainer.{name} inside "
              f"{node.name}")
