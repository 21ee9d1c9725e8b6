"""Every name of the package that a notebook uses exists where the notebook looks for it.

Modules move (the run's machinery left train.py for run.py, translate and evaluate left decode.py
for translation.py, greedy decoding with a cache left kv_cache.py): a notebook that still imports a
name from its old home fails only when someone runs it. This test reads the code cells of notebooks/ and learner/ without running them and checks
each ``from transformer_lessons.X import name``, and each ``alias.name`` where ``alias`` is a
module of the package (``import transformer_lessons.train as training``, ``from
transformer_lessons import decode``).
"""

from __future__ import annotations

import ast
import importlib
import types
from pathlib import Path

import nbformat
import pytest

ROOT = Path(__file__).resolve().parents[1]
NOTEBOOKS = sorted((ROOT / "notebooks").glob("[0-9][0-9]_*.ipynb")) + sorted(
    (ROOT / "learner").glob("[0-9][0-9]_*.ipynb")
)
PACKAGE = "transformer_lessons"


def _python(source: str) -> str:
    """A code cell as Python: IPython's magics and shell lines (``%matplotlib``, ``!pip``) become blank lines."""
    return "\n".join("" if line.lstrip().startswith(("%", "!")) else line for line in source.split("\n"))


def _module(name: str) -> types.ModuleType | None:
    try:
        return importlib.import_module(name)
    except ImportError:
        return None


def missing_names(source: str) -> list[str]:
    """The package names that ``source`` (Python) uses and that do not exist, as ``module.name``."""
    tree = ast.parse(source)
    modules: dict[str, types.ModuleType] = {}  # local alias -> a module of the package
    missing = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.split(".")[0] != PACKAGE:
                    continue
                module = _module(alias.name)
                if module is None:
                    missing.append(alias.name)
                elif alias.asname:
                    modules[alias.asname] = module
        elif isinstance(node, ast.ImportFrom) and node.module and node.module.split(".")[0] == PACKAGE:
            module = _module(node.module)
            if module is None:
                missing.append(node.module)
                continue
            for alias in node.names:
                found = getattr(module, alias.name, None) or _module(f"{node.module}.{alias.name}")
                if found is None:
                    missing.append(f"{node.module}.{alias.name}")
                elif isinstance(found, types.ModuleType):
                    modules[alias.asname or alias.name] = found
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id in modules:
            module = modules[node.value.id]
            if not hasattr(module, node.attr) and _module(f"{module.__name__}.{node.attr}") is None:
                missing.append(f"{module.__name__}.{node.attr}")
    return missing


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: f"{p.parent.name}/{p.name}")
def test_every_package_name_a_notebook_uses_exists(path):
    nb = nbformat.read(path, as_version=4)
    source = "\n".join(_python(cell.source) for cell in nb.cells if cell.cell_type == "code")
    assert not missing_names(source), f"{path.name} uses names the package no longer has where it looks"


def test_the_rule_finds_names_that_moved():
    assert missing_names("from transformer_lessons.train import train, train_step") == [
        "transformer_lessons.train.train"
    ]
    assert missing_names("import transformer_lessons.train as training\ntraining.noam_rate(1, 2, 3)") == [
        "transformer_lessons.train.noam_rate"
    ]
    assert missing_names("from transformer_lessons import decode\ndecode.greedy_decode\ndecode.translate") == [
        "transformer_lessons.decode.translate"
    ]
    assert missing_names("from transformer_lessons import translation\ntranslation.translate") == []
    assert missing_names("from transformer_lessons.kv_cache import greedy_decode_cached") == [
        "transformer_lessons.kv_cache.greedy_decode_cached"
    ]
    assert (
        missing_names(
            "from transformer_lessons.run import train\nfrom transformer_lessons import viz\nviz.plot_attention"
        )
        == []
    )
