"""Tests of transformer_lessons.beam_tree: the recorded search is beam search, and its numbers add up.

A hand-made "model" whose next-token probabilities are a table of the prefix gives a tree worked out
by hand (greedy takes the likelier first word, beam search finds the likelier sentence); small random
models give many trees, each compared with ``beam_search`` itself and with teacher forcing.
"""

from __future__ import annotations

import math

import pytest
import torch

from transformer_lessons.beam import beam_search, length_penalty
from transformer_lessons.beam_tree import DROPPED, FINISHED, KEPT, BeamTree, beam_tree, sentence_beam_tree
from transformer_lessons.config import ModelConfig
from transformer_lessons.confidence import token_log_probs
from transformer_lessons.decode import greedy_decode
from transformer_lessons.model import Transformer

UNK, PAD, BOS, EOS, A, B = range(6)
TABLE_WORDS = ["<unk>", "<pad>", "<bos>", "<eos>", "a", "b"]


class TableModel(torch.nn.Module):
    """A stand-in decoder: the next token's probabilities (over the six ids above) are a table of the prefix."""

    TABLE = {  # prefix after <bos> -> P(unk, pad, bos, eos, a, b)
        (): [0.03, 0.02, 0.01, 0.04, 0.50, 0.40],
        (A,): [0.04, 0.03, 0.03, 0.20, 0.36, 0.34],
        (B,): [0.02, 0.02, 0.02, 0.90, 0.02, 0.02],
        (A, A): [0.05, 0.05, 0.05, 0.50, 0.20, 0.15],
        (A, B): [0.05, 0.05, 0.05, 0.50, 0.15, 0.20],
    }
    OTHERWISE = [0.05, 0.05, 0.05, 0.55, 0.15, 0.15]

    def encode(self, src, src_mask=None):
        return torch.zeros(src.size(0), src.size(1), 4)  # (B, S, D): the table ignores the source

    def decode(self, memory, src_mask, tgt, tgt_mask=None):
        rows, T = tgt.shape
        logits = torch.empty(rows, T, len(TABLE_WORDS))  # (B, T, V)
        for r in range(rows):
            for t in range(T):
                probs = self.TABLE.get(tuple(tgt[r, 1 : t + 1].tolist()), self.OTHERWISE)
                logits[r, t] = torch.tensor(probs).log()
        return logits


def random_model(vocab_size: int = 12, seed: int = 0, eos_bias: float = 2.0) -> Transformer:
    """A small random Transformer in eval mode; ``eos_bias`` lets sentences end, so lengths (and α) matter."""
    torch.manual_seed(seed)
    config = ModelConfig(n_layers=2, d_model=32, n_heads=4, d_ff=64, dropout=0.0, max_len=40, tie_embeddings=False)
    model = Transformer(config, vocab_size, vocab_size).eval()
    with torch.no_grad():
        model.generator.bias[EOS] += eos_bias
    return model


def _random_source(vocab_size: int, seed: int, length: int = 6) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    return torch.randint(4, vocab_size, (1, length), generator=g)  # (1, S)


def _until_eos(ids: list[int]) -> list[int]:
    return ids[: ids.index(EOS) + 1] if EOS in ids else ids


def _beam_search_answer(model, src, K: int, alpha: float, max_new_tokens: int) -> tuple[list[int], torch.Tensor]:
    ys, scores = beam_search(model, src, None, max_new_tokens, BOS, EOS, K, alpha, return_scores=True)
    return _until_eos(ys[0, 1:].tolist()), scores[0]


def _summary(tree: BeamTree, step: int) -> list[tuple[str, str]]:
    """The candidates of ``step`` as (their words after <bos>, status), best first."""
    return [(" ".join(TABLE_WORDS[t] for t in tree.tokens(n.id)), n.status) for n in tree.at_step(step)]


# --------------------------------------------------------------------------------------
# A tree worked out by hand
# --------------------------------------------------------------------------------------


def test_the_hand_made_tree_keeps_finishes_and_drops_what_beam_search_does():
    tree = beam_tree(TableModel().eval(), [7, 8, 3], BOS, EOS, beam_size=2, length_penalty=0.0, max_new_tokens=6)
    assert _summary(tree, 1) == [("a", KEPT), ("b", KEPT), ("<eos>", DROPPED), ("<unk>", DROPPED)]
    # "b <eos>" (0.4 * 0.9 = 0.36) beats "a a" (0.5 * 0.36 = 0.18) and finishes; the eos ranked 4th is dropped.
    assert _summary(tree, 2) == [("b <eos>", FINISHED), ("a a", KEPT), ("a b", KEPT), ("a <eos>", DROPPED)]
    # Two finished (K): the search stops, and "a b <eos>", ranked among the first K, finds no room.
    assert _summary(tree, 3) == [
        ("a a <eos>", FINISHED),
        ("a b <eos>", DROPPED),
        ("a a a", DROPPED),
        ("a b b", DROPPED),
    ]
    assert tree.n_steps == 3 and [n.token for n in tree.finished] == [EOS, EOS]
    assert tree.winner_tokens == [B, EOS] and tree.score == pytest.approx(math.log(0.4 * 0.9))
    assert tree.nodes[tree.winner].cum_logp == pytest.approx(math.log(0.36))
    assert tree.greedy == [A, A, EOS]  # greedy takes "a" (0.5 > 0.4) and never sees "b <eos>"
    assert [n.token for n in tree.greedy_nodes()] == [A, A, EOS] and tree.parting_step == 1
    words, score = _beam_search_answer(TableModel().eval(), torch.tensor([[7, 8, 3]]), 2, 0.0, 6)
    assert words == tree.winner_tokens and float(score) == pytest.approx(tree.score)


