"""Tests of transformer_lessons.pretrained: finding, checking and downloading the course's model.

Everything here is offline: the "course's model" is a tiny random Transformer exported
like the real one, the clone and the cache are temporary folders, and the internet is
a fake ``urlopen`` that serves chosen bytes (or fails, as offline).
"""

from __future__ import annotations

import hashlib
import importlib.metadata
import io
import json
import re
import urllib.error
import urllib.request
from pathlib import Path

import pytest
import torch

from transformer_lessons import pretrained
from transformer_lessons.config import ModelConfig
from transformer_lessons.data import SPECIALS, Vocab
from transformer_lessons.model import Transformer
from transformer_lessons.pretrained import PretrainedError, course_model_file, load_course_model
from transformer_lessons.checkpoint import CHECKPOINT_FORMAT, CHECKPOINT_VERSION, export_for_inference

ROOT = Path(__file__).resolve().parents[1]
METRICS = {
    "test_2016_flickr": {"bleu": 12.345, "signature": "nrefs:1|case:mixed|eff:no|tok:13a|smooth:exp|version:2.6.0"}
}
HISTORY = [{"epoch": 1, "train_loss": 5.0, "val_bleu": None}]


def write_fake_course_model(path: Path) -> bytes:
    """Export a tiny random Transformer to ``path`` the way the course's model is made; returns its bytes."""
    torch.manual_seed(0)
    config = ModelConfig(n_layers=1, d_model=16, n_heads=2, d_ff=32, dropout=0.0, max_len=32, tie_embeddings=True)
    src = Vocab([*SPECIALS, "ein", "hund", "eine", "frau", "."])
    tgt = Vocab([*SPECIALS, "a", "dog", "woman", "."])
    model = Transformer(config, len(src), len(tgt))
    best = path.with_name("best.pt")
    ckpt = {"format": CHECKPOINT_FORMAT, "version": CHECKPOINT_VERSION, "model_config": config.to_dict()}
    ckpt.update(src_vocab=src.to_dict(), tgt_vocab=tgt.to_dict(), model=model.state_dict(), step=1, epoch=1)
    path.parent.mkdir(parents=True, exist_ok=True)
    torch.save(ckpt, best)
    export_for_inference(best, path)
    best.unlink()
    return path.read_bytes()


class FakeResponse(io.BytesIO):
    """What ``urlopen`` returns: a readable, closable body with headers."""

    def __init__(self, data: bytes):
        super().__init__(data)
        self.headers = {"Content-Length": str(len(data))}


class FakeInternet:
    """A stand-in for ``urllib.request.urlopen`` serving ``files`` (url -> bytes); anything else fails as offline."""

    def __init__(self, files: dict[str, bytes] | None = None):
        self.files = files or {}
        self.calls: list[str] = []

    def __call__(self, url, timeout=None):
        self.calls.append(url)
        if url in self.files:
            return FakeResponse(self.files[url])
        raise urllib.error.URLError("[Errno -3] Temporary failure in name resolution")


def no_course_model_anywhere(monkeypatch, tmp_path: Path) -> FakeInternet:
    """An empty clone, an empty cache, no ``$TRANSFORMER_LESSONS_MODEL`` and no internet."""
    monkeypatch.setattr(pretrained, "CHECKOUT", tmp_path / "clone")
    monkeypatch.setenv("TRANSFORMER_LESSONS_CACHE", str(tmp_path / "cache"))
    monkeypatch.delenv(pretrained.MODEL_ENV, raising=False)
    internet = FakeInternet()
    monkeypatch.setattr(urllib.request, "urlopen", internet)
    return internet


@pytest.fixture(scope="module")
def fake_model(tmp_path_factory) -> bytes:
    return write_fake_course_model(tmp_path_factory.mktemp("fake") / "model_fp16.pt")


