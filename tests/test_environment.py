"""The two install routes (pip via pyproject.toml, conda via environment.yml) agree,
CI runs the README's command, and importing the package stays cheap."""

from __future__ import annotations

import importlib.metadata
import json
import re
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
HEAVY = ("matplotlib", "seaborn", "ipywidgets", "spacy")
CORE_MODULES = ("config", "masks", "attention", "layers", "model")


def _split_requirement(line: str) -> tuple[str, str]:
    """'Torch_X==2.1' -> ('torch-x', '==2.1'): PEP 503 name, then the version spec."""
    match = re.fullmatch(r"\s*([A-Za-z0-9][A-Za-z0-9._-]*)\s*(.*?)\s*", line)
    assert match, f"cannot read requirement {line!r}"
    name = re.sub(r"[-_.]+", "-", match.group(1)).lower()
    return name, match.group(2).replace(" ", "")


def _pyproject() -> dict:
    with open(ROOT / "pyproject.toml", "rb") as f:
        return tomllib.load(f)


def _pyproject_pins() -> dict[str, str]:
    return dict(_split_requirement(r) for r in _pyproject()["project"]["dependencies"])


def _environment_yml() -> dict:
    text = (ROOT / "environment.yml").read_text()
    try:
        import yaml  # PyYAML comes with jupyterlab (via jupyter_events)
    except ImportError:  # pragma: no cover - fall back to the simple layout we write
        return _read_simple_yaml(text)
    return yaml.safe_load(text)


def _read_simple_yaml(text: str) -> dict:
    """Just enough YAML for environment.yml: top-level keys, '- item' lists, one nested '- pip:' list."""
    data: dict = {}
    key = None
    for raw in text.splitlines():
        line = raw.split(" #")[0].rstrip() if not raw.lstrip().startswith("#") else ""
        if not line.strip():
            continue
        if not line.startswith(" ") and not line.startswith("-"):
            key, _, value = line.partition(":")
            data[key] = value.strip() or []
            continue
        item = line.strip()[2:].strip()
        if item.endswith(":"):
            data[key].append({item[:-1]: []})
        elif line.startswith("      ") or (line.startswith("    -") and isinstance(data[key][-1], dict)):
            data[key][-1][next(iter(data[key][-1]))].append(item)
        else:
            data[key].append(item)
    return data


def _environment_pip_pins() -> dict[str, str]:
    deps = _environment_yml()["dependencies"]
    pip_lists = [d["pip"] for d in deps if isinstance(d, dict) and "pip" in d]
    assert len(pip_lists) == 1, "environment.yml should have one '- pip:' list"
    # '-e .' installs the package itself; every other line is a pinned dependency.
    return dict(_split_requirement(r) for r in pip_lists[0] if not r.startswith("-"))


def test_simple_yaml_reader_agrees_with_yaml() -> None:
    # The fallback reader must read our file the way a YAML parser does.
    text = (ROOT / "environment.yml").read_text()
    assert _read_simple_yaml(text) == _environment_yml()


def test_pyproject_and_environment_yml_pin_the_same_packages() -> None:
    pyproject, conda = _pyproject_pins(), _environment_pip_pins()
    assert set(pyproject) == set(conda), (
        f"only in pyproject.toml: {sorted(set(pyproject) - set(conda))}; "
        f"only in environment.yml: {sorted(set(conda) - set(pyproject))}"
    )
    for name in pyproject:
        assert pyproject[name] == conda[name], f"{name}: pyproject.toml {pyproject[name]} vs environment.yml {conda[name]}"


def test_environment_yml_installs_the_package() -> None:
    deps = _environment_yml()["dependencies"]
    pip_list = next(d["pip"] for d in deps if isinstance(d, dict) and "pip" in d)
    assert "-e ." in pip_list


def test_every_dependency_is_pinned_and_torch_is_there() -> None:
    pins = _pyproject_pins()
    assert "torch" in pins
    assert re.fullmatch(r"==\d+\.\d+(\.\d+)?", pins["torch"]), f"torch must be pinned exactly, got {pins['torch']!r}"
    unpinned = [name for name, spec in pins.items() if not spec.startswith("==")]
    assert not unpinned, f"not pinned with ==: {unpinned}"


def test_makefile_installs_the_same_torch() -> None:
    # The Makefile installs torch on its own first; it must be the pinned one.
    makefile = (ROOT / "Makefile").read_text()
    found = set(re.findall(r"torch==([\w.]+)", makefile))
    assert found <= {_pyproject_pins()["torch"][2:]}, found


def test_torchtext_is_not_a_dependency() -> None:
    # torchtext is unmaintained and pins old torch releases; transformer_lessons.data does its own loading.
    assert "torchtext" not in _pyproject_pins()
    assert "torchtext" not in _environment_pip_pins()
    for path in (ROOT / "transformer_lessons").glob("*.py"):
        # Prose may mention it (e.g. comparing BLEU conventions); code must not import it.
        assert not re.search(r"^\s*(import|from)\s+torchtext", path.read_text(), flags=re.M), path.name


def test_environment_python_satisfies_requires_python() -> None:
    deps = _environment_yml()["dependencies"]
    python = next(d for d in deps if isinstance(d, str) and d.startswith("python"))
    major, minor = (int(x) for x in python.split("=")[-1].split(".")[:2])
    required = re.fullmatch(r">=(\d+)\.(\d+)", _pyproject()["project"]["requires-python"])
    assert required and (major, minor) >= (int(required.group(1)), int(required.group(2)))


def test_installed_versions_match_the_pins() -> None:
    # The notebooks are executed (and their outputs committed) with these versions.
    mismatched = []
    for name, spec in _pyproject_pins().items():
        try:
            installed = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            mismatched.append(f"{name} not installed")
            continue
        if installed.split("+")[0] != spec[2:]:  # '+cpu' / '+cu121' are builds of the same release
            mismatched.append(f"{name} {installed} (pinned {spec})")
    assert not mismatched, mismatched


def test_ci_runs_make_test() -> None:
    script = (ROOT / ".ci" / "run").read_text()
    commands = [line.strip() for line in script.splitlines() if line.strip() and not line.strip().startswith("#")]
    assert "make test" in commands, commands


def test_readme_test_command_is_make_test() -> None:
    readme = ROOT / "README.md"
    assert readme.exists(), "README.md is missing"
    blocks = re.findall(r"```[a-z]*\n(.*?)```", readme.read_text(), flags=re.S)
    commands = [line.split("#")[0].strip() for block in blocks for line in block.splitlines()]
    assert "make test" in commands, "the README should tell people to run `make test`, the command CI runs"


def _modules_after(statement: str) -> set[str]:
    code = f"import json, sys\n{statement}\nprint(json.dumps(sorted(sys.modules)))"
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, timeout=120)
    assert result.returncode == 0, result.stderr
    return set(json.loads(result.stdout.strip().splitlines()[-1]))


def test_import_is_cheap() -> None:
    # Importing a submodule runs the package's __init__ too, so one fresh interpreter covers all.
    statement = "import transformer_lessons, " + ", ".join(f"transformer_lessons.{m}" for m in CORE_MODULES)
    modules = _modules_after(statement)
    assert "transformer_lessons.model" in modules
    loaded = sorted(m for m in modules if m.split(".")[0] in HEAVY)
    assert not loaded, f"`{statement}` imports {loaded}; only viz/ and data/ may, and only when imported by name"


def test_heavy_module_detection_works() -> None:
    # Control for the test above: importing matplotlib does show up.
    assert "matplotlib" in _modules_after("import matplotlib")
