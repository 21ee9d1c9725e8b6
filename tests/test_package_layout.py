"""The package stays readable: no module over 500 lines, no function over 80, no import cycle.

A newcomer should find each concept in the file named after it and read any
function without scrolling. These limits are checked on the source, so a change
that breaks them fails here with the name of the module or function to split.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[1] / "transformer_lessons"
MAX_MODULE_LINES = 500
MAX_FUNCTION_LINES = 80


def _modules() -> dict[str, Path]:
    """``{dotted name: path}`` for every module of the package (a package's is its ``__init__``)."""
    out = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        parts = list(path.relative_to(PACKAGE.parent).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        out[".".join(parts)] = path
    return out


MODULES = _modules()


def _functions(tree: ast.AST):
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            yield node


def _is_type_checking_block(node: ast.AST) -> bool:
    return isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test)


def _imports(name: str, path: Path, type_checking: bool = False) -> set[str]:
    """The package's modules that ``name`` imports, at the top or inside functions (under TYPE_CHECKING too if asked)."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    skip = (
        set()
        if type_checking
        else {id(n) for block in ast.walk(tree) if _is_type_checking_block(block) for n in ast.walk(block)}
    )
    found = set()
    for node in ast.walk(tree):
        if id(node) in skip:
            continue
        if isinstance(node, ast.Import):
            targets = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:  # relative: resolve against this module's package
                base = name.split(".") if path.name == "__init__.py" else name.split(".")[:-1]
                base = base[: len(base) - (node.level - 1)]
                module = ".".join(base + ([node.module] if node.module else []))
            else:
                module = node.module or ""
            targets = [
                f"{module}.{alias.name}" if f"{module}.{alias.name}" in MODULES else module for alias in node.names
            ]
        else:
            continue
        found.update(t for t in targets if t in MODULES and t != name)
    return found


def test_layout_is_found():
    assert "transformer_lessons.train" in MODULES and "transformer_lessons.decode" in MODULES


@pytest.mark.parametrize("name", sorted(MODULES))
def test_module_is_short(name):
    lines = MODULES[name].read_text(encoding="utf-8").count("\n")
    assert lines <= MAX_MODULE_LINES, f"{name} has {lines} lines (limit {MAX_MODULE_LINES}): split it by concept"


@pytest.mark.parametrize("name", sorted(MODULES))
def test_functions_fit_on_a_screen(name):
    tree = ast.parse(MODULES[name].read_text(encoding="utf-8"))
    long = [
        f"{f.name} (line {f.lineno}, {f.end_lineno - f.lineno + 1} lines)"
        for f in _functions(tree)
        if f.end_lineno - f.lineno + 1 > MAX_FUNCTION_LINES
    ]
    assert not long, f"{name}: functions over {MAX_FUNCTION_LINES} lines: {long}"


def _cycle(type_checking: bool = False) -> list[str] | None:
    graph = {name: _imports(name, path, type_checking) for name, path in MODULES.items()}
    state: dict[str, int] = {}  # 1: on the current path, 2: done
    stack: list[str] = []

    def visit(node: str) -> list[str] | None:
        state[node] = 1
        stack.append(node)
        for nxt in sorted(graph[node]):
            if state.get(nxt) == 1:
                return stack[stack.index(nxt) :] + [nxt]
            if nxt not in state and (found := visit(nxt)):
                return found
        stack.pop()
        state[node] = 2
        return None

    for node in sorted(graph):
        if node not in state and (found := visit(node)):
            return found
    return None


def test_no_import_cycle():
    cycle = _cycle()
    assert cycle is None, "import cycle: " + " -> ".join(cycle)


def test_no_two_concepts_depend_on_each_other():
    # An import under TYPE_CHECKING does not run, but it still says that one module needs the other: a cycle
    # through one (the key/value cache naming the model that imports it) is two concepts that lean on each other.
    cycle = _cycle(type_checking=True)
    assert cycle is None, "modules that depend on each other (counting TYPE_CHECKING imports): " + " -> ".join(cycle)


def test_the_key_value_cache_knows_nothing_of_the_model():
    imported = _imports("transformer_lessons.kv_cache", MODULES["transformer_lessons.kv_cache"], type_checking=True)
    assert not imported & {"transformer_lessons.model", "transformer_lessons.decode", "transformer_lessons.beam"}


def test_decoding_imports_nothing_from_training():
    assert "transformer_lessons.train" not in _imports(
        "transformer_lessons.decode", MODULES["transformer_lessons.decode"]
    )
