"""Tests of the command line, ``python -m transformer_lessons``."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from test_train import toy_corpus
from transformer_lessons.__main__ import main

DATA_DIR = Path(os.environ.get("TRANSFORMER_LESSONS_DATA") or Path(__file__).resolve().parents[2] / "shared" / "data" / "multi30k")


@pytest.fixture(scope="module")
def toy_corpus_file(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("corpus") / "toy.json.gz"
    toy_corpus().save(path)
    return path


def test_help_works(capsys):
    result = subprocess.run([sys.executable, "-m", "transformer_lessons", "--help"], capture_output=True, text=True, timeout=60)
    assert result.returncode == 0 and "train" in result.stdout and "translate" in result.stdout
    for command in ("train", "translate", "evaluate", "prepare"):
        with pytest.raises(SystemExit) as exit_info:
            main([command, "--help"])
        assert exit_info.value.code == 0
        assert "usage:" in capsys.readouterr().out


def test_train_translate_evaluate_on_a_saved_corpus(tmp_path, toy_corpus_file, capsys):
    out = tmp_path / "run"
    args = ["train", "--preset", "quick", "--corpus", str(toy_corpus_file), "--epochs", "2", "--out", str(out), "--quiet", "--beam", "2"]
    assert main(args) == 0
    printed = capsys.readouterr().out
    assert "test_2016_flickr (beam 2): BLEU" in printed and "case:mixed" in printed
    assert (out / "best.pt").is_file() and (out / "metrics.json").is_file()

    assert main(["translate", "ein hund läuft .", "eine frau .", "--checkpoint", str(out / "best.pt"), "--beam", "1", "--device", "cpu"]) == 0
    lines = capsys.readouterr().out.split("\n")[:-1]
    assert len(lines) == 2, "one line per sentence (an empty translation is an empty line)"

    scores = tmp_path / "scores.json"
    hyps = tmp_path / "hyps.txt"
    cmd = ["evaluate", "--checkpoint", str(out / "best.pt"), "--corpus", str(toy_corpus_file), "--beam", "2", "--device", "cpu"]
    assert main(cmd + ["--json", str(scores), "--output", str(hyps)]) == 0
    printed = capsys.readouterr().out
    assert "signature: nrefs:1|case:mixed" in printed and "tok:13a" in printed
    assert scores.is_file() and len(hyps.read_text().splitlines()) == 40


def test_user_errors_exit_2_with_one_line(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)  # no runs/ here
    monkeypatch.delenv("TRANSFORMER_LESSONS_RUNS", raising=False)
    assert main(["translate", "Ein Mann."]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: no checkpoint given") and "train --preset quick" in err and err.count("\n") == 1
    assert main(["evaluate", "--checkpoint", "missing.pt"]) == 2
    assert "no checkpoint at missing.pt" in capsys.readouterr().err
    (tmp_path / "broken.pt").write_text("garbage")
    assert main(["translate", "Ein Mann.", "--checkpoint", "broken.pt"]) == 2
    assert "not a readable checkpoint" in capsys.readouterr().err
    monkeypatch.setenv("TRANSFORMER_LESSONS_CACHE", str(tmp_path / "empty_cache"))  # no tokenized copy to fall back on
    assert main(["train", "--preset", "quick", "--data-dir", str(tmp_path / "nowhere"), "--quiet"]) == 2
    assert "does not exist" in capsys.readouterr().err
    assert main(["train", "--corpus", "nope.json.gz"]) == 2
    assert "no corpus file" in capsys.readouterr().err
    assert main([]) == 2


@pytest.mark.skipif(not DATA_DIR.is_dir(), reason="Multi30k files not available")
def test_quick_preset_on_real_data_as_a_subprocess(tmp_path):
    out = tmp_path / "run"
    env = dict(os.environ, TRANSFORMER_LESSONS_DATA=str(DATA_DIR))
    train = [sys.executable, "-m", "transformer_lessons", "train", "--preset", "quick", "--limit", "200", "--epochs", "1"]
    train += ["--out", str(out), "--bleu-val-limit", "16", "--no-test", "--quiet"]
    result = subprocess.run(train, capture_output=True, text=True, env=env, timeout=300)
    assert result.returncode == 0, result.stderr[-2000:]
    assert "best validation BLEU" in result.stdout and (out / "best.pt").is_file()
    translate = [sys.executable, "-m", "transformer_lessons", "translate", "Ein Mann fährt Fahrrad.", "--checkpoint", str(out / "best.pt"), "--beam", "2"]
    result = subprocess.run(translate, capture_output=True, text=True, env=env, timeout=120)
    assert result.returncode == 0, result.stderr[-2000:]
    assert len(result.stdout.strip().splitlines()) == 1


@pytest.mark.skipif(not DATA_DIR.is_dir(), reason="Multi30k files not available")
def test_prepare_and_train_with_subwords(tmp_path, capsys):
    from transformer_lessons.data import Corpus

    corpus_file = tmp_path / "bpe.json.gz"
    prepare = ["prepare", "--preset", "quick", "--limit", "300", "--bpe-merges", "200", "--out", str(corpus_file), "--data-dir", str(DATA_DIR)]
    assert main(prepare) == 0
    corpus = Corpus.load(corpus_file)
    assert corpus.info["bpe_merges"] == 200 and len(corpus.src_vocab.bpe) == 200 and len(corpus.tgt_vocab.bpe) == 200
    out = tmp_path / "run"
    train = ["train", "--preset", "quick", "--corpus", str(corpus_file), "--bpe-merges", "200", "--epochs", "1"]
    assert main(train + ["--out", str(out), "--bleu-val-limit", "8", "--no-test", "--quiet", "--device", "cpu"]) == 0
    capsys.readouterr()
    assert main(["translate", "Ein Mann fährt Fahrrad.", "--checkpoint", str(out / "best.pt"), "--beam", "1", "--device", "cpu"]) == 0
    assert "@@" not in capsys.readouterr().out, "pieces are joined into words"
    assert main(prepare[:-4] + ["--bpe-merges", "-1", "--out", str(corpus_file)]) == 2
    assert "--bpe-merges must be 0" in capsys.readouterr().err
