"""Tests of the command line, ``python -m transformer_lessons``."""

from __future__ import annotations

import errno
import hashlib
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from test_pretrained import no_course_model_anywhere, write_fake_course_model
from test_train import toy_corpus
from transformer_lessons import __main__ as cli
from transformer_lessons import cli_args
from transformer_lessons.__main__ import main

DATA_DIR = Path(
    os.environ.get("TRANSFORMER_LESSONS_DATA") or Path(__file__).resolve().parents[2] / "shared" / "data" / "multi30k"
)


@pytest.fixture(scope="module")
def toy_corpus_file(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("corpus") / "toy.json.gz"
    toy_corpus().save(path)
    return path


def test_help_works(capsys):
    result = subprocess.run(
        [sys.executable, "-m", "transformer_lessons", "--help"], capture_output=True, text=True, timeout=60
    )
    assert result.returncode == 0 and "train" in result.stdout and "translate" in result.stdout
    for command in ("train", "translate", "evaluate", "prepare"):
        with pytest.raises(SystemExit) as exit_info:
            main([command, "--help"])
        assert exit_info.value.code == 0
        assert "usage:" in capsys.readouterr().out


def test_train_translate_evaluate_on_a_saved_corpus(tmp_path, toy_corpus_file, capsys):
    out = tmp_path / "run"
    args = [
        "train",
        "--preset",
        "quick",
        "--corpus",
        str(toy_corpus_file),
        "--epochs",
        "2",
        "--out",
        str(out),
        "--quiet",
        "--beam",
        "2",
    ]
    assert main(args) == 0
    printed = capsys.readouterr().out
    assert "test_2016_flickr (beam 2): BLEU" in printed and "case:mixed" in printed
    assert (out / "best.pt").is_file() and (out / "metrics.json").is_file()
    epoch_lines = [line for line in printed.splitlines() if line.startswith("epoch ")]
    assert [line.split()[1] for line in epoch_lines] == ["1", "2"], "--quiet drops the bars, never the per-epoch log"

    assert (
        main(
            [
                "translate",
                "ein hund läuft .",
                "eine frau .",
                "--checkpoint",
                str(out / "best.pt"),
                "--beam",
                "1",
                "--device",
                "cpu",
            ]
        )
        == 0
    )
    lines = capsys.readouterr().out.split("\n")[:-1]
    assert len(lines) == 2, "one line per sentence (an empty translation is an empty line)"

    scores = tmp_path / "scores.json"
    hyps = tmp_path / "hyps.txt"
    cmd = [
        "evaluate",
        "--checkpoint",
        str(out / "best.pt"),
        "--corpus",
        str(toy_corpus_file),
        "--beam",
        "2",
        "--device",
        "cpu",
    ]
    assert main(cmd + ["--json", str(scores), "--output", str(hyps)]) == 0
    printed = capsys.readouterr().out
    assert "signature: nrefs:1|case:mixed" in printed and "tok:13a" in printed
    assert scores.is_file() and len(hyps.read_text().splitlines()) == 40

    # The key/value cache is the default; --no-cache recomputes every prefix and must write the same translations.
    plain = tmp_path / "plain.txt"
    assert main(cmd + ["--no-cache", "--output", str(plain)]) == 0
    assert plain.read_text() == hyps.read_text()
    capsys.readouterr()
    sentences = ["ein hund läuft .", "eine frau spielt gitarre ."]
    outputs = []
    for extra in ([], ["--no-cache"]):
        assert (
            main(
                [
                    "translate",
                    *sentences,
                    "--checkpoint",
                    str(out / "best.pt"),
                    "--beam",
                    "3",
                    "--device",
                    "cpu",
                    *extra,
                ]
            )
            == 0
        )
        outputs.append(capsys.readouterr().out)
    assert outputs[0] == outputs[1]


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
    err = capsys.readouterr().err  # the wording is checkpoint.py's; the command line's part is one line naming the file
    assert err.startswith("error: broken.pt") and "checkpoint" in err and err.count("\n") == 1
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
    assert (
        err
        == f"using the course's model {Path('clone') / pretrained.COURSE_MODEL_PATH} (sha256 {hashlib.sha256(fake).hexdigest()[:8]}…)\n"
    )
    assert internet.calls == []

    (tmp_path / "runs" / "cpu").mkdir(parents=True)  # a run of your own comes first
    (tmp_path / "runs" / "cpu" / "best.pt").write_bytes(fake)
    assert main(["translate", "ein hund .", "--beam", "1", "--device", "cpu"]) == 0
    out, err = capsys.readouterr()
    assert err == f"using {Path('runs') / 'cpu' / 'best.pt'}\n" and out.count("\n") == 1


def test_an_unreadable_last_checkpoint_is_a_user_error(tmp_path, toy_corpus_file, capsys):
    (tmp_path / "last.pt").write_bytes(b"truncated")
    assert (
        main(["train", "--preset", "quick", "--corpus", str(toy_corpus_file), "--out", str(tmp_path), "--quiet"]) == 2
    )
    err = capsys.readouterr().err
    assert err.startswith("error: cannot resume") and "--no-resume" in err and f"delete {tmp_path / 'last.pt'}" in err


@pytest.mark.parametrize("missing", ["val", "train"])
def test_a_saved_corpus_without_a_split_is_one_line(tmp_path, capsys, missing):
    corpus = toy_corpus()
    for table in (corpus.pairs, corpus.text, corpus.tokens):
        del table[missing]
    corpus.save(tmp_path / "partial.json.gz")
    assert (
        main(
            [
                "train",
                "--preset",
                "quick",
                "--corpus",
                str(tmp_path / "partial.json.gz"),
                "--out",
                str(tmp_path / "run"),
                "--quiet",
            ]
        )
        == 2
    )
    err = capsys.readouterr().err
    others = ", ".join(repr(s) for s in ("train", "val", "test_2016_flickr") if s != missing)
    assert err == (
        f"error: the corpus {tmp_path / 'partial.json.gz'} has no {missing!r} split (it has {others}): a run trains on 'train' and "
        "validates on 'val'. Make the corpus again with every split: python -m transformer_lessons prepare --out "
        f"{tmp_path / 'partial.json.gz'} (in Python: prepare_corpus_for(config).save(path))\n"
    )
    assert not (tmp_path / "run").exists(), "refused before the run folder was made"


def test_a_run_folder_without_last_pt_is_one_line(tmp_path, toy_corpus_file, capsys):
    (tmp_path / "best.pt").write_bytes(b"an earlier run's model")
    (tmp_path / "history.json").write_text("[]")
    assert (
        main(["train", "--preset", "quick", "--corpus", str(toy_corpus_file), "--out", str(tmp_path), "--quiet"]) == 2
    )
    err = capsys.readouterr().err
    assert (
        err.startswith(f"error: {tmp_path} holds best.pt and history.json of an earlier run but no last.pt")
        and err.count("\n") == 1
    )
    assert "--out" in err and "--no-resume" in err and (tmp_path / "best.pt").read_bytes() == b"an earlier run's model"


# --- Every option is checked before any work; each mistake is one line on stderr and exit status 2.


@pytest.fixture
def no_work(monkeypatch):
    """Makes every expensive step fail the test if it is reached: a bad option must stop before all of them."""
    import transformer_lessons.run as training_run
    from transformer_lessons import pretrained, translation
    from transformer_lessons.data import Corpus

    def must_not_run(*args, **kwargs):
        raise AssertionError("an expensive step ran although an option was bad")

    for owner, name in [
        (training_run, "train"),
        (training_run, "prepare_corpus_for"),
        (translation, "translate"),
        (translation, "evaluate"),
        (Corpus, "load"),
        (pretrained, "course_model_file"),
    ]:
        monkeypatch.setattr(owner, name, must_not_run)


def assert_one_usage_line(err: str, command: str, *expected: str) -> None:
    assert err.count("\n") == 1 and err.endswith(" (see --help)\n"), err
    assert err.startswith(f"python -m transformer_lessons{' ' + command if command else ''}: error: "), err
    assert "Traceback" not in err and "usage:" not in err
    for part in expected:
        assert part in err, err


BAD_OPTIONS = [
    ("train --device gpu", "--device 'gpu' is not a device; use cpu, cuda, cuda:N or mps"),
    ("translate Hallo --device tpu", "--device 'tpu' is not a device"),
    ("evaluate --device cuda0", "--device 'cuda0' is not a device"),
    ("train --bleu-val-limit 0", "--bleu-val-limit must be a positive whole number, got 0"),
    ("train --limit 0", "--limit must be a positive whole number, got 0"),
    ("train --limit -3", "--limit must be a positive whole number, got -3"),
    ("train --limit 1.5", "--limit must be a positive whole number, got '1.5'"),
    ("train --max-steps 0", "--max-steps must be a positive whole number, got 0"),
    ("train --max-steps -1", "--max-steps must be a positive whole number, got -1"),
    ("train --epochs 0", "--epochs must be a positive whole number, got 0"),
    ("train --max-tokens 0", "--max-tokens must be a positive whole number, got 0"),
    ("train --eval-every 0", "--eval-every must be a positive whole number, got 0"),
    ("train --bpe-merges -1", "--bpe-merges must be 0 or a positive whole number, got -1"),
    ("prepare --out c.json.gz --bpe-merges -1", "--bpe-merges must be 0"),
    ("prepare --out c.json.gz --limit 0", "--limit must be a positive whole number, got 0"),
    ("evaluate --limit 0", "--limit must be a positive whole number, got 0"),
    ("train --seed -1", "--seed must be a whole number from 0 to 4294967295, got -1"),
    ("train --seed 4294967296", "--seed must be a whole number from 0 to 4294967295"),
    ("train --max-minutes nan", "--max-minutes must be a finite number > 0, got nan"),
    ("train --max-minutes inf", "--max-minutes must be a finite number > 0, got inf"),
    ("train --max-minutes -1", "--max-minutes must be a finite number > 0, got -1"),
    ("train --max-minutes 0", "--max-minutes must be a finite number > 0, got 0"),
    ("train --max-minutes soon", "--max-minutes must be a finite number > 0, got 'soon'"),
    ("evaluate --length-penalty nan", "--length-penalty must be a finite number >= 0, got nan"),
    ("evaluate --length-penalty -0.5", "--length-penalty must be a finite number >= 0, got -0.5"),
    ("translate Hallo --beam 0", "--beam must be a whole number from 1 (greedy) to 64"),
    (
        "translate Hallo --beam 10000",
        "--beam must be a whole number from 1 (greedy) to 64 (the paper uses 4), got 10000",
    ),
    ("train --beam 0", "--beam must be a whole number from 1 (greedy) to 64"),
    ("evaluate --beam 65", "got 65"),
    (
        "evaluate --split test2016",
        "--split 'test2016' is not a Multi30k split; choose one of train, val, test_2016_flickr,",
    ),
    ("train --out {file}", "--out {file} is a file, not a folder"),
    ("prepare --out {dir}", "--out {dir} is a folder; give the name of a file to write"),
    ("evaluate --output {dir}", "--output {dir} is a folder"),
    ("evaluate --json {dir}", "--json {dir} is a folder"),
    ("train --out {file}/run", "--out {file}/run cannot be created: {file} is a file"),
    ("train --tensorboard {file}", "--tensorboard {file} is a file, not a folder"),
    ("train --data-dir {dir}/nowhere", "--data-dir {dir}/nowhere does not exist"),
    (
        "train --corpus {dir}/none.json.gz",
        "--corpus finds no corpus file at {dir}/none.json.gz; make one with: python -m transformer_lessons prepare",
    ),
    ("translate Hallo --checkpoint {dir}/none.pt", "--checkpoint finds no checkpoint at {dir}/none.pt; train one with"),
    ("train --preset huge", "--preset invalid choice: 'huge'"),
    ("train --colour", "unrecognized arguments: --colour"),
    ("train --limit", "--limit expected one argument"),
    ("prepare", "the following arguments are required: --out"),
]


@pytest.mark.parametrize("args, expected", BAD_OPTIONS, ids=[args for args, _ in BAD_OPTIONS])
def test_a_bad_option_is_one_line_before_any_work(args, expected, tmp_path, no_work, capsys):
    (tmp_path / "a_file").write_text("")
    where = {"file": str(tmp_path / "a_file"), "dir": str(tmp_path)}
    assert main([arg.format(**where) for arg in args.split()]) == 2
    out, err = capsys.readouterr()
    assert out == ""
    assert_one_usage_line(err, args.split()[0], expected.format(**where))


def test_an_unknown_command_is_one_line(no_work, capsys):
    assert main(["fly"]) == 2
    assert_one_usage_line(
        capsys.readouterr().err, "", "invalid choice: 'fly'", "'prepare', 'train', 'translate', 'evaluate'"
    )


def test_a_device_this_machine_lacks_is_refused(monkeypatch, no_work, capsys):
    import torch

    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    for command in (["train"], ["translate", "Hallo"], ["evaluate"]):
        assert main([*command, "--device", "cuda"]) == 2
        assert_one_usage_line(
            capsys.readouterr().err,
            command[0],
            "--device 'cuda' needs a CUDA GPU and torch finds none on this machine; use cpu",
        )
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 2)
    assert main(["train", "--device", "cuda:2"]) == 2
    assert_one_usage_line(
        capsys.readouterr().err, "train", "--device 'cuda:2' names GPU 2, but this machine has 2 (cuda:0 to cuda:1)"
    )
    monkeypatch.setattr(torch.backends.mps, "is_available", lambda: False)
    assert main(["train", "--device", "mps"]) == 2
    assert_one_usage_line(capsys.readouterr().err, "train", "'mps' (an Apple GPU) is not available on this machine")


