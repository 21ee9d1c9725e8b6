"""Start JupyterLab on the course: ``python -m transformer_lessons lab`` (what ``make learn`` runs).

One command for Linux, macOS and Windows, so that a machine without ``make`` has the same route:

- JupyterLab's root is the course folder, so that ``learner/`` and ``notebooks/`` are both reachable (a learner
  notebook's banner links to its solution in ``../notebooks/``); it opens on ``learner/`` (``notebooks/`` with
  ``--solutions``).
- Kernels talk to JupyterLab over local sockets (``ipc``) where the system has them (Linux, macOS), which nothing
  else on the network can read: JupyterLab's kernels then print no "running over TCP without encryption" warning.
  On Windows it stays TCP on the loopback address, the only transport there, and so does a machine whose Jupyter
  runtime folder has so long a path that a socket's would not fit (about 100 bytes).
- As root (a container, a VM), ``--allow-root``, with one line saying why.
- The course's JupyterLab settings (``jupyter/lab-settings.json``: no news prompt, no update check) are copied into
  this environment's JupyterLab defaults first, as ``make setup`` does, where they are missing or out of date.

Everything after the options goes to ``jupyter lab`` as it is (``--port 8890``, ``--no-browser``, ...).
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import Sequence

from transformer_lessons.errors import CourseError
from transformer_lessons.rundir import course_root

FOLDERS = ("learner", "notebooks")  # what a course folder holds; the first is where a learner starts
ROOT_NOTE = "you are root (a container or VM?), so JupyterLab starts with --allow-root"


def lab_root(start: str | Path | None = None) -> Path:
    """The course folder to open: the clone holding ``start`` (default: the current folder; :func:`.rundir.course_root`),
    else the clone this package was installed from (an editable install); CourseError if neither is one."""
    for candidate in (start, Path(__file__).resolve().parent.parent):
        root = course_root(candidate)
        if root is not None and all((root / name).is_dir() for name in FOLDERS):
            return root
    raise CourseError(
        f"{Path.cwd() if start is None else start} is not in the course folder (the one with learner/ and notebooks/): "
        "change to the folder you cloned or unpacked the course into, then run the same command"
    )


#: Room for a kernel's socket path: Linux allows 107 bytes, macOS 103; ipc only where the longest of them fits.
SOCKET_PATH_MAX = 100
_LONGEST_SOCKET = "kernel-00000000-0000-0000-0000-000000000000-ipc-5"  # jupyter_client's names: <connection file>-ipc-N


def ipc_fits(runtime_dir: str | Path | None = None) -> bool:
    """Whether kernel sockets in Jupyter's runtime folder (``runtime_dir``, default: ``jupyter --runtime-dir``) have
    short enough paths; a longer one (a long home folder) would stop every kernel from starting, so TCP is used."""
    if runtime_dir is None:
        try:
            from jupyter_core.paths import jupyter_runtime_dir
        except ImportError:
            return False
        runtime_dir = jupyter_runtime_dir()
    return len(os.fsencode(os.path.join(os.path.abspath(runtime_dir), _LONGEST_SOCKET))) <= SOCKET_PATH_MAX


def running_as_root() -> bool:
    """True for the root user on Linux or macOS (never on Windows, which has no such user)."""
    return hasattr(os, "geteuid") and os.geteuid() == 0


def lab_command(
    root: str | Path,
    *,
    solutions: bool = False,
    extra: Sequence[str] = (),
    python: str = sys.executable,
    as_root: bool | None = None,
    os_name: str = os.name,
    runtime_dir: str | Path | None = None,
) -> list[str]:
    """The ``jupyter lab`` command line: rooted at ``root``, opened on ``learner/`` (``notebooks/`` with
    ``solutions``), ``ipc`` kernels where ``os_name`` is ``"posix"`` and their sockets' paths fit (:func:`ipc_fits`),
    ``--allow-root`` for root, then ``extra``."""
    folder = FOLDERS[1] if solutions else FOLDERS[0]
    command = [
        python,
        "-m",
        "jupyter",
        "lab",
        f"--ServerApp.root_dir={Path(root)}",
        f"--LabApp.default_url=/lab/tree/{folder}",
    ]
    if os_name == "posix" and ipc_fits(runtime_dir):
        command.append("--KernelManager.transport=ipc")
    if running_as_root() if as_root is None else as_root:
        command.append("--allow-root")
    return command + list(extra)


SETTINGS = Path("jupyter") / "lab-settings.json"  # in the course folder
#: Where JupyterLab reads defaults that a learner can still change (jupyterlab_server's settings_utils): the Makefile's
#: LAB_SETTINGS is the same file.
SETTINGS_TARGET = Path("share") / "jupyter" / "lab" / "settings" / "overrides.d" / "transformer-lessons.json"


def install_lab_settings(root: str | Path, prefix: str | Path = sys.prefix) -> Path | None:
    """Copy the course's JupyterLab settings into ``prefix`` (this environment) unless they are there already;
    the file written, or None when nothing was to do. A read-only environment gets one line, and JupyterLab starts
    with its own defaults."""
    source, target = Path(root) / SETTINGS, Path(prefix) / SETTINGS_TARGET
    if not source.is_file():
        return None
    wanted = source.read_bytes()
    try:
        if target.is_file() and target.read_bytes() == wanted:
            return None
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(wanted)
    except OSError as err:
        print(
            f"note: the course's JupyterLab settings could not be installed ({err.strerror or err}): JupyterLab may "
            "ask about news and check for updates"
        )
        return None
    return target


def launch(solutions: bool = False, extra: Sequence[str] = ()) -> int:
    """Start JupyterLab on the course folder and wait for it; its exit status."""
    root = lab_root()
    install_lab_settings(root)
    command = lab_command(root, solutions=solutions, extra=extra)
    if "--allow-root" in command[: len(command) - len(extra)]:
        print(ROOT_NOTE)
    sys.stdout.flush()
    if os.name == "posix":  # JupyterLab takes this process's place: its own Ctrl-C question, nothing of ours after
        os.execv(command[0], command)
    previous = signal.signal(signal.SIGINT, signal.SIG_IGN)  # Windows: Ctrl-C is JupyterLab's to answer
    try:
        return subprocess.call(command)
    finally:
        signal.signal(signal.SIGINT, previous)


__all__ = ["FOLDERS", "install_lab_settings", "ipc_fits", "lab_command", "lab_root", "launch", "running_as_root"]
