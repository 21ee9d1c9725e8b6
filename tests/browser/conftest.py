"""Fixtures for the browser tests: a headless Chromium driven by Playwright, and a
JupyterLab server of our own on a loopback port, always stopped afterwards.

Both are optional tools (``scripts/browser_setup.sh`` installs them): without
them every browser test is skipped with a message saying what is missing, unless
``TRANSFORMER_LESSONS_REQUIRE_BROWSER=1`` (``make browser-test`` sets it), which
turns the skip into a failure so that a run without a browser cannot pass.
"""

from __future__ import annotations

import contextlib
import json
import os
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from dataclasses import dataclass
from pathlib import Path

import pytest

from transformer_lessons.lab_launch import lab_command

SETUP_HINT = "install them with `bash scripts/browser_setup.sh` (or `make browser-test`)"
# Set by `make browser-test`: a missing Chromium or Playwright fails the run instead of skipping it.
REQUIRE_ENV = "TRANSFORMER_LESSONS_REQUIRE_BROWSER"

SERVER_START_TIMEOUT_S = 60
SERVER_STOP_TIMEOUT_S = 10
KERNEL_STOP_TIMEOUT_S = 30  # jupyter_client asks politely, then kills after its own grace period
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]

# JupyterLab settings for a quiet, fully rendered page: no news/update toasts over the
# notebook, and every cell kept in the DOM (no windowing), so the widget is there to find.
LAB_SETTINGS = {
    "@jupyterlab/apputils-extension/notification.jupyterlab-settings": {"fetchNews": "false", "checkForUpdates": False},
    "@jupyterlab/notebook-extension/tracker.jupyterlab-settings": {"windowingMode": "none"},
}


def _chromium() -> str | None:
    for candidate in (
        os.environ.get("CHROMIUM"),
        "/usr/bin/chromium",
        shutil.which("chromium"),
        shutil.which("chromium-browser"),
    ):
        if candidate and Path(candidate).is_file() and os.access(candidate, os.X_OK):
            return candidate
    return None


def _unavailable(what: str) -> None:
    """Skip the test for want of ``what``, or fail it when the run requires a browser."""
    message = f"browser test needs {what}; {SETUP_HINT}"
    if os.environ.get(REQUIRE_ENV, "") not in ("", "0"):
        pytest.fail(f"{message} ({REQUIRE_ENV} is set, so this fails instead of skipping)", pytrace=False)
    pytest.skip(message)


@pytest.fixture(scope="session")
def chromium_path() -> str:
    path = _chromium()
    if path is None:
        _unavailable("Chromium (/usr/bin/chromium, or set CHROMIUM=...)")
    return path


@pytest.fixture(scope="session")
def sync_playwright():
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        sync_playwright = None
    if sync_playwright is None:  # outside the except: the message is not chained to the ImportError
        _unavailable("the Playwright Python package")
    return sync_playwright


@pytest.fixture
def browser_page(sync_playwright, chromium_path, tmp_path):
    """A page of a fresh headless Chromium profile (no Playwright browser download needed)."""
    with sync_playwright() as playwright:
        context = playwright.chromium.launch_persistent_context(
            str(tmp_path / "chromium-profile"),
            executable_path=chromium_path,
            headless=True,
            args=CHROMIUM_ARGS,
            viewport={"width": 1400, "height": 1000},
            timeout=60_000,
        )
        try:
            page = context.pages[0] if context.pages else context.new_page()
            page.set_default_timeout(30_000)
            yield page
        finally:
            context.close()


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@dataclass
class LabServer:
    url: str  # http://127.0.0.1:<port>
    token: str
    root_dir: Path
    log: Path
    theme: str = "light"

    def lab_url(self, notebook: str) -> str:
        # ?reset: start from an empty workspace, whatever a previous session left.
        return f"{self.url}/lab/tree/{notebook}?reset&token={self.token}"

    def api(self, method: str, path: str, timeout: float = 10):
        """Call the server's REST API (``/api/...``) with its token; the decoded JSON reply, or None."""
        request = urllib.request.Request(
            f"{self.url}{path}",
            method=method,
            headers={"Authorization": f"token {self.token}"},
            data=b"" if method in ("POST", "PATCH", "PUT") else None,
        )
        with urllib.request.urlopen(request, timeout=timeout) as response:
            body = response.read()
        return json.loads(body) if body else None


def _wait_until_up(url: str, token: str, proc: subprocess.Popen, log: Path) -> None:
    deadline = time.monotonic() + SERVER_START_TIMEOUT_S
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"JupyterLab exited with {proc.returncode}:\n{log.read_text()[-3000:]}")
        try:
            with urllib.request.urlopen(f"{url}/api/status?token={token}", timeout=2) as response:
                if response.status == 200:
                    return
        except OSError:
            time.sleep(0.5)
    raise RuntimeError(f"JupyterLab did not answer within {SERVER_START_TIMEOUT_S}s:\n{log.read_text()[-3000:]}")


@pytest.fixture
def lab_server(tmp_path):
    """Start JupyterLab headless on a free loopback port, serving ``tmp_path / "root"``; stop it after the test.

    Config, runtime and settings directories are temporary and the token is random.
    Afterwards the server shuts its kernels down and then itself, through its REST
    API (see :func:`_stop`); the test fails if a kernel outlives it.
    """
    yield from _lab_server(tmp_path, LAB_SETTINGS, quiet=True)


THEMES = {"light": "JupyterLab Light", "dark": "JupyterLab Dark"}


