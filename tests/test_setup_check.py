"""Notebook 00's setup check (transformer_lessons.setup_check): six lines, and the data line says where and what to do."""

from __future__ import annotations

import urllib.request


from transformer_lessons import data, setup_check
from transformer_lessons.setup_check import COURSE_SPLITS, multi30k_status


def _files(folder, n=None):
    names = [data.file_name(split, lang) for split in COURSE_SPLITS for lang in data.LANGS]
    for name in names[:n]:
        (folder / name).write_bytes(b"")
    return names


def test_the_check_prints_six_lines_with_the_versions(capsys, monkeypatch, tmp_path):
    import torch

    import transformer_lessons

    _files(tmp_path)
    monkeypatch.setenv(data.DATA_ENV, str(tmp_path))
    setup_check.setup_check()
    lines = setup_check.setup_lines()
    assert capsys.readouterr().out.splitlines() == lines and len(lines) == 6
    assert lines[1].endswith(torch.__version__) and lines[2].endswith(transformer_lessons.__version__)
    assert lines[5] == f"Multi30k data       found, in the folder set by {data.DATA_ENV}"


def test_the_data_line_for_a_folder_partly_filled_or_empty(monkeypatch, tmp_path):
    monkeypatch.setenv(data.DATA_ENV, str(tmp_path))
    assert multi30k_status().startswith(f"not found in the folder set by {data.DATA_ENV} ({tmp_path})")
    assert "unset the variable" in multi30k_status()
    _files(tmp_path, n=2)
    assert (
        multi30k_status().startswith("partly there: 2 of 6 files")
        and "notebook 08 fetches the rest" in multi30k_status()
    )


def test_nothing_downloaded_asks_the_network_once_and_says_what_to_do_offline(monkeypatch, tmp_path):
    monkeypatch.delenv(data.DATA_ENV, raising=False)
    monkeypatch.setenv("TRANSFORMER_LESSONS_CACHE", str(tmp_path / "empty-cache"))
    asked = []

    def offline(request, timeout):
        asked.append((request.get_method(), request.full_url))
        raise urllib.error.URLError("no network")

    monkeypatch.setattr(urllib.request, "urlopen", offline)
    line = multi30k_status()
    assert line.startswith("not downloaded yet; the dataset's repository is NOT reachable")
    assert "make classroom" in line and data.DATA_ENV in line
    assert asked == [("HEAD", data.URL_TEMPLATE.format(split="val", lang="de"))]
    assert multi30k_status(reachable=lambda: "asked") == "not downloaded yet; asked"


def test_no_gpu_is_fine(monkeypatch):
    import torch

    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    monkeypatch.setattr(torch.backends.mps, "is_available", lambda: False)
    assert setup_check.gpu_status() == "none (fine: every notebook runs on a CPU in the quick mode)"
