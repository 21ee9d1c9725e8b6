"""The raw Multi30k files: where they come from, and how we know they are right.

:func:`fetch` gets one raw file from a local directory, the cache, or the
internet, and checks its SHA-256 against :data:`SHA256`; :func:`load_split`
reads a split as ``(de, en)`` sentence pairs. The files are never edited: a
truncated download or a changed copy is refused, with a message that says
where to get a good one.

Where files live:

- ``$TRANSFORMER_LESSONS_DATA`` (or ``data_dir=``): a folder you filled with
  the ``.gz`` files; read only, nothing is downloaded or written.
- ``$TRANSFORMER_LESSONS_CACHE``: downloads, and the tokenized splits of
  :mod:`transformer_lessons.data.corpus`. Unset, it is ``classroom/cache`` in a
  course folder prepared for a classroom (``python -m transformer_lessons
  classroom``, see :mod:`transformer_lessons.classroom`), so that copying the
  folder copies the data; else ``~/.cache/transformer_lessons``.

Dataset: Elliott et al. (2016), "Multi30K: Multilingual English-German Image
Descriptions", task 1.
"""

from __future__ import annotations

import gzip
import hashlib
import json
import os
import urllib.request
import warnings
from pathlib import Path

from transformer_lessons.atomic import atomic_write
from transformer_lessons.errors import DataError
from transformer_lessons.rundir import course_root

URL_TEMPLATE = "https://raw.githubusercontent.com/multi30k/dataset/master/data/task1/raw/{split}.{lang}.gz"
SPLITS = ("train", "val", "test_2016_flickr", "test_2017_flickr", "test_2018_flickr", "test_2017_mscoco")
LANGS = ("de", "en")

#: Sentences per split (each ``.de`` file has as many lines as its ``.en`` file).
SPLIT_SIZES = {
    "train": 29000,
    "val": 1014,
    "test_2016_flickr": 1000,
    "test_2017_flickr": 1000,
    "test_2018_flickr": 1071,
    "test_2017_mscoco": 461,
}

#: SHA-256 of every raw file, so a truncated download or an edited copy is never used.
SHA256 = {
    "test_2016_flickr.de.gz": "9204244e408ccb38d2a55cfcd344df15005fc42a07a6e55ca6c52b6ababb8cc8",
    "test_2016_flickr.en.gz": "611d361c6334bc7246101d48097c13cf5c4413c5befc793cc629934359d532d9",
    "test_2017_flickr.de.gz": "a2c89666db00c495cd8513b9d708d5a3acc205d7de312ef2bf5fb7ebc1540aee",
    "test_2017_flickr.en.gz": "76a444ee25172e72695cddb13ae4a3bda59430617be88e0bb46b60504f054074",
    "test_2017_mscoco.de.gz": "799e4854c25d601cb6cb6be29eabe5667734c61ace2f495e03e429031a0bc338",
    "test_2017_mscoco.en.gz": "aab300bfb4427697987e02cd0aacd44bfe8aa50456231b6474c08038bbed2b58",
    "test_2018_flickr.de.gz": "ddd0130c7d97482dc5197a02141dae8dd79f20f03586c480d675c09a32daf608",
    "test_2018_flickr.en.gz": "ef4f4844037d4c5dea75c9a8ed5fd78905967a26f67c255e230cc9780032654d",
    "train.de.gz": "726e39b2fa9eb9ffb6dc763fb35a179f80fae06ffc5d28b6ace5faa883de28a6",
    "train.en.gz": "d79cfa999dd4c51d2cb42499b6796d5a882c3a8a961923c25a898c90f8bbd56f",
    "val.de.gz": "f0cba2f995189cf5770f29a8a9a537a3ad3f51657ad873405082ff6863a5e75a",
    "val.en.gz": "14f7d25ddd868909a9213e361768460edcacdd6ab9d1e77b92560dc10c10dc28",
}

