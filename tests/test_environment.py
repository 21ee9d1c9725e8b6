"""What the package needs (pyproject.toml, ranges) and what `make setup` installs (requirements/lock.txt, exact)
agree with each other, with environment.yml and with the venv; CI runs the README's command and the Colab test;
importing the package stays cheap. The checks that compare the installed packages with the lock are marked
``pins``: `make colab-test` leaves them out (Colab has versions of its own)."""

from __future__ import annotations

import importlib.metadata
import json
import re
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest
from packaging.markers import Marker
from packaging.specifiers import SpecifierSet

ROOT = Path(__file__).resolve().parents[1]
LOCK = ROOT / "requirements" / "lock.txt"
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


def _requirements(requirements: list[str]) -> dict[str, str]:
    return dict(_split_requirement(r) for r in requirements)


def _pyproject_ranges() -> dict[str, str]:
    """``[project] dependencies``: what the package needs to run."""
    return _requirements(_pyproject()["project"]["dependencies"])


def _pyproject_extras() -> dict[str, dict[str, str]]:
    return {name: _requirements(reqs) for name, reqs in _pyproject()["project"]["optional-dependencies"].items()}


def _constraints(path: Path) -> dict[str, tuple[str, str]]:
    """``{PEP 503 name: (version, marker)}`` of a constraints file's ``name==version [; marker]`` lines."""
    found = {}
    for line in path.read_text(encoding="utf-8").splitlines():
        if not line.strip() or line.startswith("#"):
            continue
        requirement, _, marker = line.partition(";")
        name, spec = _split_requirement(requirement)
        assert spec.startswith("==") and "*" not in spec, f"{path.name}: not an exact pin: {line!r}"
        found[name] = (spec[2:], marker.strip())
    return found


def _lock() -> dict[str, tuple[str, str]]:
    return _constraints(LOCK)


def _setup_extras() -> list[str]:
    """The extras the Makefile's setup installs: ``-e ".[lab,test]"``."""
    match = re.search(r'-c requirements/lock\.txt -e "\.\[([\w,]+)\]"', (ROOT / "Makefile").read_text())
    assert match, 'the Makefile\'s setup should install with `-c requirements/lock.txt -e ".[extras]"`'
    return match[1].split(",")


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


def _environment_pip_list() -> list[str]:
    deps = _environment_yml()["dependencies"]
    pip_lists = [d["pip"] for d in deps if isinstance(d, dict) and "pip" in d]
    assert len(pip_lists) == 1, "environment.yml should have one '- pip:' list"
    return pip_lists[0]


def test_simple_yaml_reader_agrees_with_yaml() -> None:
    # The fallback reader must read our file the way a YAML parser does.
    text = (ROOT / "environment.yml").read_text()
    assert _read_simple_yaml(text) == _environment_yml()


def test_requirements_are_ranges_with_a_lower_bound() -> None:
    # pyproject.toml says what the package needs; the exact versions live in the lock. A pin there would make
    # `pip install` beside Colab's packages (or any other environment) replace them.
    for where, reqs in {"dependencies": _pyproject_ranges(), **_pyproject_extras()}.items():
        for name, spec in reqs.items():
            assert ">=" in spec and "==" not in spec, f"{where}: {name}{spec} should be a range with a lower bound"
    assert "torch" in _pyproject_ranges()


def test_the_lock_pins_every_requirement_within_its_range() -> None:
    lock = _lock()
    wanted = {
        **_pyproject_ranges(),
        **{n: s for extra in _setup_extras() for n, s in _pyproject_extras()[extra].items()},
    }
    for name, spec in wanted.items():
        assert name in lock, f"requirements/lock.txt has no {name}: run `make lock`"
        version, _ = lock[name]
        assert SpecifierSet(spec).contains(version, prereleases=True), f"the lock's {name}=={version} is outside {spec}"


def test_every_locked_release_installs_on_the_locks_python() -> None:
    # A locked release that needs a newer Python than requires-python admits carries that as a marker
    # (scripts/lock.py): on the Python the lock was made with, every marker holds.
    header = re.search(r"^# python: ((\d+\.\d+)\.\d+)", LOCK.read_text(encoding="utf-8"), re.M)
    assert header, "the lock names the Python it was made with"
    assert SpecifierSet(_pyproject()["project"]["requires-python"]).contains(header[1])
    for name, (_, marker) in _lock().items():
        if marker:
            assert Marker(marker).evaluate({"python_full_version": header[1], "python_version": header[2]}), name


def test_environment_yml_installs_what_make_setup_installs() -> None:
    pip_list = _environment_pip_list()
    torch = [r for r in pip_list if r.startswith("torch")]
    assert torch == [f"torch=={_lock()['torch'][0]}"], (
        f"environment.yml installs {torch}, the lock has torch=={_lock()['torch'][0]}"
    )
    assert "-c requirements/lock.txt" in pip_list, "environment.yml should install with the lock's constraints"
    assert f"-e .[{','.join(_setup_extras())}]" in pip_list, (
        "environment.yml should install the package with the Makefile's extras"
    )
    assert len(pip_list) == 3, pip_list


def test_makefile_installs_the_locked_torch() -> None:
    # The Makefile installs torch on its own first; it must be the locked one.
    found = set(re.findall(r"torch==([\w.]+)", (ROOT / "Makefile").read_text()))
    assert found == {_lock()["torch"][0]}, found


def test_torchtext_is_not_a_dependency() -> None:
    # torchtext is unmaintained and pins old torch releases; transformer_lessons.data does its own loading.
    assert "torchtext" not in _pyproject_ranges()
    assert "torchtext" not in _lock()
    for path in (ROOT / "transformer_lessons").glob("*.py"):
        # Prose may mention it (e.g. comparing BLEU conventions); code must not import it.
        assert not re.search(r"^\s*(import|from)\s+torchtext", path.read_text(), flags=re.M), path.name


def test_environment_python_is_the_locks_and_satisfies_requires_python() -> None:
    deps = _environment_yml()["dependencies"]
    python = next(d for d in deps if isinstance(d, str) and d.startswith("python"))
    version = python.split("=")[-1]
    assert SpecifierSet(_pyproject()["project"]["requires-python"]).contains(f"{version}.0")
    assert re.search(rf"^# python: {re.escape(version)}\.", LOCK.read_text(encoding="utf-8"), re.M), (
        f"environment.yml's python={version} is not the Python the lock was made with"
    )


@pytest.mark.pins
def test_installed_versions_match_the_lock() -> None:
    # The notebooks are executed (and their outputs committed) with these versions.
    mismatched = []
    for name, (version, marker) in _lock().items():
        if marker and not Marker(marker).evaluate():
            continue
        try:
            installed = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            mismatched.append(f"{name} not installed")
            continue
        if installed.split("+")[0] != version:  # '+cpu' / '+cu121' are builds of the same release
            mismatched.append(f"{name} {installed} (locked {version})")
    assert not mismatched, f"{mismatched}: run `make setup` (or `make lock` after upgrading on purpose)"


def test_ci_runs_make_test_and_the_colab_test() -> None:
    script = (ROOT / ".ci" / "run").read_text()
    commands = [line.strip() for line in script.splitlines() if line.strip() and not line.strip().startswith("#")]
    assert "make test" in commands, commands
    assert "make colab-test" in commands, commands


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