@pytest.fixture
def setting(monkeypatch, tmp_path, fake_model) -> FakeInternet:
    """Nothing anywhere yet, and the course's model is the fake one (by its SHA-256)."""
    monkeypatch.setattr(pretrained, "COURSE_MODEL_SHA256", hashlib.sha256(fake_model).hexdigest())
    return no_course_model_anywhere(monkeypatch, tmp_path)


def put(folder: Path, model: bytes, companions: bool = True) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "model_fp16.pt").write_bytes(model)
    if companions:
        (folder / "metrics.json").write_text(json.dumps(METRICS))
        (folder / "history.json").write_text(json.dumps(HISTORY))
    return folder / "model_fp16.pt"


def test_the_repository_copy_is_found_checked_and_translates(setting, fake_model):
    path = put((pretrained.CHECKOUT / pretrained.COURSE_MODEL_PATH).parent, fake_model)
    course = load_course_model(device="cpu", progress=False)
    assert course.path == path and setting.calls == [], "a clone needs no network"
    assert not course.model.training and course.metrics == METRICS and course.history == HISTORY
    assert len(course.src_vocab) == 9 and course.info["epoch"] == 1
    texts = course.translate(["ein hund .", "eine frau ."], beam_size=1, device="cpu")
    assert isinstance(texts, list) and len(texts) == 2 and all(isinstance(t, str) for t in texts)
    line = course.describe()
    sha = pretrained.COURSE_MODEL_SHA256
    assert line.startswith("the course's model ") and f"sha256 {sha[:8]}" in line and "test BLEU 12.35" in line


@pytest.mark.parametrize("damage", ["truncated", "lfs pointer"])
def test_a_corrupt_repository_copy_is_reported_not_used(setting, fake_model, damage):
    data = (
        fake_model[:1000]
        if damage == "truncated"
        else b"version https://git-lfs.github.com/spec/v1\noid sha256:abc\nsize 123\n"
    )
    path = put((pretrained.CHECKOUT / pretrained.COURSE_MODEL_PATH).parent, data)
    put(pretrained.cached_copy().parent, fake_model)  # a good copy elsewhere does not hide the problem
    with pytest.raises(PretrainedError) as info:
        course_model_file(progress=False)
    message = str(info.value)
    assert (
        f"{path} is corrupt" in message
        and hashlib.sha256(data).hexdigest() in message
        and pretrained.COURSE_MODEL_SHA256 in message
    )
    assert f"git checkout -- {pretrained.COURSE_MODEL_PATH}" in message and "delete it" in message
    assert ("git lfs pull" in message) == (damage == "lfs pointer")
    assert setting.calls == []


def test_a_good_cached_copy_is_used_without_network(setting, fake_model):
    path = put(pretrained.cached_copy().parent, fake_model)
    course = load_course_model(device="cpu", progress=False)
    assert course.path == path and course.metrics == METRICS and course.history == HISTORY
    assert setting.calls == [], "urlopen was not called"


def test_a_corrupt_cached_copy_is_deleted_and_downloaded_again(setting, fake_model):
    path = put(pretrained.cached_copy().parent, fake_model[:-10])  # its old metrics go with it
    url = pretrained.raw_url(pretrained.COURSE_MODEL_PATH)
    setting.files = {url: fake_model, pretrained._companion_url("metrics.json"): json.dumps(METRICS).encode()}
    with pytest.warns(UserWarning, match="deleting it and downloading again"):
        assert course_model_file(progress=False) == path
    assert path.read_bytes() == fake_model and setting.calls[0] == url
    assert json.loads((path.parent / "metrics.json").read_text()) == METRICS
    assert not (path.parent / "history.json").exists(), "a companion that cannot be fetched is simply missing"
    course = load_course_model(device="cpu", progress=False)  # tries history.json once more, no crash
    assert course.metrics == METRICS and course.history is None


