"""Notebook 00's setup check: what this machine has for the course, one line each.

``setup_check()`` prints the versions of Python, PyTorch and this package, whether a GPU is there (none is
needed), the compute mode, and where the Multi30k data is: found, partly there, or not downloaded yet (and then
whether the dataset's repository can be reached). It lives here so that the learner's first cell is two lines,
not sixty, and so that tests can run it.
"""

from __future__ import annotations

import platform
import urllib.request

import torch

from transformer_lessons import data
from transformer_lessons.config import compute_mode

# The course uses three splits; the other test sets are optional extras.
COURSE_SPLITS = ("train", "val", "test_2016_flickr")


def gpu_status() -> str:
    if torch.cuda.is_available():
        return f"yes: {torch.cuda.get_device_name(0)}"
    if getattr(torch.backends, "mps", None) is not None and torch.backends.mps.is_available():
        return "Apple GPU (MPS) available; the notebooks use the CPU unless told otherwise"
    return "none (fine: every notebook runs on a CPU in the quick mode)"


def multi30k_status(reachable=None) -> str:
    """Where the loader finds the data, in its order: TRANSFORMER_LESSONS_DATA's folder, then the cache.

    ``reachable`` (for tests): a function returning :func:`download_status`'s line; by default it asks the network.
    """
    expected = [data.file_name(split, lang) for split in COURSE_SPLITS for lang in data.LANGS]
    local = data.resolve_data_dir()
    folder = local if local is not None else data.cache_dir()
    found = [name for name in expected if (folder / name).is_file()]
    named = f"folder set by {data.DATA_ENV}" if local is not None else "cache"
    if len(found) == len(expected):
        return f"found, in the {named}"
    where = f"{named} ({folder})"  # where to look when something is missing
    if found:
        return f"partly there: {len(found)} of {len(expected)} files in the {where}; notebook 08 fetches the rest"
    if local is not None:
        return f"not found in the {where}: check the folder, or unset the variable to download"
    return f"not downloaded yet; {(reachable or download_status)()}"


def download_status(timeout: float = 5.0) -> str:
    """One small request (headers only) to where notebook 08 downloads the files from."""
    url = data.URL_TEMPLATE.format(split="val", lang="de")
    try:
        with urllib.request.urlopen(urllib.request.Request(url, method="HEAD"), timeout=timeout):
            return "the dataset's repository is reachable: notebook 08 downloads it into the cache"
    except OSError as error:
        return (
            f"the dataset's repository is NOT reachable ({error}). Without a network, prepare the course folder on a "
            "machine that has one (make classroom, see the teacher's guide), or copy the .gz files into a folder and "
            f"set {data.DATA_ENV} to it (the README's Data section)"
        )


def setup_lines(reachable=None) -> list[str]:
    """One line each: Python, PyTorch, this package, a GPU, the compute mode, Multi30k."""
    import transformer_lessons

    lines = [
        f"Python              {platform.python_version()}",
        f"PyTorch             {torch.__version__}",
        f"transformer_lessons {transformer_lessons.__version__}",
        f"GPU                 {gpu_status()}",
        f"compute mode        {compute_mode()}",
        f"Multi30k data       {multi30k_status(reachable)}",
    ]
    return lines


def setup_check(reachable=None) -> None:
    """Print :func:`setup_lines`: what notebook 00's first cell shows."""
    for line in setup_lines(reachable):
        print(line)


__all__ = ["download_status", "gpu_status", "multi30k_status", "setup_check", "setup_lines"]