DATA_ENV = "TRANSFORMER_LESSONS_DATA"  # a directory holding the raw .gz files (no download)
CACHE_ENV = "TRANSFORMER_LESSONS_CACHE"  # where downloads and tokenized corpora are kept
#: The cache of a course folder prepared for a classroom with no network, relative to the folder's top.
CLASSROOM_CACHE = Path("classroom") / "cache"
PREPARE_COMMAND = "python -m transformer_lessons classroom"  # what fills CLASSROOM_CACHE (make classroom)
DOWNLOAD_TIMEOUT_S = 30.0


# --------------------------------------------------------------------------------------
# Names and places
# --------------------------------------------------------------------------------------


def file_name(split: str, lang: str) -> str:
    """``("val", "de")`` -> ``"val.de.gz"``, the name used in the repository and the cache."""
    if split not in SPLITS:
        raise ValueError(f"unknown split {split!r}; choose one of {', '.join(SPLITS)}")
    if lang not in LANGS:
        raise ValueError(f"unknown language {lang!r}; Multi30k task 1 has {' and '.join(LANGS)}")
    return f"{split}.{lang}.gz"


def sha256_file(path: str | os.PathLike) -> str:
    """Hex SHA-256 of a file's bytes."""
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()


def resolve_data_dir(data_dir: str | os.PathLike | None = None) -> Path | None:
    """The local directory to read raw files from, or ``None`` to use the cache/download.

    The ``data_dir`` argument wins; else the environment variable
    ``TRANSFORMER_LESSONS_DATA`` if it is set and non-empty; else ``None``.
    """
    if data_dir is not None and str(data_dir) != "":
        return Path(data_dir).expanduser()
    env = os.environ.get(DATA_ENV, "").strip()
    return Path(env).expanduser() if env else None


def classroom_cache() -> Path | None:
    """``classroom/cache`` of the course folder holding the current directory, if it was prepared; else ``None``."""
    root = course_root()
    return root / CLASSROOM_CACHE if root is not None and (root / CLASSROOM_CACHE).is_dir() else None


def cache_dir() -> Path:
    """Where downloads and tokenized splits are kept (not created here).

    ``$TRANSFORMER_LESSONS_CACHE``; else the prepared ``classroom/cache`` of the
    course folder we are in (:func:`classroom_cache`); else ``~/.cache/transformer_lessons``.
    """
    env = os.environ.get(CACHE_ENV, "").strip()
    if env:
        return Path(env).expanduser()
    return classroom_cache() or user_cache_dir()


def user_cache_dir() -> Path:
    """This user's own cache: ``$TRANSFORMER_LESSONS_CACHE``, else ``~/.cache/transformer_lessons``; never a course
    folder's ``classroom/cache``, which every copy of the folder shares (what belongs to one learner goes here)."""
    env = os.environ.get(CACHE_ENV, "").strip()
    return Path(env).expanduser() if env else Path.home() / ".cache" / "transformer_lessons"


def _url_of(name: str) -> str:
    split, lang = name.split(".")[:2]
    return URL_TEMPLATE.format(split=split, lang=lang)


def _where_to_put_files(name: str) -> str:
    return (
        f"To work offline, prepare this course folder on a machine with a network, with {PREPARE_COMMAND} "
        f"(make classroom), and copy the folder here; or download the Multi30k .gz files (this one: {_url_of(name)}) "
        f"into the cache {cache_dir()}, or into any folder and set {DATA_ENV}=<that folder> (or pass data_dir=<that folder>)."
    )


# --------------------------------------------------------------------------------------
# A local directory (read only)
# --------------------------------------------------------------------------------------


def _from_local_dir(directory: Path, name: str) -> Path:
    try:
        return _checked_local_file(directory, name)
    except PermissionError as err:  # a shared folder this user may not read: one line, with the ways out
        raise DataError(
            f"the data directory {directory} (from data_dir= or ${DATA_ENV}) cannot be read: {err.strerror} "
            f"({err.filename}). Ask for read access, or copy the Multi30k .gz files into a folder of your own and "
            f"point {DATA_ENV} at it, or unset {DATA_ENV} to download them."
        ) from err