def test_good_values_parse_to_what_the_commands_use(tmp_path, monkeypatch):
    import torch

    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 2)
    args = cli.build_parser().parse_args(
        [
            "train",
            "--bpe-merges",
            "0",
            "--seed",
            "0",
            "--max-minutes",
            "0.5",
            "--beam",
            "64",
            "--device",
            "cuda:1",
            "--out",
            str(tmp_path / "new" / "run"),
        ]
    )
    assert (args.bpe_merges, args.seed, args.max_minutes, args.beam, args.device) == (0, 0, 0.5, 64, "cuda:1"), (
        "0 merges = whole words, still valid"
    )
    args = cli.build_parser().parse_args(
        ["evaluate", "--length-penalty", "0", "--split", "val", "--device", "cpu", "--limit", "1"]
    )
    assert (args.length_penalty, args.split, args.device, args.limit, args.beam) == (0.0, "val", "cpu", 1, 4)
    assert cli.build_parser().parse_args(["train", "--out", str(tmp_path)]).out == str(tmp_path), (
        "an existing folder is a run folder"
    )


def test_tensorboard_without_the_extra_is_one_line_before_any_work(tmp_path, monkeypatch, no_work, capsys):
    monkeypatch.setitem(sys.modules, "torch.utils.tensorboard", None)  # as if tensorboard were not installed
    for args in (["train", "--tensorboard"], ["train", "--tensorboard", str(tmp_path / "tb"), "--quiet"]):
        assert main(args) == 2
        assert_one_usage_line(
            capsys.readouterr().err,
            "train",
            "--tensorboard needs the tensorboard package, which is not installed: "
            'pip install "transformer-lessons[tensorboard]"',
        )
    assert not (tmp_path / "tb").exists()