def test_at_max_new_tokens_the_first_k_finish_cut_off():
    tree = beam_tree(TableModel().eval(), [7, 3], BOS, EOS, beam_size=2, length_penalty=0.6, max_new_tokens=1)
    assert _summary(tree, 1) == [("a", FINISHED), ("b", FINISHED), ("<eos>", DROPPED), ("<unk>", DROPPED)]
    assert tree.winner_tokens == [A] and tree.score == pytest.approx(math.log(0.5) / length_penalty(1, 0.6))
    assert _beam_search_answer(TableModel().eval(), torch.tensor([[7, 3]]), 2, 0.6, 1)[0] == [A]


# --------------------------------------------------------------------------------------
# The same answer as beam_search, and numbers that add up
# --------------------------------------------------------------------------------------


@pytest.mark.parametrize("alpha", [0.0, 0.6, 1.0])
@pytest.mark.parametrize("beam_size", [1, 2, 4])
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_the_winner_and_its_score_are_beam_searchs(seed, beam_size, alpha):
    model, src = random_model(seed=seed), _random_source(12, seed)
    tree = beam_tree(model, src, BOS, EOS, beam_size, alpha, max_new_tokens=15)
    words, score = _beam_search_answer(model, src, beam_size, alpha, 15)
    assert tree.winner_tokens == words
    assert torch.tensor(tree.score, dtype=torch.float32) == score  # the same float32, not just close
    assert all(len(tree.at_step(t)) <= 2 * beam_size for t in range(1, tree.n_steps + 1)), "at most 2K candidates"


def test_the_length_penalty_changes_the_winner_as_it_changes_beam_searchs():
    # The comparison above is not idle: on some sentences α picks another hypothesis, and the tree follows.
    changed = 0
    for seed in range(12):
        model, src = random_model(seed=seed), _random_source(12, seed)
        winners = {}
        for alpha in (0.0, 2.0):
            tree = beam_tree(model, src, BOS, EOS, 4, alpha, max_new_tokens=15)
            assert tree.winner_tokens == _beam_search_answer(model, src, 4, alpha, 15)[0]
            winners[alpha] = tree.winner_tokens
        changed += winners[0.0] != winners[2.0]
        assert len(winners[2.0]) >= len(winners[0.0]), "a larger α never favours a shorter output"
    assert changed >= 1


@pytest.mark.parametrize("seed", [0, 3])
def test_the_scores_add_up_along_every_path(seed):
    model, src = random_model(seed=seed), _random_source(12, seed)
    tree = beam_tree(model, src, BOS, EOS, beam_size=4, length_penalty=0.6, max_new_tokens=12)
    by_id = {node.id: node for node in tree.nodes}
    assert [node.id for node in tree.nodes] == list(range(len(tree.nodes)))
    for node in tree.nodes[1:]:
        parent = by_id[node.parent]
        assert parent.status == KEPT and parent.step == node.step - 1, "only kept prefixes are extended"
        assert node.cum_logp == pytest.approx(parent.cum_logp + node.token_logp, abs=1e-5)
        # Teacher forcing on the node's whole hypothesis gives the same log-probabilities: an independent reference.
        forced = token_log_probs(model, src[0].tolist(), tree.tokens(node.id), BOS)
        assert node.token_logp == pytest.approx(float(forced[-1]), abs=1e-4)
        assert node.cum_logp == pytest.approx(float(forced.sum()), abs=1e-4)
        if node.status == FINISHED:
            assert node.score == node.cum_logp / length_penalty(node.step, 0.6)
            assert node.token == EOS or node.step == tree.max_new_tokens
        else:
            assert node.score is None
    for step in range(1, tree.n_steps + 1):
        nodes = tree.at_step(step)
        assert [n.rank for n in nodes] == sorted(n.rank for n in nodes)
        assert all(a.cum_logp >= b.cum_logp for a, b in zip(nodes, nodes[1:])), "best first"
        assert sum(n.status == KEPT for n in nodes) <= 4
    assert len(tree.finished) <= 4
    assert tree.score == max(n.score for n in tree.finished) and tree.nodes[tree.winner].status == FINISHED