def test_a_download_with_the_wrong_bytes_is_not_kept(setting):
    url = pretrained.raw_url(pretrained.COURSE_MODEL_PATH)
    setting.files = {url: b"an HTML error page, say"}
    with pytest.raises(PretrainedError, match=f"downloaded from {re.escape(url)} has SHA-256 .* it was not kept"):
        course_model_file(progress=False)
    folder = pretrained.cached_copy().parent
    assert not folder.exists() or list(folder.iterdir()) == [], "no model, no .part file"


def test_offline_with_no_copy_gives_one_clear_message(setting):
    with pytest.raises(PretrainedError) as info:
        load_course_model(device="cpu", progress=False)
    message = str(info.value)
    url = pretrained.raw_url(pretrained.COURSE_MODEL_PATH)
    assert message.startswith(f"could not download the course's model from {url} (") and "\n" not in message
    assert (
        str(pretrained.cached_copy()) in message
        and f"{pretrained.MODEL_ENV}=" in message
        and "train --preset quick" in message
    )
    assert list(pretrained.cached_copy().parent.iterdir()) == []


def test_the_model_env_variable_is_used_as_is_and_must_exist(setting, monkeypatch, tmp_path):
    own = tmp_path / "mine.pt"
    monkeypatch.setenv(pretrained.MODEL_ENV, str(own))
    with pytest.raises(
        PretrainedError, match=f"{pretrained.MODEL_ENV}={re.escape(str(own))} but there is no file there"
    ):
        course_model_file()
    own.write_bytes(b"my own export, another SHA-256")
    with pytest.raises(PretrainedError) as error:  # not a model at all: said naming the variable, at once
        course_model_file()
    message = str(error.value)
    assert message.startswith(f"{pretrained.MODEL_ENV}={own}: ") and "unset it to use the course's model" in message
    torch.save(torch.nn.Linear(2, 2).state_dict(), own)  # a plain state_dict: loadable by torch, not a course model
    with pytest.raises(PretrainedError, match=re.escape(f"{pretrained.MODEL_ENV}={own}: ")):
        course_model_file()
    own.write_bytes(write_fake_course_model(tmp_path / "export.pt"))  # a model the course saved: used as it is
    assert course_model_file() == own and setting.calls == []
    assert not pretrained.describe(own).startswith("the course's model")


def test_the_download_address_comes_from_pyproject(monkeypatch):
    tomllib = pytest.importorskip("tomllib")  # Python >= 3.11
    repository = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]["urls"]["Repository"]
    owner, repo = repository.rstrip("/").split("/")[-2:]
    expected = f"https://raw.githubusercontent.com/{owner}/{repo}/main/{pretrained.COURSE_MODEL_PATH}"
    assert pretrained.raw_url(pretrained.COURSE_MODEL_PATH) == expected

    def not_installed(name):
        raise importlib.metadata.PackageNotFoundError(name)

    monkeypatch.setattr(importlib.metadata, "metadata", not_installed)
    assert pretrained.raw_url(pretrained.COURSE_MODEL_PATH) == expected, "a clone without metadata reads pyproject.toml"
    monkeypatch.setattr(pretrained, "CHECKOUT", ROOT / "nowhere")
    with pytest.raises(PretrainedError, match=r"\[project.urls\] Repository"):
        pretrained.raw_url(pretrained.COURSE_MODEL_PATH)


def test_describe_gives_the_16_bit_files_own_score_when_it_differs(tmp_path, fake_model):
    path = put(tmp_path / "run", fake_model)  # metrics.json: test BLEU 12.35 (the float32 model's)
    scores = {"checkpoint": "results/run/model_fp16.pt", "scores": {"test_2016_flickr": {"bleu": 12.31}}}
    (path.parent / "other_tests.json").write_text(json.dumps(scores))
    assert "test BLEU 12.35 in float32; this file: 12.31" in pretrained.describe(path)
    scores["scores"]["test_2016_flickr"]["bleu"] = 12.349  # the same to two decimals: one number
    (path.parent / "other_tests.json").write_text(json.dumps(scores))
    assert "test BLEU 12.35)" in pretrained.describe(path)
