"""Shared fixtures for the unit tests: every test starts from the same seed."""

from __future__ import annotations

import pytest
import torch


# The tensors here are tiny: one thread is as fast, and far steadier on a busy 2-core machine.
torch.set_num_threads(1)


@pytest.fixture(autouse=True)
def _seed() -> None:
    # Each test is reproducible on its own, whatever ran before it.
    torch.manual_seed(0)
