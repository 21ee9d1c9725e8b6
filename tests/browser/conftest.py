"""Fixtures for the browser tests: a headless Chromium driven by Playwright, and a
JupyterLab server of our own on a loopback port, always stopped afterwards.

Both are optional tools (``scripts/browser_setup.sh`` installs them): without
them every browser test is skipped with a message saying what is missing.
"""

from __future__ import annotations

import json
import os
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from dataclasses import dataclass
from pathlib import Path

import pytest

SETUP_HINT = "install them with `bash scripts/browser_setup.sh` (or `make browser-test`)"

SERVER_START_TIMEOUT_S = 60
SERVER_STOP_TIMEOUT_S = 10
CHROMIUM_ARGS = [
    "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
    "--disable-background-networking", "--disable-component-update", "--disable-sync",
]

# JupyterLab settings for a quiet, fully rendered page: no news/update toasts over the
# notebook, and every cell kept in the DOM (no windowing), so the widget is there to find.
LAB_SETTINGS = {
    "@jupyterlab/apputils-extension/notification.jupyterlab-settings": {"fetchNews": "false", "checkForUpdates": False},
    "@jupyterlab/notebook-extension/tracker.jupyterlab-settings": {"windowingMode": "none"},
}


def _chromium() -> str | None:
    for candidate in (os.environ.get("CHROMIUM"), "/usr/bin/chromium", shutil.which("chromium"), shutil.which("chromium-browser")):
        if candidate and Path(candidate).is_file() and os.access(candidate, os.X_OK):
            return candidate
    return None


@pytest.fixture(scope="session")
def chromium_path() -> str:
    path = _chromium()
    if path is None:
        pytest.skip(f"browser test needs Chromium (/usr/bin/chromium, or set CHROMIUM=...); {SETUP_HINT}")
    return path


@pytest.fixture(scope="session")
def sync_playwright():
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        pytest.skip(f"browser test needs the Playwright Python package; {SETUP_HINT}")
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

    def lab_url(self, notebook: str) -> str:
        # ?reset: start from an empty workspace, whatever a previous session left.
        return f"{self.url}/lab/tree/{notebook}?reset&token={self.token}"


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

    Config, runtime and settings directories are temporary, the token is random,
    and the server runs in its own process group so that its kernels go with it.
    """
    root = tmp_path / "root"
    root.mkdir()
    settings = tmp_path / "lab-settings"
    for name, values in LAB_SETTINGS.items():
        target = settings / name
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(json.dumps(values), encoding="utf-8")
    port, token = free_port(), secrets.token_hex(16)
    env = {
        **os.environ,
        "JUPYTER_CONFIG_DIR": str(tmp_path / "jupyter-config"),
        "JUPYTER_RUNTIME_DIR": str(tmp_path / "jupyter-runtime"),
        "IPYTHONDIR": str(tmp_path / "ipython"),
        "TRANSFORMER_LESSONS_MODE": "quick",
    }
    env.pop("MPLBACKEND", None)  # let %matplotlib inline choose, as for a learner
    log = tmp_path / "jupyterlab.log"
    command = [
        sys.executable, "-m", "jupyter", "lab",
        "--no-browser", "--allow-root",
        "--ServerApp.ip=127.0.0.1", f"--ServerApp.port={port}", "--ServerApp.port_retries=0",
        f"--IdentityProvider.token={token}", f"--ServerApp.root_dir={root}",
        f"--LabApp.user_settings_dir={settings}", f"--LabApp.workspaces_dir={tmp_path / 'lab-workspaces'}",
        "--LabApp.news_url=None", "--LabApp.check_for_updates_class=jupyterlab.NeverCheckForUpdate",
    ]
    with log.open("w") as log_file:
        proc = subprocess.Popen(command, env=env, stdout=log_file, stderr=subprocess.STDOUT, start_new_session=True)
    try:
        url = f"http://127.0.0.1:{port}"
        _wait_until_up(url, token, proc, log)
        yield LabServer(url=url, token=token, root_dir=root, log=log)
    finally:
        _stop(proc)


def _stop(proc: subprocess.Popen) -> None:
    """SIGTERM the server's process group (server and kernels), SIGKILL what is left."""
    if proc.poll() is None:
        try:
            os.killpg(proc.pid, signal.SIGTERM)
            proc.wait(timeout=SERVER_STOP_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            pass
        except ProcessLookupError:
            return
    try:
        os.killpg(proc.pid, signal.SIGKILL)  # kernels that outlived the server
    except (ProcessLookupError, PermissionError):
        pass
    if proc.poll() is None:
        proc.wait(timeout=SERVER_STOP_TIMEOUT_S)
