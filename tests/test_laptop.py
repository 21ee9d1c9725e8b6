"""A learner's laptop: the commands that open the course, where runs go, what git ignores, and HTML exports.

* ``make learn`` opens ``learner/`` and ``make lab`` opens ``notebooks/``, both through
  ``python -m transformer_lessons lab``, rooted at the course; ``ARGS`` reaches ``jupyter lab``
  (checked with ``make -n``: no server starts); a kernel it starts talks over local sockets;
* training writes the repository's top-level ``runs/``, never a folder of lessons;
* ``git`` ignores runs, HTML exports and checkpoints, not the lessons;
* a static HTML export (``jupyter nbconvert --to html``) shows every explorer's
  picture, although the notebook saved the widgets' state (which makes the
  exporter prefer the widget view, an empty box until a script from a CDN draws it).
"""

from __future__ import annotations

import base64
import contextlib
import json
import os
import secrets
import shlex
import shutil
import signal
import socket
import subprocess
import tempfile
import time
import urllib.request
from pathlib import Path

import pytest

from transformer_lessons.rundir import PROJECT_NAME, RUNS_ENV, course_root, default_out_dir

ROOT = Path(__file__).resolve().parent.parent
WIDGET_VIEW = "application/vnd.jupyter.widget-view+json"
WIDGET_STATE = "application/vnd.jupyter.widget-state+json"


# --- make learn / make lab ----------------------------------------------------------------------


