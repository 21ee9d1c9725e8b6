"""`pip install -e .` (make learn, the README) prints no setuptools notice box.

For a package at the top of the checkout, setuptools' editable build installs an import hook and ends with an
"Editable installation. ... Please be careful with folders in your working directory with the same name as your
package" box, which pip (>= 25) shows to every learner. ``package-dir = {"" = "."}`` in pyproject.toml makes it
choose its plain mode instead: a .pth file naming the checkout, and no box. These tests run setuptools' own
editable build (PEP 660, what pip calls) on a copy of the package, offline, with and without that line.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PACKAGE_DIR = re.compile(r'^package-dir = \{ "" = "\." \}\n', re.M)
NOTICE = "Editable installation"

BUILD = """
import json, sys, warnings
from setuptools import build_meta
with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
    wheel = build_meta.build_editable(sys.argv[1])
print(json.dumps({"wheel": wheel, "warnings": [str(w.message) for w in caught]}))
"""


def _editable_build(tmp_path: Path, pyproject: str) -> tuple[list[str], dict[str, str]]:
    """The warnings of setuptools' editable build of a copy of the checkout, and the wheel's .pth files."""
    src = tmp_path / "src"
    shutil.copytree(
        ROOT / "transformer_lessons", src / "transformer_lessons", ignore=shutil.ignore_patterns("__pycache__")
    )
    shutil.copy(ROOT / "README.md", src / "README.md")
    (src / "pyproject.toml").write_text(pyproject, encoding="utf-8")
    out = tmp_path / "wheel"
    out.mkdir()
    run = subprocess.run(
        [sys.executable, "-c", BUILD, str(out)], cwd=src, capture_output=True, text=True, timeout=300, check=True
    )
    result = json.loads(run.stdout.strip().splitlines()[-1])
    with zipfile.ZipFile(out / result["wheel"]) as wheel:
        pth = {n: wheel.read(n).decode() for n in wheel.namelist() if n.endswith(".pth")}
    return result["warnings"], pth


def test_editable_install_prints_no_notice(tmp_path):
    pyproject = (ROOT / "pyproject.toml").read_text(encoding="utf-8")
    assert PACKAGE_DIR.search(pyproject), "pyproject.toml lost [tool.setuptools] package-dir"
    caught, pth = _editable_build(tmp_path, pyproject)
    assert not [w for w in caught if NOTICE in w], caught
    # The plain mode: one .pth file that puts the checkout on the path, so imports read the files you edit.
    assert list(pth.values()) == [f"{(tmp_path / 'src').resolve()}\n"], pth


def test_without_package_dir_the_notice_comes_back(tmp_path):
    """What the line is for: without it, setuptools picks its import hook and prints the box."""
    pyproject = PACKAGE_DIR.sub("", (ROOT / "pyproject.toml").read_text(encoding="utf-8"))
    caught, _ = _editable_build(tmp_path, pyproject)
    assert [w for w in caught if NOTICE in w], caught
