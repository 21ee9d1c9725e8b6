"""The learner's progress: each check records pass / fail / stub locally, and progress() lists the course."""

from __future__ import annotations

import json
import os

import pytest

import transformer_lessons
from transformer_lessons import checks, exercises, learner_progress
from transformer_lessons.checks import ExerciseError


@pytest.fixture
def record_file(tmp_path, monkeypatch):
    path = tmp_path / "progress.json"
    monkeypatch.setenv(learner_progress.PROGRESS_ENV, str(path))
    monkeypatch.setattr(learner_progress, "_warned", set())
    return path


def right(blocked):
    return ~blocked


def wrong(blocked):
    return blocked.clone()


def stub(blocked):
    raise NotImplementedError("return the mask in the course's convention")


def status_of(name):
    return {row[1]: row[2] for row in transformer_lessons.progress().rows}[name]


def test_a_pass_a_failure_and_a_stub_are_recorded(record_file, capsys):
    assert status_of("mask_inversion") is None
    checks.check_mask_inversion(stub)
    assert status_of("mask_inversion") == "stub"
    with pytest.raises(ExerciseError):
        checks.check_mask_inversion(wrong)
    assert status_of("mask_inversion") == "fail"
    checks.check_mask_inversion(right)
    assert status_of("mask_inversion") == "pass"
    saved = json.loads(record_file.read_text(encoding="utf-8"))
    assert saved["exercises"]["mask_inversion"]["status"] == "pass" and saved["exercises"]["mask_inversion"]["when"]
    assert "progress" not in capsys.readouterr().out  # a record that works says nothing


def test_the_list_is_every_exercise_in_notebook_order_as_text_and_html(record_file):
    checks.check_mask_inversion(right)
    table = transformer_lessons.progress()
    assert [row[:2] for row in table.rows] == [(e.notebook, e.name) for e in exercises.EXERCISES]
    text = str(table)
    lines = text.splitlines()
    assert lines[0].split() == ["notebook", "exercise", "status", "when"]
    assert lines[1].startswith("00_roadmap_and_setup") and "mask_inversion" in lines[1] and "✔ passed" in lines[1]
    last = exercises.EXERCISES[-1].name  # the course's last exercise (notebook 15's auroc)
    assert last in lines[-2] and "not started" in lines[-2]
    n = len(exercises.EXERCISES)
    assert lines[-1] == f"1 of {n} exercises passed, 0 failed, 0 still a stub, {n - 1} not started"
    html = table._repr_html_()
    assert html.count("<tr>") == n + 1 and "✔ passed" in html and f"<code>{last}</code>" in html


def test_the_default_file_is_in_the_package_cache(monkeypatch, tmp_path):
    monkeypatch.delenv(learner_progress.PROGRESS_ENV, raising=False)
    monkeypatch.setenv("TRANSFORMER_LESSONS_CACHE", str(tmp_path / "cache"))
    assert learner_progress.progress_file() == tmp_path / "cache" / "progress.json"


def test_the_default_file_is_never_a_prepared_folders_shared_cache(monkeypatch, tmp_path):
    # In a folder prepared with `make classroom`, cache_dir() is its classroom/cache, copied to every learner: a
    # verdict written there (the teacher trying the solutions) would show as every learner's (issue 29).
    from transformer_lessons.data import files

    monkeypatch.delenv(learner_progress.PROGRESS_ENV, raising=False)
    monkeypatch.delenv("TRANSFORMER_LESSONS_CACHE", raising=False)
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    monkeypatch.setattr(files, "classroom_cache", lambda: tmp_path / "course" / "classroom" / "cache")
    assert files.cache_dir() == tmp_path / "course" / "classroom" / "cache"  # the data still comes from there
    assert learner_progress.progress_file() == tmp_path / "home" / ".cache" / "transformer_lessons" / "progress.json"


def test_a_progress_file_that_is_a_folder_gets_one_line_naming_the_way_out(tmp_path, monkeypatch, capsys):
    folder = tmp_path / "progress_here"
    folder.mkdir()
    monkeypatch.setenv(learner_progress.PROGRESS_ENV, str(folder))
    monkeypatch.setattr(learner_progress, "_warned", set())
    checks.check_mask_inversion(right)
    checks.check_mask_inversion(right)
    out = capsys.readouterr().out
    notes = [line for line in out.splitlines() if "progress not saved" in line]
    assert notes == [
        f"(progress not saved: {folder} is a folder; set {learner_progress.PROGRESS_ENV} to a file name, "
        f"such as {folder / 'progress.json'})"
    ], out
    assert out.count("✔ mask_inversion: correct") == 2 and list(folder.iterdir()) == []