def _make_dry_run(*args: str) -> list[str]:
    """The commands ``make -n`` prints (nothing runs), with ``ARGS`` from the shell set to a decoy."""
    if shutil.which("make") is None:
        pytest.skip("make is not installed")
    env = {**os.environ, "ARGS": "--from-the-shell"}  # must not reach jupyter: only `make ... ARGS=` does
    done = subprocess.run(["make", "-n", *args], cwd=ROOT, env=env, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    return [_without_environment(line) for line in done.stdout.splitlines()]


def _without_environment(line: str) -> str:
    """A command line without the ``NAME=value`` settings in front of it (the data folder: test_classroom checks it)."""
    words = shlex.split(line) if "transformer_lessons lab" in line else None
    if not words:
        return line
    while words and "=" in words[0] and not words[0].startswith("-"):
        words.pop(0)
    return shlex.join(words)


@pytest.mark.parametrize("target, flags", [("learn", []), ("lab", ["--solutions"])])
def test_make_runs_the_course_lab_command_with_the_args_given(target, flags):
    lines = _make_dry_run(target, "ARGS=--no-browser --port 8890 --IdentityProvider.token=abc")
    lab = [shlex.split(line) for line in lines if "transformer_lessons lab" in line]
    assert lab == [
        [
            ".venv/bin/python",
            "-m",
            "transformer_lessons",
            "lab",
            *flags,
            "--no-browser",
            "--port",
            "8890",
            "--IdentityProvider.token=abc",
        ]
    ], lines
    plain = [shlex.split(line) for line in _make_dry_run(target) if "transformer_lessons lab" in line]
    assert plain == [[".venv/bin/python", "-m", "transformer_lessons", "lab", *flags]], (
        "an ARGS of the shell must not reach jupyter lab"
    )


@pytest.mark.parametrize("solutions, folder", [(False, "learner"), (True, "notebooks")])
def test_the_lab_command_roots_jupyterlab_at_the_course_and_opens_its_folder(solutions, folder):
    from transformer_lessons.lab_launch import lab_command

    posix = lab_command(
        ROOT, solutions=solutions, extra=["--port", "8890"], python="py", as_root=False, runtime_dir="/tmp/rt"
    )
    assert posix[:4] == ["py", "-m", "jupyter", "lab"] and posix[-2:] == ["--port", "8890"], posix
    assert f"--ServerApp.root_dir={ROOT}" in posix and f"--LabApp.default_url=/lab/tree/{folder}" in posix
    assert "--KernelManager.transport=ipc" in posix and "--allow-root" not in posix
    windows = lab_command(ROOT, solutions=solutions, python="py", as_root=False, os_name="nt")
    assert "--KernelManager.transport=ipc" not in windows, "Windows has no ipc transport: TCP on the loopback"
    assert "--allow-root" in lab_command(ROOT, python="py", as_root=True)
    # A runtime folder so deep that a kernel's socket path would pass the ~100-byte limit: TCP, or no kernel starts.
    deep = "/home/" + "a-very-long-user-name" * 3 + "/.local/share/jupyter/runtime"
    assert "--KernelManager.transport=ipc" not in lab_command(ROOT, python="py", as_root=False, runtime_dir=deep)


def test_the_lab_command_finds_the_course_from_a_subfolder_and_names_the_way_out_elsewhere(tmp_path, capsys):
    from transformer_lessons.__main__ import main
    from transformer_lessons.lab_launch import lab_root

    assert lab_root(ROOT / "learner") == ROOT and lab_root(ROOT / "transformer_lessons" / "viz") == ROOT
    # Outside any clone it falls back to the clone this package was installed from (an editable install) ...
    assert lab_root(tmp_path) == ROOT
    # ... and where there is none, one line.
    import transformer_lessons.lab_launch as lab_launch

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(lab_launch, "__file__", str(tmp_path / "site-packages" / "transformer_lessons" / "lab_launch.py"))
        patch.chdir(tmp_path)
        assert main(["lab", "--no-browser"]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"error: {tmp_path} is not in the course folder (the one with learner/ and notebooks/)")
    assert len(err.strip().splitlines()) == 1, err


def _get_json(url: str, timeout: float = 5):
    with urllib.request.urlopen(url, timeout=timeout) as response:
        return json.loads(response.read() or b"null")


def test_make_learn_starts_a_quiet_jupyterlab_even_as_root(tmp_path):
    """The real command: JupyterLab answers (as root too: CI runs as root) with the news prompt and update check off."""
    if shutil.which("make") is None:
        pytest.skip("make is not installed")
    port, token = _free_port(), secrets.token_hex(8)
    runtime = tempfile.mkdtemp(prefix="tl-rt-", dir="/tmp" if os.path.isdir("/tmp") else None)
    env = {
        **os.environ,
        "JUPYTER_CONFIG_DIR": str(tmp_path / "config"),
        "JUPYTER_RUNTIME_DIR": runtime,  # short, as a home folder's is: the kernels' sockets live there
        "JUPYTERLAB_SETTINGS_DIR": str(tmp_path / "user-settings"),
        "JUPYTERLAB_WORKSPACES_DIR": str(tmp_path / "ws"),
    }
    args = f"ARGS=--no-browser --ServerApp.ip=127.0.0.1 --port {port} --ServerApp.port_retries=0 --IdentityProvider.token={token}"
    log = tmp_path / "make-learn.log"
    with log.open("w") as out:
        proc = subprocess.Popen(
            ["make", "--no-print-directory", "learn", args],
            cwd=ROOT,
            env=env,
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 90
        while True:
            assert proc.poll() is None, f"make learn exited with {proc.returncode}:\n{log.read_text()[-2000:]}"
            try:
                _get_json(f"{base}/api/status?token={token}", timeout=2)
                break
            except OSError:
                assert time.monotonic() < deadline, f"JupyterLab did not answer:\n{log.read_text()[-2000:]}"
                time.sleep(0.5)
        setting = _get_json(f"{base}/lab/api/settings/@jupyterlab/apputils-extension:notification?token={token}")
        # The course's values are the schema's defaults (overrides.d); the learner's own settings are still empty.
        defaults = {name: spec.get("default") for name, spec in setting["schema"]["properties"].items()}
        assert defaults["fetchNews"] == "false" and defaults["checkForUpdates"] is False, defaults
        assert "fetchNews" not in setting["settings"], setting["settings"]
        if os.geteuid() == 0:
            assert "you are root" in log.read_text()
        # Rooted at the course: the learner banner's link to ../notebooks/ resolves, and it opens on learner/.
        for folder in ("learner", "notebooks"):
            assert _get_json(f"{base}/api/contents/{folder}?content=0&token={token}")["type"] == "directory"
        assert "/lab/tree/learner" in log.read_text()
        # A kernel (what every notebook starts) talks over local sockets: no "without encryption" warning.
        request = urllib.request.Request(
            f"{base}/api/kernels", method="POST", data=b"{}", headers={"Authorization": f"token {token}"}
        )
        with urllib.request.urlopen(request, timeout=60) as response:
            kernel = json.loads(response.read())
        # The kernel binds its five sockets after the place where ipykernel warns about TCP: wait for them.
        deadline = time.monotonic() + 60
        while len(list(Path(runtime).glob(f"kernel-{kernel['id']}-ipc-*"))) < 5:
            assert time.monotonic() < deadline, f"the kernel's sockets did not appear:\n{log.read_text()[-2000:]}"
            time.sleep(0.5)
        connection = json.loads(next(Path(runtime).glob("kernel-*.json")).read_text())
        assert connection["transport"] == "ipc", connection
        assert "without encryption" not in log.read_text(), log.read_text()[-2000:]
    finally:
        with contextlib.suppress(OSError):
            urllib.request.urlopen(
                urllib.request.Request(f"{base}/api/shutdown?token={token}", method="POST", data=b""), timeout=10
            )
        with contextlib.suppress(subprocess.TimeoutExpired):
            proc.wait(timeout=20)
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
        shutil.rmtree(runtime, ignore_errors=True)


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def test_the_readmes_two_commands_are_make_targets():
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    first_block = readme.split("```bash", 1)[1].split("```", 1)[0]
    commands = [line.split("#")[0].split() for line in first_block.strip().splitlines()]
    assert [c[:2] for c in commands] == [["make", "learn"], ["make", "test"]], first_block
    makefile = (ROOT / "Makefile").read_text(encoding="utf-8")
    for target in ("learn", "lab", "test"):
        assert f"\n{target}: " in makefile, f"the Makefile has no {target} target"
    assert "ARGS=" in readme, "the README should say how to pass options to JupyterLab"


# --- where runs go -------------------------------------------------------------------------------


@pytest.fixture
def no_runs_env(monkeypatch):
    monkeypatch.delenv(RUNS_ENV, raising=False)


@pytest.mark.parametrize("where", [".", "notebooks", "learner", "transformer_lessons/viz"])
def test_runs_go_to_the_repositorys_runs_folder_from_anywhere_in_the_clone(where, no_runs_env, monkeypatch):
    monkeypatch.chdir(ROOT / where)
    out = default_out_dir("quick")
    assert (Path.cwd() / out).resolve() == ROOT / "runs" / "quick"
    assert not out.is_absolute(), "relative, so that a printed path names no folder of this machine"
    assert out == Path(os.path.relpath(ROOT, ROOT / where)) / "runs" / "quick"


def test_runs_outside_a_clone_go_to_runs_here(tmp_path, no_runs_env, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert course_root() is None
    assert default_out_dir("quick") == Path("runs") / "quick"


def test_the_environment_variable_wins(tmp_path, monkeypatch):
    monkeypatch.chdir(ROOT / "notebooks")
    monkeypatch.setenv(RUNS_ENV, str(tmp_path / "elsewhere"))
    assert default_out_dir("quick") == tmp_path / "elsewhere" / "quick"


def test_a_clone_is_recognised_by_its_pyproject_or_by_git_beside_the_package(tmp_path, no_runs_env, monkeypatch):
    ours, other, bare = tmp_path / "ours", tmp_path / "other", tmp_path / "bare"
    (ours / "lessons" / "deeper").mkdir(parents=True)
    (ours / "pyproject.toml").write_text(f'[project]\nname = "{PROJECT_NAME.replace("-", "_")}"\n', encoding="utf-8")
    (other / "sub").mkdir(parents=True)
    (other / "pyproject.toml").write_text('[project]\nname = "something-else"\n', encoding="utf-8")
    (bare / ".git").mkdir(parents=True)
    (bare / "transformer_lessons").mkdir()
    (bare / "notebooks").mkdir()
    assert course_root(ours / "lessons" / "deeper") == ours.resolve()
    assert course_root(other / "sub") is None
    assert course_root(bare / "notebooks") == bare.resolve()
    monkeypatch.chdir(ours / "lessons" / "deeper")
    assert default_out_dir("x") == Path("..") / ".." / "runs" / "x"


def test_the_package_name_is_pyprojects():
    text = (ROOT / "pyproject.toml").read_text(encoding="utf-8")
    assert f'\nname = "{PROJECT_NAME}"\n' in text


# --- what git ignores ------------------------------------------------------------------------------


def _ignored(path: str) -> bool:
    done = subprocess.run(["git", "check-ignore", "-q", "--no-index", path], cwd=ROOT, capture_output=True, timeout=30)
    if done.returncode not in (0, 1):
        pytest.skip(f"git check-ignore failed here: {done.stderr.decode(errors='replace').strip()}")
    return done.returncode == 0


@pytest.mark.parametrize(
    "path, ignored",
    [
        ("runs/quick/last.pt", True),
        ("notebooks/runs/quick/best.pt", True),
        ("learner/runs/09_resume_demo/last.pt", True),
        ("notebooks/01_self_attention.html", True),
        ("learner/01_self_attention.html", True),
        ("notebooks/.ipynb_checkpoints/01_self_attention-checkpoint.ipynb", True),
        ("learner/.ipynb_checkpoints/01_self_attention-checkpoint.ipynb", True),
        ("notebooks/01_self_attention.ipynb", False),
        ("learner/01_self_attention.ipynb", False),
    ],
)
def test_git_ignores_runs_exports_and_checkpoints_not_the_lessons(path, ignored):
    if shutil.which("git") is None or not (ROOT / ".git").exists():
        pytest.skip("not a git checkout")
    assert _ignored(path) == ignored, f"{path} should {'' if ignored else 'not '}be ignored"


# --- a static HTML export shows every explorer's picture ----------------------------------------------

SETUP = """\
import torch
from transformer_lessons import PRESETS, Transformer, padding_mask, target_mask, viz
from transformer_lessons.data import SPECIALS, Vocab

torch.manual_seed(0)
src_vocab = Vocab([*SPECIALS, "Ein", "Mann", "fährt", "Fahrrad", "."])
tgt_vocab = Vocab([*SPECIALS, "A", "man", "rides", "a", "bike", "."])
model = Transformer(PRESETS["tiny"].replace(max_len=32), len(src_vocab), len(tgt_vocab)).eval()
src, tgt = torch.tensor([[4, 5, 6, 7, 3]]), torch.tensor([[2, 4, 5, 6]])
model(src, tgt, padding_mask(src, 1), target_mask(tgt, 1))
attention = model.attention_weights()
"""
EXPLORERS = {
    "attention_explorer": 'viz.attention_explorer(attention, ["Ein", "Mann", "fährt", "Fahrrad", "<eos>"], ["<bos>", "A", "man", "rides"])',
    "generation_stepper": 'viz.generation_stepper(["Ein", "Mann", "fährt", "Fahrrad", "<eos>"], ["A", "man", "rides", "<eos>"], attention)',
    "positional_encoding_explorer": "viz.positional_encoding_explorer(max_len=20, d_model=16)",
    "translator": 'viz.translator(model, src_vocab, tgt_vocab, sentence="Ein Mann fährt Fahrrad .", beam_size=1)',
}


@pytest.fixture(scope="module")
def exported(tmp_path_factory):
    """A notebook with one explorer of each kind, executed as ``nbconvert --execute`` does and exported to HTML."""
    nbformat = pytest.importorskip("nbformat")
    from nbconvert import HTMLExporter
    from nbconvert.preprocessors import ExecutePreprocessor

    folder = tmp_path_factory.mktemp("export")
    nb = nbformat.v4.new_notebook()
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    nb.cells = [nbformat.v4.new_code_cell(SETUP)] + [nbformat.v4.new_code_cell(code) for code in EXPLORERS.values()]
    with pytest.MonkeyPatch.context() as patch:  # the kernel inherits this environment
        patch.setenv("MPLBACKEND", "agg")
        patch.setenv("TRANSFORMER_LESSONS_MODE", "quick")
        ExecutePreprocessor(timeout=120, kernel_name="python3").preprocess(nb, {"metadata": {"path": str(folder)}})
    html, _ = HTMLExporter().from_notebook_node(nb)
    (folder / "explorers.html").write_text(html, encoding="utf-8")  # to look at after a failure
    return nb, html


def test_each_explorer_leaves_the_widget_and_a_static_copy_of_its_picture(exported):
    nb, _ = exported
    state = nb.metadata["widgets"][WIDGET_STATE]["state"]
    for name, cell in zip(EXPLORERS, nb.cells[1:]):
        errors = [o for o in cell.outputs if o.output_type == "error"]
        assert not errors, f"{name}: {errors}"
        assert [sorted(o.get("data", {})) for o in cell.outputs] == [[WIDGET_VIEW, "text/plain"], ["image/png"]], name
        widget, copy = cell.outputs
        # The case that used to export an empty box: the saved state holds the widget, so the exporter picks its view.
        assert widget.data[WIDGET_VIEW]["model_id"] in state, name
        assert base64.b64decode(copy.data["image/png"]).startswith(b"\x89PNG\r\n\x1a\n"), name


def test_a_static_html_export_shows_every_explorers_picture(exported):
    from bs4 import BeautifulSoup

    nb, html = exported
    soup = BeautifulSoup(html, "html.parser")
    cells = soup.select("div.jp-CodeCell")
    assert len(cells) == len(nb.cells)
    css = "\n".join(style.get_text() for style in soup.find_all("style"))
    for name, cell, saved in zip(EXPLORERS, cells[1:], nb.cells[1:]):
        copy = saved.outputs[1].data["image/png"]
        images = [img["src"] for img in cell.select("div.jp-OutputArea-output > img")]
        assert images == [f"data:image/png;base64,{copy}"], (
            f"{name}: the export shows {len(images)} pictures, not its static copy"
        )
        assert cell.select(f'script[type="{WIDGET_VIEW}"]'), f"{name}: the live widget is gone from the export"
        # The rule that hides the copy lives in the widget (drawn only by the widget script), never in the page's CSS.
        assert copy[-40:] not in css, f"{name}: the page's own CSS hides the static copy"


# --- the route without make ---------------------------------------------------------------------


def _readme_block_after(marker: str, fence: str) -> list[str]:
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    start = text.index(f"```{fence}\n", text.index(marker)) + len(fence) + 4
    return text[start : text.index("```", start)].strip().splitlines()


def _make_recipe(target: str) -> list[str]:
    """The commands of a Makefile rule, as they read with the venv's paths filled in and make's own knobs left out."""
    lines = (ROOT / "Makefile").read_text(encoding="utf-8").splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith(f"{target}:"))
    recipe = []
    for line in lines[start + 1 :]:
        if not line.startswith("\t"):
            break
        command = line.strip()
        for make_part, shell in (
            ("$(BIN)/python", ".venv/bin/python"),
            ("$(PYTHON) -m venv $(VENV)", "python3 -m venv .venv"),
            ("$(DATA_ENV) ", ""),
            (" $(ARGS)", ""),
            (" --quiet", ""),
            (" $(if $(TORCH_INDEX),--index-url $(TORCH_INDEX))", ""),
        ):
            command = command.replace(make_part, shell)
        if not command.startswith("touch"):
            recipe.append(command)
    return recipe


def test_the_readme_route_without_make_is_what_make_runs():
    unix = _readme_block_after("**Without `make`**", "bash")
    windows = _readme_block_after("On Windows (PowerShell or cmd", "bat")
    assert unix == _make_recipe("$(BIN)/python") + _make_recipe("$(VENV)/.installed") + _make_recipe("learn"), unix
    as_unix = [
        line.replace("py -m venv", "python3 -m venv").replace(".venv\\Scripts\\python", ".venv/bin/python")
        for line in windows
    ]
    assert as_unix == unix, "the Windows commands are the macOS/Linux ones with Windows' paths"
    assert "lab --solutions" in (ROOT / "README.md").read_text(encoding="utf-8")


def test_the_lab_command_installs_the_course_settings_once(tmp_path, capsys):
    from transformer_lessons.lab_launch import SETTINGS_TARGET, install_lab_settings

    written = install_lab_settings(ROOT, prefix=tmp_path)
    assert written == tmp_path / SETTINGS_TARGET
    assert written.read_bytes() == (ROOT / "jupyter" / "lab-settings.json").read_bytes()
    assert install_lab_settings(ROOT, prefix=tmp_path) is None, "already there: nothing to do"
    written.write_text("{}")
    assert install_lab_settings(ROOT, prefix=tmp_path) == written, "out of date: written again"
    locked = tmp_path / "locked"
    locked.mkdir()
    (locked / "share").write_text("a file where a folder should be")  # fails for root too, unlike chmod
    assert install_lab_settings(ROOT, prefix=locked) is None
    out = capsys.readouterr().out
    assert out.startswith("note: the course's JupyterLab settings could not be installed") and out.count("\n") == 1