def _checked_local_file(directory: Path, name: str) -> Path:
    if not directory.is_dir():
        where = (
            directory if directory.is_absolute() else f"{directory} (relative to the working directory {Path.cwd()})"
        )
        raise DataError(
            f"the data directory {where} does not exist or is not a directory (it came from data_dir= or ${DATA_ENV}). "
            f"Point it at a folder holding the Multi30k .gz files, or unset {DATA_ENV} to download them."
        )
    path = directory / name
    if not path.is_file():
        missing = sorted(n for n in SHA256 if not (directory / n).is_file())
        raise DataError(
            f"{name} is missing from the data directory {directory}. Missing there: {', '.join(missing)}. "
            f"Copy them in (they are at {URL_TEMPLATE}), or unset {DATA_ENV} / pass no data_dir to download them."
        )
    actual = sha256_file(path)
    if actual != SHA256[name]:
        raise DataError(
            f"{path} is corrupt or truncated: its SHA-256 is {actual}, expected {SHA256[name]}. "
            f"Replace it with a fresh copy from {_url_of(name)}."
        )
    return path


# --------------------------------------------------------------------------------------
# Downloading into the cache
# --------------------------------------------------------------------------------------


class _CacheWriteError(Exception):
    """Internal: writing into the cache failed, a local disk problem (the network was fine)."""

    def __init__(self, err: OSError):
        super().__init__(err)
        self.err = err


def _download(url: str, target: Path, progress: bool) -> str:
    """Stream ``url`` into ``target`` with :func:`~transformer_lessons.atomic.atomic_write`; return the bytes' SHA-256.

    The final name appears only after the whole file arrived, so an
    interrupted download never leaves a half file in the cache. Network
    failures raise ``OSError`` (``URLError``, timeouts, resets); failures to
    write the cache raise :class:`_CacheWriteError`.
    """
    from tqdm.auto import tqdm

    try:  # the disk, checked before the network is used
        target.parent.mkdir(parents=True, exist_ok=True)
    except OSError as err:
        raise _CacheWriteError(err) from err
    digest = hashlib.sha256()
    arrived = False  # set once the last byte is on disk: only the final rename can fail after that

    def write(tmp: Path) -> None:
        nonlocal arrived
        try:
            out = open(tmp, "wb")
        except OSError as err:
            raise _CacheWriteError(err) from err
        with out, urllib.request.urlopen(url, timeout=DOWNLOAD_TIMEOUT_S) as response:
            size = response.headers.get("Content-Length")
            bar = tqdm(
                total=int(size) if size else None, unit="B", unit_scale=True, desc=target.name, disable=not progress
            )
            with bar:
                for chunk in iter(lambda: response.read(1 << 16), b""):  # the network: OSError goes on
                    try:  # the disk
                        out.write(chunk)
                    except OSError as err:
                        raise _CacheWriteError(err) from err
                    digest.update(chunk)
                    bar.update(len(chunk))
            try:
                out.close()  # flushes the last bytes: a full disk may only show here
            except OSError as err:
                raise _CacheWriteError(err) from err
        arrived = True

    try:
        atomic_write(target, write)
    except OSError as err:
        if arrived:  # the rename into place
            raise _CacheWriteError(err) from err
        raise
    return digest.hexdigest()


