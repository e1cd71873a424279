r"""The house by concept: each group of trainer/, its modules and their size.

    python benchmarks/house_report.py

Prints, per group (foundation, runtime, data, evaluation, encoders, model,
serving, training, commands, the face), each module's lines, what it owns
(the first line of its docstring), and the places to look at: a module
over 400 lines or a function over 50 may own more than one thing. A
report, not a gate (tests/layout_test.py holds the ceilings).
"""

import ast
import os

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PACKAGE = os.path.join(ROOT, "trainer")
GROUPS = ("foundation", "runtime", "data", "evaluation", "encoders", "model",
          "serving", "training", "commands", "")


def modules():
  """[(group, module, path)] under trainer/."""
  out = []
  for folder, _, names in os.walk(PACKAGE):
    rel = os.path.relpath(folder, PACKAGE)
    group = "" if rel == "." else rel
    out += [(group, n[:-3], os.path.join(folder, n))
            for n in sorted(names)
            if n.endswith(".py") and n != "__init__.py" or
            (n == "__init__.py" and not group)]
  return sorted(out, key=lambda m: (GROUPS.index(m[0]), m[1]))


def describe(path):
  with open(path) as f:
    source = f.read()
  tree = ast.parse(source)
  doc = (ast.get_docstring(tree) or "").strip().splitlines()
  long = [(node.name, node.end_lineno - node.lineno + 1)
          for node in ast.walk(tree)
          if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and
          node.end_lineno - node.lineno + 1 > 50]
  return source.count("\n"), doc[0] if doc else "", long


def main():
  print("| group | module | lines | owns | look at |")
  print("| --- | --- | --- | --- | --- |")
  totals = {}
  for group, name, path in modules():
    lines, owns, long = describe(path)
    totals[group] = totals.get(group, 0) + lines
    look = ", ".join(f"{f} ({n} lines)" for f, n in long)
    if lines > 400:
      look = f"module of {lines} lines" + (f"; {look}" if look else "")
    print(f"| {group or 'face'} | {name} | {lines} | {owns} | {look} |")
  print("\n| group | lines |\n| --- | --- |")
  for group in GROUPS:
    if group in totals:
      print(f"| {group or 'face'} | {totals[group]} |")


if __name__ == "__main__":
  main()