@pytest.mark.parametrize("seed", [0, 1, 2, 3])
def test_a_beam_of_one_is_the_greedy_path(seed):
    model, src = random_model(seed=seed), _random_source(12, seed)
    tree = beam_tree(model, src, BOS, EOS, beam_size=1, max_new_tokens=15)
    greedy = _until_eos(greedy_decode(model, src, None, 15, BOS, EOS)[0, 1:].tolist())
    assert tree.greedy == greedy and tree.winner_tokens == greedy and tree.parting_step is None
    assert [n.token for n in tree.greedy_nodes()] == greedy
    for step in range(1, tree.n_steps + 1):  # one prefix alive: each step one survivor (or the one finished)
        assert sum(n.status in (KEPT, FINISHED) for n in tree.at_step(step)) == 1


@pytest.mark.parametrize("seed", [0, 1])
def test_a_vocabulary_smaller_than_the_beam_leaves_no_placeholder_in_the_tree(seed):
    # With V = 6 and K = 4, step 1 has only 6 real candidates among the 2K = 8 beam search ranks: the others
    # extend the -inf copies of <bos>, which the tree leaves out.
    model, src = random_model(vocab_size=6, seed=seed, eos_bias=0.0), _random_source(6, seed)
    tree = beam_tree(model, src, BOS, EOS, beam_size=4, length_penalty=0.6, max_new_tokens=10)
    assert len(tree.at_step(1)) == 6 and all(math.isfinite(n.cum_logp) for n in tree.nodes)
    words, score = _beam_search_answer(model, src, 4, 0.6, 10)
    assert tree.winner_tokens == words and torch.tensor(tree.score, dtype=torch.float32) == score


# --------------------------------------------------------------------------------------
# A German sentence, and bad input
# --------------------------------------------------------------------------------------


def test_a_sentence_is_read_as_translate_reads_it():
    from transformer_lessons.data import SPECIALS, Tokenizer, Vocab
    from transformer_lessons.translation import translate

    src_vocab = Vocab([*SPECIALS, "Ein", "Mann", "fährt", "Fahrrad", "."])
    tgt_vocab = Vocab([*SPECIALS, "A", "man", "rides", "a", "bike", "."])
    torch.manual_seed(0)
    config = ModelConfig(n_layers=1, d_model=32, n_heads=2, d_ff=64, dropout=0.0, max_len=12, tie_embeddings=False)
    model = Transformer(config, len(src_vocab), len(tgt_vocab)).eval()
    for beam_size in (1, 3):
        tree = sentence_beam_tree(model, "Ein Mann fährt Fahrrad.", src_vocab, tgt_vocab, beam_size=beam_size)
        assert tree.src_ids == src_vocab.encode(["Ein", "Mann", "fährt", "Fahrrad", "."]) + [src_vocab.eos_id]
        expected = translate(
            model,
            "Ein Mann fährt Fahrrad.",
            beam_size=beam_size,
            src_vocab=src_vocab,
            tgt_vocab=tgt_vocab,
            use_cache=False,
        )
        assert Tokenizer("en").detokenize(tgt_vocab.decode_words(tree.winner_tokens)) == expected
        assert tree.max_new_tokens == 12  # the source's 6 ids + 50, capped at max_len
    assert sentence_beam_tree(model, "   ", src_vocab, tgt_vocab) is None


@pytest.mark.parametrize(
    "change, error, words",
    [
        ({"src_ids": torch.tensor([[5, 6, 3], [7, 8, 3]])}, ValueError, "one sentence"),
        ({"src_ids": [[5, 6, 3], [7, 8, 3]]}, ValueError, "src[0]"),
        ({"src_ids": torch.tensor([0.5, 1.0])}, ValueError, "ids"),
        ({"src_ids": []}, ValueError, "ids"),
        ({"beam_size": 0}, ValueError, "beam_size"),
        ({"beam_size": 2.5}, ValueError, "beam_size"),
        ({"length_penalty": -1.0}, ValueError, ">= 0"),
        ({"max_new_tokens": 0}, ValueError, "max_new_tokens"),
    ],
)
def test_bad_input_gets_one_clear_line(change, error, words):
    arguments = {"src_ids": [5, 6, 3], "beam_size": 2, "length_penalty": 0.6, "max_new_tokens": 5} | change
    with pytest.raises(error) as caught:
        beam_tree(random_model(), bos_id=BOS, eos_id=EOS, **arguments)
    assert words in str(caught.value) and "\n" not in str(caught.value)


def test_a_model_in_training_mode_is_refused():
    model = random_model().train()
    with pytest.raises(ValueError, match=r"model\.eval\(\)"):
        beam_tree(model, [5, 6, 3], BOS, EOS)
