"""The house rules of trainer/, read from the source with `ast`.

The package is grouped by concept, each group standing only on the ones
below it: foundation (errors, config, checks, tasks, bucket lengths) <
runtime (the TensorFlow stack, the host, the strategy, logs, the run
folder) < data (files, sources, splits, counts, preprocessing, batches) <
evaluation (metrics, eval pictures) < encoders (handles, the native BERT,
the demo, Hugging Face and Model Garden import) < model (the classifier,
precision, AdamW, checkpoints, the training state) < serving (export,
predict, evaluate, Hugging Face export) < training (the train step, the
trainer object, the controller, actions, set-up, finish, the run) <
commands (flags, each `python -m trainer.X`'s main, the doctor's checks) <
the package's face (`trainer/__init__.py`, the Python API, and the
`trainer/X.py` that keep `python -m trainer.X`).
No import circle; only the commands read flags; every flag is defined in
one place. Sizes are a ceiling far above the usual (the report of what to
look at is `python benchmarks/house_report.py`).
"""

import ast
import os

import pytest

from conftest import ROOT

PACKAGE = os.path.join(ROOT, "trainer")
LAYERS = ("foundation", "runtime", "data", "evaluation", "encoders", "model",
          "serving", "training", "commands", "")


def _modules():
  """Dotted names under trainer/ ("main", "training.train_lib", ...)."""
  out = []
  for folder, _, names in os.walk(PACKAGE):
    rel = os.path.relpath(folder, PACKAGE)
    prefix = "" if rel == "." else rel.replace(os.sep, ".") + "."
    out += [prefix + n[:-3] for n in names if n.endswith(".py")]
  return sorted(out)


MODULES = _modules()
LIBRARY = [m for m in MODULES if m.split(".")[0] in LAYERS[:-2]]


def _layer(module):
  return LAYERS.index(module.split(".")[0] if "." in module else "")


def _path(module):
  return os.path.join(PACKAGE, *module.split(".")) + ".py"


def _source(module):
  with open(_path(module)) as f:
    return f.read()


def _tree(module):
  return ast.parse(_source(module))


def _trainer_imports(node):
  """Dotted names (below trainer.) of the trainer modules a node imports."""
  if isinstance(node, ast.ImportFrom) and (node.module or
                                           "").startswith("trainer"):
    base = node.module.split(".", 1)[1] + "." if "." in node.module else ""
    return [base + alias.name for alias in node.names]
  if isinstance(node, ast.Import):
    return [
        a.name.split(".", 1)[1]
        for a in node.names
        if a.name.startswith("trainer.")
    ]
  return []


def _imports(module, top_level_only=True):
  nodes = _tree(module).body if top_level_only else ast.walk(_tree(module))
  out = set()
  for node in nodes:
    out.update(m for m in _trainer_imports(node) if m in MODULES)
  return out


def test_no_import_circle():
  graph = {m: _imports(m) for m in MODULES}
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


@pytest.mark.parametrize("module", MODULES)
def test_each_group_stands_only_on_the_groups_below(module):
  for dep in _imports(module, top_level_only=False):
    assert _layer(dep) <= _layer(module), (
        f"trainer/{module}.py ({LAYERS[_layer(module)] or 'top'}) imports "
        f"trainer.{dep} ({LAYERS[_layer(dep)] or 'top'}), a group above it")


def test_errors_is_the_bottom_and_imports_nothing_of_the_trainer():
  assert _imports("foundation.errors") == set()
  assert _imports("runtime.stack") == set()  # runs as a script too


@pytest.mark.parametrize("module", LIBRARY)
def test_library_modules_read_no_flags(module):
  """Flags become values in the commands; the library takes values."""
  source = _source(module)
  assert "commands.cli" not in " ".join(_imports(module, False)), module
  assert "FLAGS" not in source and "absl import flags" not in source, module


def test_every_flag_is_defined_in_one_place():
  """Only the commands' cli defines flags (from Config's fields and its
  own table); each command defines each of its flags once."""
  from absl import flags  # pylint: disable=g-import-not-at-top
  import importlib  # pylint: disable=g-import-not-at-top
  for module in MODULES:
    if module != "commands.cli":
      assert "DEFINE_" not in _source(module), module
  for name in ("main", "export", "predict", "evaluate", "doctor", "convert_hf"):
    command = importlib.import_module(f"trainer.commands.{name}").COMMAND
    command.define(flags.FlagValues())  # a flag defined twice would raise


@pytest.mark.parametrize("module", MODULES)
def test_module_and_function_sizes(module):
  lines = _source(module).count("\n")
  assert lines <= 500, f"trainer/{module}.py has {lines} lines"
  for node in ast.walk(_tree(module)):
    if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
      length = node.end_lineno - node.lineno + 1
      assert length <= 80, (f"trainer/{module}.py: {node.name} has {length} "
                            "lines")


@pytest.mark.parametrize("module", LIBRARY)
def test_library_imports_are_at_the_top(module):
  """Function-level imports of trainer modules only where they keep
  start-up light: the commands (so --help loads no TensorFlow) and the
  package's lazy API."""
  for node in ast.walk(_tree(module)):
    if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
      for inner in ast.walk(node):
        names = [n for n in _trainer_imports(inner) if n in MODULES]
        assert not names, (f"trainer/{module}.py imports {names} inside "
                           f"{node.name}")


def test_no_test_file_imports_another():
  """Shared test helpers live in tests/testing.py (fixtures in conftest.py):
  no tests/*.py imports a `*_test` module, at the top or in a function."""
  folder = os.path.join(ROOT, "tests")
  found = []
  for name in sorted(os.listdir(folder)):
    if not name.endswith(".py"):
      continue
    with open(os.path.join(folder, name)) as f:
      tree = ast.parse(f.read())
    for node in ast.walk(tree):
      if isinstance(node, ast.Import):
        modules = [a.name for a in node.names]
      elif isinstance(node, ast.ImportFrom) and not node.level:
        modules = [node.module or ""]
      else:
        continue
      found += [
          f"tests/{name}:{node.lineno} imports {m}" for m in modules
          if m.split(".")[0].endswith("_test")
      ]
  assert not found, found
