"""scripts/since_2017.py, the lab of later changes to the Transformer, on a toy scale (its real runs take ~95 minutes)."""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path

import pytest

from test_train import TOY_CONFIG, toy_corpus
from transformer_lessons.errors import DivergedError

SCRIPT = Path(__file__).resolve().parent.parent / "scripts" / "since_2017.py"


@pytest.fixture
def lab(monkeypatch):
    spec = importlib.util.spec_from_file_location("since_2017", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    monkeypatch.setitem(sys.modules, "since_2017", module)  # dataclasses look their module up while it loads
    spec.loader.exec_module(module)
    return module


def test_every_variant_changes_what_it_names_and_nothing_else(lab):
    for variant in lab.VARIANTS:
        config = lab.config_of(variant, lab.BASE, minutes=7)
        assert config.name == variant.name and config.max_minutes == (variant.minutes or 7)
        for key, value in variant.model.items():
            assert getattr(config.model, key) == value
        for key, value in variant.train.items():
            assert getattr(config, key) == value
        changed = {k for k, v in config.model.to_dict().items() if v != lab.BASE.model.to_dict()[k]}
        assert changed == set(variant.model), variant.name
    baselines = [v for v in lab.VARIANTS if v.name.startswith("baseline")]
    assert len(baselines) >= 3 and len({v.train["seed"] for v in baselines}) == len(baselines), (
        "the noise needs 3 seeds"
    )


def test_the_lab_records_every_run_and_resumes(tmp_path, lab, monkeypatch, capsys):
    corpus_file = tmp_path / "toy.json.gz"
    toy_corpus().save(corpus_file)
    monkeypatch.setattr(lab, "BASE", TOY_CONFIG.replace(epochs=2))
    monkeypatch.setattr(
        lab,
        "VARIANTS",
        [
            lab.Variant("baseline_s0"),
            lab.Variant("baseline_s1", train={"seed": 1}),
            lab.Variant("rotary", model={"positional": "rotary"}),
            lab.Variant("unstable", train={"warmup": 1}, group="warmup"),
        ],
    )
    from transformer_lessons import run

    real = run.train

    def train(config, **kwargs):
        if config.name == "unstable":
            raise DivergedError("the loss is nan at step 3")
        return real(config, **kwargs)

    monkeypatch.setattr(run, "train", train)
    args = [
        "--corpus",
        str(corpus_file),
        "--out",
        str(tmp_path / "out"),
        "--runs",
        str(tmp_path / "runs"),
        "--minutes",
        "5",
    ]
    assert lab.main(args) == 0
    record = json.loads((tmp_path / "out" / "results.json").read_text())
    runs = {r["name"]: r for r in record["runs"]}
    assert list(runs) == ["baseline_s0", "baseline_s1", "rotary", "unstable"]
    assert runs["unstable"]["diverged"] == "the loss is nan at step 3"
    assert runs["rotary"]["changes"] == {"positional": "rotary"} and 0 <= runs["rotary"]["test_bleu"] <= 100
    assert (tmp_path / "out" / "rotary" / "metrics.json").is_file()
    assert set(record["long"]) == {"baseline_s0", "rotary"}
    assert all(
        sum(b["n"] for b in buckets.values()) == len(toy_corpus().text["test_2016_flickr"]) // 2
        for buckets in record["long"].values()
    )
    out = capsys.readouterr().out
    assert "baseline test BLEU: mean" in out and "unstable" in out and "diverged" in out
    assert lab.main(args) == 0  # again: every run is recorded already, nothing trains
    assert capsys.readouterr().out.count("recorded already") == 4


def test_joined_pairs_and_buckets(lab):
    pairs = [("a b", "x"), ("c", "y z"), ("d", "w")]
    assert lab.joined_pairs(pairs) == [("a b c", "x y z")]
    scores = lab.bleu_by_length(
        ["the cat sat on the mat", "a dog"],
        [(" ".join(["w"] * 5), "the cat sat on the mat"), (" ".join(["w"] * 25), "a dog ran")],
    )
    assert scores["0-20"]["n"] == 1 and scores["0-20"]["bleu"] == pytest.approx(100.0) and scores["21-30"]["n"] == 1


def test_unknown_runs_are_refused(lab, capsys):
    with pytest.raises(SystemExit):
        lab.main(["--only", "nonsense"])
    assert "no run called nonsense" in capsys.readouterr().err
    assert lab.main(["--list"]) == 0


def test_labs_run_side_by_side_merge_into_one_record_in_the_labs_order(tmp_path, lab):
    for part, names in (("a", ["rotary", "baseline_s1"]), ("b", ["baseline_s0"])):
        folder = tmp_path / "parts" / part
        for name in names:
            (folder / name).mkdir(parents=True)
            (folder / name / "metrics.json").write_text("{}")
        runs = [{"name": n, "test_bleu": 1.0} for n in names]
        (folder / "results.json").write_text(json.dumps({"device": "cuda", "runs": runs, "long": {"x": 1}}))
    (tmp_path / "parts" / "failed").mkdir()  # a part that wrote nothing is left out
    record = lab.merge(sorted((tmp_path / "parts").iterdir()), tmp_path / "out")
    assert [r["name"] for r in record["runs"]] == ["baseline_s0", "baseline_s1", "rotary"]
    assert record["parts"] == [["rotary", "baseline_s1"], ["baseline_s0"]] and record["long"] == {"x": 1}
    assert (tmp_path / "out" / "rotary" / "metrics.json").is_file()
    assert json.loads((tmp_path / "out" / "results.json").read_text()) == record
    with pytest.raises(SystemExit, match="nothing to merge"):
        lab.merge([tmp_path / "parts" / "failed"], tmp_path / "out2")


def test_the_lab_base_is_the_one_its_recorded_runs_used(lab):
    """Issue 31 moved the cpu preset to the to_end schedule and bfloat16; lab.BASE, made from it, followed silently,
    and the next runs of the lab were not comparable with its record (they were discarded). The record says which."""
    recorded = json.loads((SCRIPT.parent.parent / "results" / "since_2017" / "results.json").read_text())["base"]
    assert lab.base_differences(recorded, lab.BASE) == []
    moved = lab.BASE.replace(schedule="to_end", precision="native")
    assert lab.base_differences(recorded, moved) == [
        "schedule: the record's 'noam', now 'to_end'",
        "precision: the record's 'auto', now 'native'",
    ]


def test_the_lab_refuses_to_add_runs_to_a_record_of_another_base(tmp_path, lab, monkeypatch, capsys):
    corpus_file = tmp_path / "toy.json.gz"
    toy_corpus().save(corpus_file)
    monkeypatch.setattr(lab, "BASE", TOY_CONFIG.replace(epochs=1))
    out = tmp_path / "out"
    out.mkdir()
    old = json.loads(json.dumps(TOY_CONFIG.replace(epochs=1, precision="bfloat16").to_dict()))
    (out / "results.json").write_text(json.dumps({"base": old, "runs": []}))
    with pytest.raises(SystemExit) as stopped:
        lab.main(
            ["--corpus", str(corpus_file), "--out", str(out), "--runs", str(tmp_path / "runs"), "--only", "rotary"]
        )
    assert stopped.value.code == 2
    assert "precision: the record's 'bfloat16', now 'auto'" in capsys.readouterr().err
    assert not (tmp_path / "runs").exists(), "nothing trained"