def test_tensorboard_option_reaches_train(tmp_path, monkeypatch):
    import types

    import transformer_lessons.run as training_run

    monkeypatch.setitem(sys.modules, "torch.utils.tensorboard", types.SimpleNamespace(SummaryWriter=object))
    parse = cli.build_parser().parse_args
    assert parse(["train"]).tensorboard is None
    assert parse(["train", "--tensorboard", "--quiet"]).tensorboard is True, "alone: <out>/tensorboard"
    assert parse(["train", "--tensorboard", str(tmp_path / "tb")]).tensorboard == str(tmp_path / "tb")
    seen = {}
    monkeypatch.setattr(
        training_run,
        "train",
        lambda *a, **k: seen.update(k) or {"history": [], "step": 0, "stopped": "max_steps", "test": None},
    )
    monkeypatch.setattr(cli, "_print_train_result", lambda result: None)
    assert main(["train", "--preset", "quick", "--out", str(tmp_path / "run"), "--tensorboard"]) == 0
    assert seen["tensorboard"] is True


@pytest.fixture
def seen_configs(monkeypatch):
    """The TrainConfig each `train` command would run with, the run itself replaced by a no-op."""
    import transformer_lessons.run as training_run

    seen = []
    monkeypatch.setattr(
        training_run,
        "train",
        lambda config, *a, **k: seen.append(config) or {"history": [], "step": 0, "stopped": "max_steps", "test": None},
    )
    monkeypatch.setattr(cli, "_print_train_result", lambda result: None)
    return seen