def fetch(split: str, lang: str, data_dir: str | os.PathLike | None = None, progress: bool = True) -> Path:
    """Path of a verified raw file ``{split}.{lang}.gz``, downloading it if needed.

    With a local directory (``data_dir`` or ``$TRANSFORMER_LESSONS_DATA``) the
    file must be there and match its checksum; nothing is downloaded. Otherwise
    the cache (:func:`cache_dir`) is used, and a missing or corrupt cached copy
    is (re)downloaded from :data:`URL_TEMPLATE`.

    Args:
        split: one of :data:`SPLITS`.
        lang: ``"de"`` or ``"en"``.
        data_dir: a directory that holds the raw files (no network then).
        progress: show a progress bar while downloading.

    Raises:
        DataError: a local file is missing or corrupt, the download failed
            (offline) and there is no copy, the cache cannot hold the
            download, or the downloaded bytes are wrong.
    """
    name = file_name(split, lang)
    local = resolve_data_dir(data_dir)
    if local is not None:
        return _from_local_dir(local, name)

    path = cache_dir() / name
    if path.is_file():
        actual = sha256_file(path)
        if actual == SHA256[name]:
            return path
        warnings.warn(
            f"cached {path} is corrupt (SHA-256 {actual}, expected {SHA256[name]}); deleting it and downloading again",
            stacklevel=2,
        )
        path.unlink()

    url = URL_TEMPLATE.format(split=split, lang=lang)
    try:
        actual = _download(url, path, progress)
    except _CacheWriteError as err:  # the disk: an unwritable, full or misplaced cache directory
        raise DataError(
            f"could not save {name} in the cache directory {path.parent} ({err.err}); this is a problem with the local disk, "
            f"not the network. Make that directory writable (or free space on its disk), set {CACHE_ENV} to a writable "
            f"directory, or put the Multi30k files in any directory and set {DATA_ENV}=<that directory> (nothing is written then)."
        ) from err.err
    except OSError as err:  # the network: URLError/HTTPError, timeouts, resets
        reason = getattr(err, "reason", None) or err
        raise DataError(
            f"{name} (Multi30k) is not on this machine, and the course could not download it ({reason}): connect to the "
            f"internet (check any proxy) and run this again. {_where_to_put_files(name)}"
        ) from err
    if actual != SHA256[name]:
        path.unlink(missing_ok=True)
        raise DataError(
            f"the file downloaded from {url} has SHA-256 {actual}, expected {SHA256[name]}; it was not kept. "
            f"Try again later; if it persists the upstream file changed. {_where_to_put_files(name)}"
        )
    return path


# --------------------------------------------------------------------------------------
# Reading
# --------------------------------------------------------------------------------------


def _read_lines(path: Path) -> list[str]:
    with gzip.open(path, "rt", encoding="utf-8", newline="\n") as f:
        text = f.read()
    # split("\n"), not splitlines(): the latter also breaks at U+2028 and friends,
    # which would shift every later German line against its English translation.
    lines = text.split("\n")
    if lines and lines[-1] == "":
        lines.pop()
    return [line.strip() for line in lines]


def load_split(split: str, data_dir: str | os.PathLike | None = None, progress: bool = True) -> list[tuple[str, str]]:
    """The ``(german, english)`` sentence pairs of one split, each line stripped.

    Raises:
        DataError: the two files have different numbers of lines (plus anything
            :func:`fetch` raises).
    """
    de_path = fetch(split, "de", data_dir, progress)
    en_path = fetch(split, "en", data_dir, progress)
    de, en = _read_lines(de_path), _read_lines(en_path)
    if len(de) != len(en):
        raise DataError(
            f"{de_path} has {len(de)} lines but {en_path} has {len(en)}; line i of one must translate line i of the other"
        )
    return list(zip(de, en))


# --------------------------------------------------------------------------------------
# Saved JSON: vocabularies, corpora, tokenized splits
# --------------------------------------------------------------------------------------


def write_json(path: Path, data: dict) -> None:
    """Compact UTF-8 JSON, gzipped (reproducibly: no timestamp) when ``path`` ends in ``.gz``; all or nothing.

    Raises ``OSError`` when the file cannot be written; the caller decides
    whether that matters (a file you asked to save) or not (a cache).
    """
    payload = json.dumps(data, ensure_ascii=False, separators=(",", ":")).encode("utf-8")
    if path.suffix == ".gz":
        payload = gzip.compress(payload, compresslevel=5, mtime=0)
    atomic_write(path, lambda tmp: tmp.write_bytes(payload))


def read_json(path: Path, what: str) -> dict:
    try:
        raw = path.read_bytes()
        if raw[:2] == b"\x1f\x8b":  # gzip magic
            raw = gzip.decompress(raw)
        return json.loads(raw.decode("utf-8"))
    except FileNotFoundError as err:
        raise DataError(f"no {what} file at {path}") from err
    except (OSError, EOFError, UnicodeDecodeError, json.JSONDecodeError) as err:
        raise DataError(f"{path} is not a readable {what} file ({err}); delete it and create it again") from err
