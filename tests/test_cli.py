"""Tests of the command line, ``python -m transformer_lessons``."""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from test_pretrained import no_course_model_anywhere, write_fake_course_model
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
    epoch_lines = [line for line in printed.splitlines() if line.startswith("epoch ")]
    assert [line.split()[1] for line in epoch_lines] == ["1", "2"], "--quiet drops the bars, never the per-epoch log"

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
    no_course_model_anywhere(monkeypatch, tmp_path)  # and the course's model can be neither found nor downloaded
    assert main(["translate", "Ein Mann."]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: no checkpoint given") and "train --preset quick" in err and err.count("\n") == 1
    assert "could not download the course's model" in err and "TRANSFORMER_LESSONS_MODEL=" in err
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


def test_without_a_checkpoint_translate_uses_a_run_else_the_course_model(tmp_path, monkeypatch, capsys):
    from transformer_lessons import pretrained

    monkeypatch.chdir(tmp_path)  # no runs/ here
    monkeypatch.delenv("TRANSFORMER_LESSONS_RUNS", raising=False)
    internet = no_course_model_anywhere(monkeypatch, tmp_path)
    fake = write_fake_course_model(tmp_path / "clone" / pretrained.COURSE_MODEL_PATH)
    monkeypatch.setattr(pretrained, "COURSE_MODEL_SHA256", hashlib.sha256(fake).hexdigest())
    assert main(["translate", "ein hund .", "eine frau .", "--beam", "1", "--device", "cpu"]) == 0
    out, err = capsys.readouterr()
    assert len(out.split("\n")[:-1]) == 2, "stdout holds the translations only"
    assert err == f"using the course's model {Path('clone') / pretrained.COURSE_MODEL_PATH} (sha256 {hashlib.sha256(fake).hexdigest()[:8]}…)\n"
    assert internet.calls == []

    (tmp_path / "runs" / "cpu").mkdir(parents=True)  # a run of your own comes first
    (tmp_path / "runs" / "cpu" / "best.pt").write_bytes(fake)
    assert main(["translate", "ein hund .", "--beam", "1", "--device", "cpu"]) == 0
    out, err = capsys.readouterr()
    assert err == f"using {Path('runs') / 'cpu' / 'best.pt'}\n" and out.count("\n") == 1


def test_an_unreadable_last_checkpoint_is_a_user_error(tmp_path, toy_corpus_file, capsys):
    (tmp_path / "last.pt").write_bytes(b"truncated")
    assert main(["train", "--preset", "quick", "--corpus", str(toy_corpus_file), "--out", str(tmp_path), "--quiet"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: cannot resume") and "--no-resume" in err and f"delete {tmp_path / 'last.pt'}" in err


# Runs the command line with spaCy unimportable, as on the GPU machine: None in sys.modules makes
# `import spacy` raise ImportError. Prints each command's exit status.
NO_SPACY = '''
import sys
sys.modules["spacy"] = None
from transformer_lessons.__main__ import main
for args in sys.argv[1:]:
    print("exit", main(args.split("|")), flush=True)
assert sys.modules["spacy"] is None
'''


def test_the_gpu_path_needs_no_spacy(tmp_path, toy_corpus_file):
    out, corpus = tmp_path / "run", str(toy_corpus_file)
    commands = [
        ["train", "--preset", "quick", "--corpus", corpus, "--out", str(out), "--max-steps", "2", "--quiet", "--device", "cpu"],
        ["evaluate", "--checkpoint", str(out / "last.pt"), "--corpus", corpus, "--beam", "2", "--limit", "4", "--device", "cpu"],
        ["translate", "Ein Hund läuft.", "--checkpoint", str(out / "last.pt"), "--device", "cpu"],
    ]
    run = [sys.executable, "-c", NO_SPACY, *("|".join(c) for c in commands)]
    result = subprocess.run(run, capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stdout + result.stderr[-2000:]
    assert [line for line in result.stdout.splitlines() if line.startswith("exit")] == ["exit 0", "exit 0", "exit 2"], result.stdout
    assert "stopped after 2 steps" in result.stdout and "signature: nrefs:1|case:mixed" in result.stdout
    # Only translate needs spaCy (new sentences must be tokenized); its message says so and names the way around it.
    assert "pip install spacy" in result.stderr and "evaluate --corpus" in result.stderr


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


GPU_RUN = Path(__file__).resolve().parents[1] / "scripts" / "gpu_run.sh"


@pytest.mark.skipif(not (shutil.which("bash") and shutil.which("timeout") and shutil.which("tee")), reason="needs bash, timeout and tee")
def test_gpu_run_script_on_a_cpu(tmp_path):
    # The whole GPU session of results/README.md, shrunk: a toy corpus, one epoch, greedy test, no benchmark.
    corpus = tmp_path / "corpus.json.gz"
    toy_corpus({"train": 100, "val": 6, "test_2016_flickr": 6}).save(corpus)
    bin_dir = tmp_path / "bin"  # the GPU machine's `python3` is the one with torch: here, this interpreter
    bin_dir.mkdir()
    (bin_dir / "python3").write_text(f'#!/bin/sh\nexec "{sys.executable}" "$@"\n')
    (bin_dir / "python3").chmod(0o755)
    out, run = tmp_path / "out", tmp_path / "run"
    env = dict(
        os.environ, PATH=f"{bin_dir}{os.pathsep}{os.environ['PATH']}", OUT=str(out), RUN_DIR=str(run), COMMIT="0123abc",
        DEVICE="cpu", BENCH_STEPS="0", TRAIN_ARGS="--epochs 1 --beam 1 --bleu-val-limit 4", BUDGET="300",
    )  # fmt: skip
    result = subprocess.run(["bash", str(GPU_RUN), "3", str(corpus)], capture_output=True, text=True, env=env, timeout=280)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-2000:]
    names = sorted(p.name for p in (out / "full").iterdir())
    assert names == ["command.txt", "history.json", "metrics.json", "model_fp16.pt", "test_hypotheses.txt", "train.log"]
    command = (out / "full" / "command.txt").read_text()
    assert "commit: 0123abc" in command and "train: python3 -m transformer_lessons train --preset full" in command
    assert "--max-minutes 3 --device cpu --quiet --epochs 1" in command
    log = (out / "full" / "train.log").read_text()
    assert "sacrebleu 2." in log and "\nepoch   1  step" in log and "\ntest_2016_flickr: sacreBLEU" in log
    assert "model_fp16.pt:" in log and "== done" in log and "\r" not in log
    assert (run / "train.log").read_text() == log, "the run directory keeps the same log"
    assert len((out / "full" / "test_hypotheses.txt").read_text().splitlines()) == 6