def test_precision_and_averaging_options_reach_the_run(tmp_path, seen_configs, capsys):
    seen = seen_configs
    assert (
        main(
            [
                "train",
                "--preset",
                "quick",
                "--out",
                str(tmp_path / "a"),
                "--precision",
                "bfloat16",
                "--average-last",
                "5",
            ]
        )
        == 0
    )
    assert main(["train", "--preset", "quick", "--out", str(tmp_path / "b")]) == 0
    assert [(c.precision, c.average_last) for c in seen] == [("bfloat16", 5), ("auto", 1)]
    assert main(["train", "--precision", "half"]) == 2
    assert "invalid choice: 'half'" in capsys.readouterr().err


def test_the_model_options_since_the_paper_reach_the_run(tmp_path, seen_configs, capsys):
    from transformer_lessons.config import TRAIN_PRESETS

    seen = seen_configs
    modern = ["--norm-first", "--norm", "rmsnorm", "--ffn", "swiglu", "--positional", "rotary", "--kv-heads", "2"]
    assert main(["train", "--preset", "quick", "--out", str(tmp_path / "a"), *modern]) == 0
    assert main(["train", "--preset", "quick", "--out", str(tmp_path / "b")]) == 0
    changed, plain = seen
    assert changed.model == TRAIN_PRESETS["quick"].model.replace(
        norm_first=True, norm="rmsnorm", ffn="swiglu", positional="rotary", n_kv_heads=2
    )
    assert plain.model == TRAIN_PRESETS["quick"].model, "without the options, the preset's model"
    assert plain.model.positional == "sinusoidal" and not plain.model.norm_first, "the quick preset is the paper's"
    assert main(["train", "--ffn", "gelu"]) == 2
    assert "invalid choice: 'gelu'" in capsys.readouterr().err
    assert main(["train", "--kv-heads", "3", "--preset", "cpu", "--out", str(tmp_path / "c")]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: TrainConfig: model.n_kv_heads must be a whole number >= 1 that divides n_heads (8)")
    assert len(err.strip().splitlines()) == 1


def test_dropout_and_schedule_reach_the_run_and_bad_values_are_one_line(tmp_path, seen_configs, capsys):
    from transformer_lessons.config import TRAIN_PRESETS

    seen = seen_configs
    assert (
        main(["train", "--preset", "cpu", "--out", str(tmp_path / "a"), "--dropout", "0.3", "--schedule", "noam"]) == 0
    )
    assert main(["train", "--preset", "cpu", "--out", str(tmp_path / "b")]) == 0
    changed, plain = seen
    assert (changed.model.dropout, changed.schedule) == (0.3, "noam")
    assert changed.model == TRAIN_PRESETS["cpu"].model.replace(dropout=0.3), "only the dropout changed in the model"
    assert (plain.model.dropout, plain.schedule) == (TRAIN_PRESETS["cpu"].model.dropout, TRAIN_PRESETS["cpu"].schedule)
    assert (
        main(["train", "--preset", "laptop", "--out", str(tmp_path / "c"), "--schedule", "noam", "--dropout", "0"]) == 0
    )
    assert (seen[-1].schedule, seen[-1].model.dropout) == ("noam", 0.0)
    for bad, says in (
        (["--dropout", "1"], "--dropout must be a number from 0 up to (not including) 1, got 1"),
        (["--dropout", "-0.1"], "--dropout must be a finite number >= 0, got -0.1"),
        (["--dropout", "nan"], "--dropout must be a finite number >= 0, got nan"),
        (["--schedule", "cosine"], "--schedule invalid choice: 'cosine'"),
    ):
        assert main(["train", *bad]) == 2
        err = capsys.readouterr().err
        assert says in err and len(err.strip().splitlines()) == 1, err


def test_a_read_only_folder_is_refused_before_any_work(tmp_path, monkeypatch, no_work, capsys):
    # The check asks os.access, so that it also holds where the tests run as root (who may write anywhere).
    monkeypatch.setattr(os, "access", lambda path, mode: Path(path) != tmp_path)
    assert main(["evaluate", "--output", str(tmp_path / "sub" / "hyps.txt")]) == 2
    assert_one_usage_line(
        capsys.readouterr().err,
        "evaluate",
        f"--output {tmp_path / 'sub' / 'hyps.txt'} cannot be written: the folder {tmp_path} is read-only",
    )


def test_a_path_that_cannot_be_looked_at_is_one_line(tmp_path, monkeypatch, no_work, capsys):
    locked = tmp_path / "locked"

    class LockedPath(
        type(tmp_path)
    ):  # stat() under a folder without x permission fails with EACCES (root never sees it)
        def is_dir(self):
            if self == locked or locked in self.parents:
                raise PermissionError(errno.EACCES, "Permission denied", str(self))
            return super().is_dir()

    monkeypatch.setattr(cli_args, "Path", LockedPath)  # where the options' paths are looked at
    for args in (
        ["train", "--out", str(locked / "run")],
        ["prepare", "--out", str(locked)],
        ["evaluate", "--data-dir", str(locked)],
    ):
        assert main(args) == 2
        assert_one_usage_line(capsys.readouterr().err, args[0], f"{args[-1]} cannot be used: Permission denied")


def test_an_argument_that_is_not_utf8_is_one_line(no_work, capsys):
    # On Linux, bytes that are not UTF-8 reach sys.argv as surrogate escapes: b"\xff" becomes "\udcff".
    result = subprocess.run(
        [sys.executable, "-m", "transformer_lessons", "translate", b"\xff\xfe"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 2 and result.stdout == ""
    assert_one_usage_line(result.stderr, "translate", r"argument 2 is not valid UTF-8: b'\xff\xfe'")
    assert main(["train", "--out", "run\udcff"]) == 2
    assert_one_usage_line(capsys.readouterr().err, "train", r"the value of --out is not valid UTF-8: b'run\xff'")


# --- Errors while a command runs: one line, no traceback.


def no_space(path):
    def write(*args, **kwargs):
        raise OSError(errno.ENOSPC, "No space left on device", str(path))

    return write


def test_a_failed_save_is_one_line_naming_the_file(tmp_path, monkeypatch, capsys):
    import transformer_lessons.run as training_run
    from transformer_lessons import translation

    class Corpus:
        save = staticmethod(no_space(tmp_path / "c.json.gz"))

    full = "No space left on device; free some space and run the same command again\n"
    monkeypatch.setattr(training_run, "prepare_corpus_for", lambda *args, **kwargs: Corpus())
    assert main(["prepare", "--out", str(tmp_path / "c.json.gz")]) == 1
    assert capsys.readouterr().err == f"error: {tmp_path / 'c.json.gz'}: {full}"

    monkeypatch.setattr(training_run, "train", no_space(tmp_path / "run" / "last.pt"))
    assert main(["train", "--preset", "quick", "--out", str(tmp_path / "run")]) == 1
    assert capsys.readouterr().err == f"error: {tmp_path / 'run' / 'last.pt'}: {full}"

    scores = {
        "n": 2,
        "bleu_text": "BLEU = 1.0",
        "signature": "nrefs:1",
        "tutorial_bleu": 1.0,
        "hypotheses": ["a", "b"],
        "references": ["a", "b"],
    }
    monkeypatch.setattr(translation, "evaluate", lambda *args, **kwargs: scores)
    (tmp_path / "model.pt").write_bytes(b"")

    def write_fails(self, *args, **kwargs):  # what a full disk does to write(): an OSError that names no file
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(Path, "write_text", write_fails)
    for option in ("--output", "--json"):
        assert main(["evaluate", "--checkpoint", str(tmp_path / "model.pt"), option, str(tmp_path / "out.txt")]) == 1
        out, err = capsys.readouterr()
        assert "signature: nrefs:1" in out and err == f"error: {tmp_path / 'out.txt'}: {full}", (
            "the file asked for, not its temporary name"
        )
    assert sorted(p.name for p in tmp_path.iterdir()) == ["model.pt"], "no temporary file is left"


@pytest.mark.parametrize("failure", ["torch", "oserror"])
def test_a_full_disk_while_train_saves_is_one_line_and_keeps_last_pt(
    tmp_path, toy_corpus_file, monkeypatch, capsys, failure
):
    import torch

    out = tmp_path / "run"
    args = [
        "train",
        "--preset",
        "quick",
        "--corpus",
        str(toy_corpus_file),
        "--out",
        str(out),
        "--quiet",
        "--device",
        "cpu",
    ]
    assert main(args + ["--max-steps", "2"]) == 0
    before = (out / "last.pt").read_bytes()
    capsys.readouterr()

    def full_disk(obj, f, *rest, **kwargs):
        Path(f).write_bytes(b"PK half a checkpoint")
        if failure == "torch":  # what torch.save raises when a write fails in its zip writer
            raise RuntimeError(
                "[enforce fail at inline_container.cc:672] . PytorchStreamWriter failed writing file data/0: file write failed"
            )
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(torch, "save", full_disk)
    assert main(args + ["--max-steps", "4"]) == 1
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith(f"error: {out / 'last.pt'}: ") and "Traceback" not in err, err
    assert "free some space and run the same command again" in err
    if failure == "torch":
        assert "PytorchStreamWriter failed writing file data/0: file write failed" in err and "the disk is full" in err
        assert "MB are free there" in err and "the earlier last.pt is intact" in err
    monkeypatch.undo()
    assert (out / "last.pt").read_bytes() == before, "the previous checkpoint is intact"
    assert sorted(p.name for p in out.iterdir()) == [".run.lock", "history.json", "last.pt"], (
        "no temporary file is left"
    )


def test_errors_the_package_raises_are_one_line(tmp_path, monkeypatch, capsys):
    import transformer_lessons.run as training_run
    from transformer_lessons import errors
    from transformer_lessons.pretrained import PretrainedError

    kinds = [
        errors.DataError,
        errors.CheckpointError,
        errors.TrainingError,
        errors.DivergedError,
        errors.RunInUseError,
        errors.ResumeMismatchError,
        PretrainedError,
    ]
    for kind in kinds:

        def fail(*args, **kwargs):
            raise kind("the run in runs/x was trained with other settings:\n  epochs: 1 -> 2\n")

        monkeypatch.setattr(training_run, "train", fail)
        assert main(["train", "--preset", "quick", "--out", str(tmp_path / "run")]) == 2, kind
        assert (
            capsys.readouterr().err == "error: the run in runs/x was trained with other settings: epochs: 1 -> 2\n"
        ), kind


def test_ctrl_c_during_train_exits_130_without_a_traceback(tmp_path, monkeypatch, capsys):
    import transformer_lessons.run as training_run

    def interrupted(*args, **kwargs):
        print("interrupted: saved last.pt (step 3); run again with resume to continue")  # what the train loop prints
        raise KeyboardInterrupt

    monkeypatch.setattr(training_run, "train", interrupted)
    assert main(["train", "--preset", "quick", "--out", str(tmp_path / "run")]) == 130
    out, err = capsys.readouterr()
    assert "saved last.pt" in out and err == "interrupted\n"


# Runs the command line with spaCy unimportable, as on the GPU machine: None in sys.modules makes
# `import spacy` raise ImportError. Prints each command's exit status.
NO_SPACY = """
import sys
sys.modules["spacy"] = None
from transformer_lessons.__main__ import main
for args in sys.argv[1:]:
    print("exit", main(args.split("|")), flush=True)
assert sys.modules["spacy"] is None
"""


def test_the_gpu_path_needs_no_spacy(tmp_path, toy_corpus_file):
    out, corpus = tmp_path / "run", str(toy_corpus_file)
    commands = [
        [
            "train",
            "--preset",
            "quick",
            "--corpus",
            corpus,
            "--out",
            str(out),
            "--max-steps",
            "2",
            "--quiet",
            "--device",
            "cpu",
        ],
        [
            "evaluate",
            "--checkpoint",
            str(out / "last.pt"),
            "--corpus",
            corpus,
            "--beam",
            "2",
            "--limit",
            "4",
            "--device",
            "cpu",
        ],
        ["translate", "Ein Hund läuft.", "--checkpoint", str(out / "last.pt"), "--device", "cpu"],
    ]
    run = [sys.executable, "-c", NO_SPACY, *("|".join(c) for c in commands)]
    result = subprocess.run(run, capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stdout + result.stderr[-2000:]
    assert [line for line in result.stdout.splitlines() if line.startswith("exit")] == ["exit 0", "exit 0", "exit 2"], (
        result.stdout
    )
    assert "stopped after 2 steps" in result.stdout and "signature: nrefs:1|case:mixed" in result.stdout
    # Only translate needs spaCy (new sentences must be tokenized); its message says so and names the way around it.
    assert "pip install spacy" in result.stderr and "evaluate --corpus" in result.stderr


@pytest.mark.skipif(not DATA_DIR.is_dir(), reason="Multi30k files not available")
def test_quick_preset_on_real_data_as_a_subprocess(tmp_path):
    out = tmp_path / "run"
    env = dict(os.environ, TRANSFORMER_LESSONS_DATA=str(DATA_DIR))
    train = [
        sys.executable,
        "-m",
        "transformer_lessons",
        "train",
        "--preset",
        "quick",
        "--limit",
        "200",
        "--epochs",
        "1",
    ]
    train += ["--out", str(out), "--bleu-val-limit", "16", "--no-test", "--quiet"]
    result = subprocess.run(train, capture_output=True, text=True, env=env, timeout=300)
    assert result.returncode == 0, result.stderr[-2000:]
    assert "best validation BLEU" in result.stdout and (out / "best.pt").is_file()
    translate = [
        sys.executable,
        "-m",
        "transformer_lessons",
        "translate",
        "Ein Mann fährt Fahrrad.",
        "--checkpoint",
        str(out / "best.pt"),
        "--beam",
        "2",
    ]
    result = subprocess.run(translate, capture_output=True, text=True, env=env, timeout=120)
    assert result.returncode == 0, result.stderr[-2000:]
    assert len(result.stdout.strip().splitlines()) == 1


@pytest.mark.skipif(not DATA_DIR.is_dir(), reason="Multi30k files not available")
def test_prepare_and_train_with_subwords(tmp_path, capsys):
    from transformer_lessons.data import Corpus

    corpus_file = tmp_path / "bpe.json.gz"
    prepare = [
        "prepare",
        "--preset",
        "quick",
        "--limit",
        "300",
        "--bpe-merges",
        "200",
        "--out",
        str(corpus_file),
        "--data-dir",
        str(DATA_DIR),
    ]
    assert main(prepare) == 0
    corpus = Corpus.load(corpus_file)
    assert corpus.info["bpe_merges"] == 200 and len(corpus.src_vocab.bpe) == 200 and len(corpus.tgt_vocab.bpe) == 200
    out = tmp_path / "run"
    train = ["train", "--preset", "quick", "--corpus", str(corpus_file), "--bpe-merges", "200", "--epochs", "1"]
    assert main(train + ["--out", str(out), "--bleu-val-limit", "8", "--no-test", "--quiet", "--device", "cpu"]) == 0
    capsys.readouterr()
    assert (
        main(
            [
                "translate",
                "Ein Mann fährt Fahrrad.",
                "--checkpoint",
                str(out / "best.pt"),
                "--beam",
                "1",
                "--device",
                "cpu",
            ]
        )
        == 0
    )
    assert "@@" not in capsys.readouterr().out, "pieces are joined into words"
    assert main(prepare[:-4] + ["--bpe-merges", "-1", "--out", str(corpus_file)]) == 2
    assert "--bpe-merges must be 0" in capsys.readouterr().err


GPU_RUN = Path(__file__).resolve().parents[1] / "scripts" / "gpu_run.sh"


@pytest.mark.skipif(
    not (shutil.which("bash") and shutil.which("timeout") and shutil.which("tee")), reason="needs bash, timeout and tee"
)
@pytest.mark.parametrize("budget", ["300", None], ids=["with-budget", "no-budget"])
def test_gpu_run_script_on_a_cpu(tmp_path, budget):
    # The whole GPU run of results/README.md, shrunk: a toy corpus, one epoch, greedy test, no benchmark.
    # With a BUDGET the script guards its time; without one (any GPU machine) it runs to the end, and with no
    # COMMIT given it records the checkout's own.
    corpus = tmp_path / "corpus.json.gz"
    toy_corpus({"train": 100, "val": 6, "test_2016_flickr": 6}).save(corpus)
    bin_dir = tmp_path / "bin"  # the GPU machine's `python3` is the one with torch: here, this interpreter
    bin_dir.mkdir()
    (bin_dir / "python3").write_text(f'#!/bin/sh\nexec "{sys.executable}" "$@"\n')
    (bin_dir / "python3").chmod(0o755)
    out, run = tmp_path / "out", tmp_path / "run"
    env = dict(
        os.environ,
        PATH=f"{bin_dir}{os.pathsep}{os.environ['PATH']}",
        OUT=str(out),
        RUN_DIR=str(run),
        DEVICE="cpu",
        BENCH_STEPS="0",
        TRAIN_ARGS="--epochs 1 --beam 1 --bleu-val-limit 4",
    )
    env.pop("BUDGET", None)
    env.pop("COMMIT", None)
    if budget:
        env.update(BUDGET=budget, COMMIT="0123abc")
    result = subprocess.run(
        ["bash", str(GPU_RUN), "3", str(corpus)], capture_output=True, text=True, env=env, timeout=280
    )
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-2000:]
    names = sorted(p.name for p in (out / "full").iterdir())
    assert names == ["command.txt", "history.json", "metrics.json", "model_fp16.pt", "test_hypotheses.txt", "train.log"]
    command = (out / "full" / "command.txt").read_text()
    assert "train: python3 -m transformer_lessons train --preset full" in command
    if budget:
        assert "commit: 0123abc" in command
    else:
        head = subprocess.run(["git", "rev-parse", "HEAD"], cwd=GPU_RUN.parents[1], capture_output=True, text=True)
        if head.returncode == 0:  # a checkout: its commit is recorded (with +uncommitted when it has changes)
            assert f"commit: {head.stdout.strip()}" in command
    assert "--max-minutes 3 --device cpu --quiet --epochs 1" in command
    log = (out / "full" / "train.log").read_text()
    assert "sacrebleu 2." in log and "\nepoch   1  step" in log and "\ntest_2016_flickr: sacreBLEU" in log
    assert "model_fp16.pt:" in log and "== done" in log and "\r" not in log
    assert (f"budget {budget} s" if budget else "budget none") in log
    assert (run / "train.log").read_text() == log, "the run directory keeps the same log"
    assert len((out / "full" / "test_hypotheses.txt").read_text().splitlines()) == 6
