"""Checkpoint averaging (paper §6.1): the mean of the last epochs' weights, kept, averaged and tested by a run."""

from __future__ import annotations

import json

import pytest
import torch

from transformer_lessons.averaging import (
    average_last_epochs,
    average_state_dicts,
    epoch_weights_path,
    save_epoch_weights,
    saved_epochs,
)
from transformer_lessons.checkpoint import load_checkpoint
from transformer_lessons.errors import CheckpointError
from transformer_lessons.model import Transformer
from transformer_lessons.run import train

from test_train import TOY_CONFIG, TOY_MODEL, toy_corpus


def test_the_mean_of_state_dicts_is_the_element_wise_mean():
    states = [
        {"w": torch.tensor([1.0, 2.0]), "h": torch.tensor([0.5], dtype=torch.float16), "n": torch.tensor(3)},
        {"w": torch.tensor([3.0, 6.0]), "h": torch.tensor([1.5], dtype=torch.float16), "n": torch.tensor(3)},
    ]
    mean = average_state_dicts(states)
    assert torch.equal(mean["w"], torch.tensor([2.0, 4.0]))
    assert mean["h"].dtype == torch.float16 and mean["h"].item() == 1.0, (
        "a half tensor averages in float32, comes back half"
    )
    assert mean["n"].item() == 3 and mean["n"].dtype == torch.int64
    assert torch.equal(average_state_dicts(states[:1])["w"], states[0]["w"]), "one state is its own mean"


def test_states_that_cannot_be_averaged_are_refused():
    with pytest.raises(ValueError, match="nothing to average"):
        average_state_dicts([])
    with pytest.raises(ValueError, match="state 1 is not of the same model"):
        average_state_dicts([{"w": torch.zeros(2)}, {"w": torch.zeros(3)}])
    with pytest.raises(ValueError, match="n is not a float and differs"):
        average_state_dicts([{"n": torch.tensor(1)}, {"n": torch.tensor(2)}])


def test_a_model_with_averaged_weights_is_the_mean_of_the_models():
    # For the linear output layer, the averaged model's logits are the mean of the models' logits on the same input.
    torch.manual_seed(0)
    models = [Transformer(TOY_MODEL, 11, 13) for _ in range(3)]
    mean = average_state_dicts([m.state_dict() for m in models])
    averaged = Transformer(TOY_MODEL, 11, 13)
    averaged.load_state_dict(mean)
    x = torch.randn(2, TOY_MODEL.d_model)
    expected = torch.stack([m.generator(x) for m in models]).mean(0)
    assert torch.allclose(averaged.generator(x), expected, atol=1e-6)
    for name, weight in averaged.state_dict().items():
        assert torch.allclose(weight, torch.stack([m.state_dict()[name] for m in models]).mean(0), atol=1e-7), name


def test_only_the_last_epochs_are_kept(tmp_path):
    model = torch.nn.Linear(2, 2)
    for epoch in range(1, 6):
        with torch.no_grad():
            model.weight.fill_(epoch)
        save_epoch_weights(tmp_path, epoch, model, keep=3)
    assert saved_epochs(tmp_path) == [3, 4, 5]
    weights, epochs = average_last_epochs(tmp_path, 2)
    assert epochs == [4, 5] and torch.all(weights["weight"] == 4.5)
    epoch_weights_path(tmp_path, 4).write_bytes(b"not a checkpoint")
    with pytest.raises(CheckpointError, match="epoch_004.pt: cannot be read to average"):
        average_last_epochs(tmp_path, 2)


def test_a_run_with_average_last_tests_the_mean_of_its_last_epochs(tmp_path):
    corpus = toy_corpus()
    result = train(TOY_CONFIG.replace(epochs=3, average_last=2), corpus, out_dir=tmp_path, device="cpu", progress=False)
    assert saved_epochs(tmp_path) == [2, 3], "the last two epochs' weights are kept, the first deleted"
    metrics = json.loads((tmp_path / "metrics.json").read_text())
    assert metrics["tested"] == "averaged.pt" and metrics["averaged"]["epochs"] == [2, 3]
    assert metrics["train_config"]["average_last"] == 2 and result["test"] == metrics["test_2016_flickr"]
    model = load_checkpoint(tmp_path / "averaged.pt", "cpu")[0]
    mean, _ = average_last_epochs(tmp_path, 2)
    assert all(torch.equal(model.state_dict()[k], mean[k]) for k in mean), "averaged.pt holds the mean"


def test_a_run_without_averaging_tests_best_pt_and_keeps_no_epochs(tmp_path):
    train(TOY_CONFIG.replace(epochs=1), toy_corpus(), out_dir=tmp_path, device="cpu", progress=False)
    metrics = json.loads((tmp_path / "metrics.json").read_text())
    assert metrics["tested"] == "best.pt" and metrics["averaged"] is None
    assert saved_epochs(tmp_path) == [] and not (tmp_path / "averaged.pt").exists()


def test_average_last_must_be_a_whole_number():
    with pytest.raises(ValueError, match="average_last must be a whole number >= 1, got 0"):
        TOY_CONFIG.replace(average_last=0)


def test_a_run_stopped_before_its_first_epoch_ended_tests_its_model_instead_of_failing(tmp_path, capsys):
    config = TOY_CONFIG.replace(epochs=3, average_last=2, max_minutes=1e-5)  # the time limit falls in epoch 1
    train(config, toy_corpus(), out_dir=tmp_path, device="cpu", progress=False, log=True)
    metrics = json.loads((tmp_path / "metrics.json").read_text())
    assert saved_epochs(tmp_path) == [] and metrics["averaged"] is None
    assert "nothing to average" in capsys.readouterr().out