WRITER = """
import sys
from transformer_lessons import learner_progress
for i in range(int(sys.argv[2])):
    learner_progress.record(f"{sys.argv[1]}_{i}", "pass")
"""


def test_two_kernels_recording_at_once_lose_no_verdict(record_file):
    # Without the lock, two processes reading, changing and rewriting the file lost 23 of 250 verdicts (issue 29).
    import subprocess
    import sys

    n = 60
    env = {**os.environ, learner_progress.PROGRESS_ENV: str(record_file)}
    writers = [
        subprocess.Popen([sys.executable, "-c", WRITER, name, str(n)], env=env) for name in ("first", "second", "third")
    ]
    assert [w.wait(timeout=300) for w in writers] == [0, 0, 0]
    kept = learner_progress._read(record_file)
    assert len(kept) == 3 * n, f"{3 * n - len(kept)} verdicts lost"
    assert (record_file.parent / "progress.json.lock").exists()


def test_the_lock_is_what_keeps_them(record_file, monkeypatch):
    """The same writers with the lock taken away lose verdicts: the test above can fail."""
    import threading

    monkeypatch.setattr(learner_progress, "try_lock", lambda handle: True)  # every writer "gets" it at once
    original = learner_progress._read

    def slow_read(path):
        found = original(path)
        threading.Event().wait(0.002)  # the gap between reading and rewriting, widened
        return found

    monkeypatch.setattr(learner_progress, "_read", slow_read)
    threads = [
        threading.Thread(target=lambda k=k: [learner_progress.record(f"t{k}_{i}", "pass") for i in range(20)])
        for k in range(4)
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(original(record_file)) < 80


def test_a_corrupt_file_costs_one_line_and_no_traceback(record_file, capsys):
    record_file.write_text("{ not json", encoding="utf-8")
    checks.check_mask_inversion(right)
    checks.check_mask_inversion(right)
    out = capsys.readouterr().out
    notes = [line for line in out.splitlines() if "progress" in line]
    assert len(notes) == 1 and "could not read" in notes[0] and "Traceback" not in out
    assert out.count("✔ mask_inversion: correct") == 2
    assert status_of("mask_inversion") == "pass"  # a new record replaced the broken one


@pytest.mark.parametrize("content", ['{"exercises": [1, 2]}', "[]", '{"version": 1}'])
def test_a_file_of_another_shape_is_read_as_empty(record_file, capsys, content):
    record_file.write_text(content, encoding="utf-8")
    assert all(row[2] is None for row in transformer_lessons.progress().rows)
    assert capsys.readouterr().out.count("could not read") == 1


def test_an_unwritable_file_never_breaks_a_check(tmp_path, monkeypatch, capsys):
    blocker = tmp_path / "a_file"
    blocker.write_text("", encoding="utf-8")
    monkeypatch.setenv(learner_progress.PROGRESS_ENV, str(blocker / "progress.json"))  # its folder is a file
    monkeypatch.setattr(learner_progress, "_warned", set())
    checks.check_mask_inversion(right)
    with pytest.raises(ExerciseError):
        checks.check_mask_inversion(wrong)
    out = capsys.readouterr().out
    notes = [line for line in out.splitlines() if "progress not saved" in line]
    assert len(notes) == 1 and "Traceback" not in out and "✔ mask_inversion: correct" in out
    assert not [p for p in tmp_path.iterdir() if p.name.endswith(".tmp")]


@pytest.mark.skipif(os.name != "posix" or os.geteuid() == 0, reason="needs a folder that this user cannot write")
def test_a_read_only_folder_never_breaks_a_check(tmp_path, monkeypatch, capsys):
    folder = tmp_path / "ro"
    folder.mkdir()
    folder.chmod(0o500)
    try:
        monkeypatch.setenv(learner_progress.PROGRESS_ENV, str(folder / "progress.json"))
        monkeypatch.setattr(learner_progress, "_warned", set())
        checks.check_mask_inversion(right)
        out = capsys.readouterr().out
        assert "✔ mask_inversion: correct" in out and out.count("progress not saved") == 1
    finally:
        folder.chmod(0o700)


def test_reset_forgets_everything(record_file):
    checks.check_mask_inversion(right)
    learner_progress.reset_progress()
    assert not record_file.exists() and status_of("mask_inversion") is None
    learner_progress.reset_progress()  # nothing to delete is fine


def test_recording_writes_through_the_atomic_writer(record_file, monkeypatch):
    written = []
    monkeypatch.setattr(learner_progress, "atomic_write_json", lambda path, data: written.append((path, data)))
    checks.check_mask_inversion(right)
    assert written[0][0] == record_file and written[0][1]["exercises"]["mask_inversion"]["status"] == "pass"