@pytest.fixture(params=sorted(THEMES))
def themed_lab_server(request, tmp_path):
    """JupyterLab in the light theme, then (a second run of the test) in the dark one: ``server.theme`` says which."""
    theme = {"@jupyterlab/apputils-extension/themes.jupyterlab-settings": {"theme": THEMES[request.param]}}
    for server in _lab_server(tmp_path, {**LAB_SETTINGS, **theme}, quiet=True):
        server.theme = request.param
        yield server


@pytest.fixture
def learner_lab_server(tmp_path):
    """JupyterLab as ``make learn`` starts it for a new learner: no settings of the test's own, news and update
    checks left to what the course installs into the venv (``make setup``: jupyter/lab-settings.json)."""
    yield from _lab_server(tmp_path, {}, quiet=False)


def _lab_server(tmp_path, lab_settings: dict, quiet: bool):
    root = tmp_path / "root"
    root.mkdir()
    settings = tmp_path / "lab-settings"
    settings.mkdir()
    for name, values in lab_settings.items():
        target = settings / name
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(json.dumps(values), encoding="utf-8")
    port, token = free_port(), secrets.token_hex(16)
    # The kernels' connection files and sockets (how we recognise them): a short path, as a home folder's is, so that
    # the kernels talk over ipc as a learner's do (lab_launch.ipc_fits).
    runtime = Path(tempfile.mkdtemp(prefix="tl-rt-", dir="/tmp" if os.path.isdir("/tmp") else None))
    env = {
        **os.environ,
        "JUPYTER_CONFIG_DIR": str(tmp_path / "jupyter-config"),
        "JUPYTER_RUNTIME_DIR": str(runtime),
        "IPYTHONDIR": str(tmp_path / "ipython"),
        "TRANSFORMER_LESSONS_MODE": "quick",
    }
    env.pop("MPLBACKEND", None)  # let %matplotlib inline choose, as for a learner
    log = tmp_path / "jupyterlab.log"
    # As the course starts it (python -m transformer_lessons lab: ipc kernels on Linux), on the test's own folder.
    command = lab_command(
        root,
        python=sys.executable,
        as_root=True,
        extra=[
            "--no-browser",
            "--ServerApp.ip=127.0.0.1",
            f"--ServerApp.port={port}",
            "--ServerApp.port_retries=0",
            f"--IdentityProvider.token={token}",
            f"--LabApp.user_settings_dir={settings}",
            f"--LabApp.workspaces_dir={tmp_path / 'lab-workspaces'}",
        ],
    )
    if quiet:
        command += ["--LabApp.news_url=None", "--LabApp.check_for_updates_class=jupyterlab.NeverCheckForUpdate"]
    with log.open("w") as log_file:
        proc = subprocess.Popen(command, env=env, stdout=log_file, stderr=subprocess.STDOUT, start_new_session=True)
    server = LabServer(url=f"http://127.0.0.1:{port}", token=token, root_dir=root, log=log)
    try:
        _wait_until_up(server.url, token, proc, log)
        yield server
    finally:
        _stop(server, proc, runtime)
        shutil.rmtree(runtime, ignore_errors=True)


def _stop(server: LabServer, proc: subprocess.Popen, runtime: Path) -> None:
    """Shut the kernels down, then the server; fail if a kernel process is left over.

    jupyter_client starts every kernel with ``start_new_session=True``, so a
    kernel is in a session and process group of its own: signalling the server's
    group does not reach it, and after a killed server it lives on until (and
    unless) ipykernel's parent poller notices. So first ask the server: DELETE
    /api/kernels/<id> for each kernel (it returns once the kernel has exited),
    then POST /api/shutdown. Signals are only the fallback for a server that does
    not answer.
    """
    if proc.poll() is None:
        with contextlib.suppress(OSError, ValueError):  # a server that died or hangs: signals below
            for kernel in server.api("GET", "/api/kernels") or []:
                server.api("DELETE", f"/api/kernels/{kernel['id']}", timeout=KERNEL_STOP_TIMEOUT_S)
            server.api("POST", "/api/shutdown", timeout=KERNEL_STOP_TIMEOUT_S)
        with contextlib.suppress(subprocess.TimeoutExpired):
            proc.wait(timeout=SERVER_STOP_TIMEOUT_S)
    for sig in (signal.SIGTERM, signal.SIGKILL):  # the server's own group, if anything is left
        if proc.poll() is not None:
            break
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(proc.pid, sig)
        with contextlib.suppress(subprocess.TimeoutExpired):
            proc.wait(timeout=SERVER_STOP_TIMEOUT_S)

    leftovers = _kernel_processes(runtime)
    for pid in leftovers:  # ours (their command line names our temporary runtime directory)
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(pid, signal.SIGKILL)
    if leftovers:
        pytest.fail(f"kernel processes {leftovers} outlived the JupyterLab server (killed now); see {server.log}")


def _kernel_processes(runtime: Path, wait_s: float = 5.0) -> list[int]:
    """PIDs of live processes whose command line mentions ``runtime`` (our kernels), after up to ``wait_s``."""
    proc_dir = Path("/proc")
    if not proc_dir.is_dir():  # not Linux: nothing to look at
        return []
    needle = str(runtime).encode()
    deadline = time.monotonic() + wait_s
    while True:
        pids = []
        for entry in proc_dir.iterdir():
            if not entry.name.isdigit():
                continue
            try:
                cmdline = (entry / "cmdline").read_bytes()
                state = (entry / "stat").read_text().rsplit(")", 1)[1].split()[0]
            except OSError:
                continue
            if needle in cmdline and state != "Z":  # a zombie has exited already
                pids.append(int(entry.name))
        if not pids or time.monotonic() > deadline:
            return sorted(pids)
        time.sleep(0.2)
