"""Shared fixtures for the unit tests: every test starts from the same seed; ``no_network`` cuts the network."""

from __future__ import annotations

import errno
import os
import socket
import tempfile

import pytest
import torch


# Every check records its verdict (transformer_lessons.learner_progress): the tests, and the notebooks' kernels
# that nbval starts from this process, write theirs to a file of their own, never to the learner's record.
os.environ["TRANSFORMER_LESSONS_PROGRESS"] = os.path.join(tempfile.mkdtemp(prefix="tl-progress-"), "progress.json")

# The tensors here are tiny: one thread is as fast, and far steadier on a busy 2-core machine.
torch.set_num_threads(1)


@pytest.fixture(autouse=True)
def _seed() -> None:
    # Each test is reproducible on its own, whatever ran before it.
    torch.manual_seed(0)


@pytest.fixture
def no_network(monkeypatch):
    """Every connection and name lookup fails at once, as on a machine without network."""

    def refuse(*args, **kwargs):
        raise OSError(errno.ENETUNREACH, "the network is off in this test")

    monkeypatch.setattr(socket.socket, "connect", refuse)
    monkeypatch.setattr(socket.socket, "connect_ex", refuse)
    monkeypatch.setattr(socket, "getaddrinfo", refuse)


def pytest_generate_tests(metafunc):
    """A test of ``check_tables.py`` (marked by its ``table`` decorator) runs once per key of the importing file's table."""
    marked = getattr(metafunc.function, "table", None)
    if marked is not None:
        name, argument = marked
        metafunc.parametrize(argument, list(getattr(metafunc.module, name)))
