"""What every check shares: the public error, the public names and docstrings, and the course's standard.

The course's standard for a check: at least two correct answers written differently
from the reference (einsum, a loop, another order) that it accepts, and at least
three realistic bugs that it rejects with a message naming them. Each check's own
file (``test_check_<module>.py``, named after ``transformer_lessons/checks/<module>.py``)
holds them; the feedback a learner sees is tested in test_check_feedback.py.

:data:`COVERAGE` names, per exported check, the answers and bugs that cover it and
the file each lives in; two tests hold it to the standard: every exported
``check_*`` must have a row (a new check without tests fails), and every answer or
bug named must exist in its file. The answers and bugs written differently are written
as a learner would write them, not with the checks' own bug simulations.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

import test_check_attention
import test_check_decoder_layer
import test_check_decoding
import test_check_encoder_layer
import test_check_layers
import test_check_masks
import test_check_multi_head
import test_check_positional
import test_check_schedule
import test_check_vocab
from transformer_lessons import checks
from transformer_lessons.checks import ExerciseError

TESTS = Path(__file__).resolve().parent

# --- the coverage table -------------------------------------------------------------------
# check name (without "check_") -> {"alternatives": [...], "bugs": [...]}, each entry "file::name":
# a correct answer the check accepts, or a bug it rejects naming it, and where that test lives.
# `name` is the answer's function or class, or its case id in that file's table.

_KV = "test_check_kv_cache.py"
_DDP = "test_check_distributed.py"
_MODERN = "test_check_modern.py"
COVERAGE: dict[str, dict[str, list[str]]] = {
    "scaled_dot_product_attention": {
        "alternatives": [
            "test_check_attention.py::sdpa-annotated-style",
            "test_check_attention.py::sdpa_einsum",
            "test_check_attention.py::sdpa_loop_over_batch",
        ],
        "bugs": [
            "test_check_attention.py::sdpa-no-scale",
            "test_check_attention.py::sdpa-softmax-dim",
            "test_check_attention.py::sdpa-inverted-mask",
            "test_check_attention.py::sdpa-fill-discarded",
            "test_check_attention.py::sdpa-zero-after-softmax",
            "test_check_attention.py::sdpa_einsum_one_row_per_key",
        ],
    },
    "causal_mask": {
        "alternatives": [
            "test_check_masks.py::causal-tril-of-ones",
            "test_check_masks.py::causal_arange_comparison",
            "test_check_masks.py::causal_not_triu",
            "test_check_masks.py::causal_loop",
        ],
        "bugs": [
            "test_check_masks.py::causal-no-diagonal",
            "test_check_masks.py::causal-upper",
            "test_check_masks.py::causal-inverted",
            "test_check_masks.py::causal-additive",
            "test_check_masks.py::causal_arange_strict",
        ],
    },
    "padding_mask": {
        "alternatives": [
            "test_check_masks.py::padding-unsqueeze",
            "test_check_masks.py::padding_ne_view",
            "test_check_masks.py::padding_index_none",
        ],
        "bugs": [
            "test_check_masks.py::padding-inverted",
            "test_check_masks.py::padding-2d",
            "test_check_masks.py::padding-queries",
            "test_check_masks.py::padding-float",
            "test_check_masks.py::test_padding_mask_with_a_hard_coded_pad_id_is_named",
        ],
    },
    "target_mask": {
        "alternatives": [
            "test_check_masks.py::target_tril_unsqueeze",
            "test_check_masks.py::target_logical_and_arange",
            "test_check_masks.py::target_loop",
        ],
        "bugs": [
            "test_check_masks.py::target-causal-only",
            "test_check_masks.py::target-padding-only",
            "test_check_masks.py::target-or",
            "test_check_masks.py::target-query-padding",
            "test_check_masks.py::test_target_mask_with_a_hard_coded_pad_id_is_named",
        ],
    },
    "mask_inversion": {
        "alternatives": [
            "test_check_masks.py::inversion_logical_not",
            "test_check_masks.py::inversion_eq_false",
            "test_check_masks.py::inversion_where",
        ],
        "bugs": [
            "test_check_masks.py::inversion-unchanged",
            "test_check_masks.py::inversion-arithmetic",
            "test_check_masks.py::inversion-in-place",
            "test_check_masks.py::inversion-all-true",
        ],
    },
    "positional_encoding": {
        "alternatives": [
            "test_check_positional.py::pe-exp-log",
            "test_check_positional.py::pe_double_loop",
            "test_check_positional.py::pe_pow",
            "test_check_positional.py::pe_stack_interleave",
        ],
        "bugs": [
            "test_check_positional.py::pe-swapped",
            "test_check_positional.py::pe-base-1000",
            "test_check_positional.py::pe-exponent-i",
            "test_check_positional.py::pe-start-1",
            "test_check_positional.py::pe-halves",
            "test_check_positional.py::pe_loop_column_exponent",
            "test_check_positional.py::pe_loop_column_exponent_2j",
        ],
    },
    "multi_head_attention": {
        "alternatives": [
            "test_check_multi_head.py::MHAPermuteEinsum",
            "test_check_multi_head.py::MHAHeadLoop",
            "test_check_multi_head.py::MHAWeightSlices",
        ],
        "bugs": [
            "test_check_multi_head.py::mha-no-scale",
            "test_check_multi_head.py::mha-split-view",
            "test_check_multi_head.py::mha-concat",
            "test_check_multi_head.py::mha-no-w-o",
            "test_check_multi_head.py::mha-mask-inverted",
            "test_check_multi_head.py::mha_heads_last",
            "test_check_multi_head.py::mha_keys_values_swapped",
            "test_check_multi_head.py::mha_divided_by_d_head",
        ],
    },
    "layer_norm": {
        "alternatives": [
            "test_check_layers.py::layer-norm-written-out",
            "test_check_layers.py::LayerNormSquares",
            "test_check_layers.py::LayerNormVarMean",
        ],
        "bugs": [
            "test_check_layers.py::ln-unbiased",
            "test_check_layers.py::ln-built-in-nn",
            "test_check_layers.py::ln-built-in-functional",
            "test_check_layers.py::ln-eps-outside",
            "test_check_layers.py::ln-dim0",
            "test_check_layers.py::ln-no-gain",
            "test_check_layers.py::ln_divides_by_variance",
            "test_check_layers.py::ln_whole_tensor",
        ],
    },
    "feed_forward": {
        "alternatives": [
            "test_check_layers.py::FeedForwardClamp",
            "test_check_layers.py::FeedForwardSequential",
            "test_check_layers.py::FeedForwardMatmul",
        ],
        "bugs": [
            "test_check_layers.py::ffn-no-relu",
            "test_check_layers.py::ffn_dropout_on_output",
            "test_check_layers.py::ffn_dropout_on_input",
            "test_check_layers.py::ffn-relu-twice",
            "test_check_layers.py::ffn-gelu",
            "test_check_layers.py::ffn-residual",
            "test_check_layers.py::FeedForwardNoBias",
            "test_check_layers.py::ffn_relu_on_input",
        ],
    },
    "encoder_layer": {
        "alternatives": [
            "test_check_encoder_layer.py::EncoderLayer",
            "test_check_encoder_layer.py::EncoderLayerHelper",
            "test_check_encoder_layer.py::EncoderLayerBlocks",
        ],
        "bugs": [
            "test_check_encoder_layer.py::enc-pre-norm",
            "test_check_encoder_layer.py::enc-no-residual",
            "test_check_encoder_layer.py::enc-mask-not-passed",
            "test_check_encoder_layer.py::enc-norms-swapped",
            "test_check_encoder_layer.py::enc_feed_forward_first",
            "test_check_encoder_layer.py::enc_no_residual_feed_forward",
        ],
    },
    "decoder_layer": {
        "alternatives": [
            "test_check_decoder_layer.py::DecoderLayer",
            "test_check_decoder_layer.py::DecoderLayerHelper",
            "test_check_decoder_layer.py::DecoderLayerBlocks",
        ],
        "bugs": [
            "test_check_decoder_layer.py::dec-no-causal",
            "test_check_decoder_layer.py::dec-cross-on-x",
            "test_check_decoder_layer.py::dec-masks-swapped",
            "test_check_decoder_layer.py::dec-pre-norm",
            "test_check_decoder_layer.py::DecoderLayerCrossWiring",
            "test_check_decoder_layer.py::dec_cross_attention_first",
            "test_check_decoder_layer.py::dec_no_residual_self_attention",
        ],
    },
    "sees_future": {
        "alternatives": [
            "test_check_sees_future.py::leak_test_jacobian",
            "test_check_sees_future.py::leak_test_future_at_once",
        ],
        "bugs": [
            "test_check_sees_future.py::leak-no-mask",
            "test_check_sees_future.py::leak-no-eval",
            "test_check_sees_future.py::leak-position-4-only",
            "test_check_sees_future.py::leak-attention-weights",
        ],
    },
    "noam_rate": {
        "alternatives": [
            "test_check_schedule.py::noam-tensor",
            "test_check_schedule.py::noam_branch",
            "test_check_schedule.py::noam_sqrt",
        ],
        "bugs": [
            "test_check_schedule.py::noam-no-warmup",
            "test_check_schedule.py::noam-exponent",
            "test_check_schedule.py::noam-d-model",
            "test_check_schedule.py::noam-max",
            "test_check_schedule.py::noam-factor-ignored",
            "test_check_schedule.py::noam_branch_flipped",
        ],
    },
    "build_vocab": {
        "alternatives": [
            "test_check_vocab.py::build_vocab_by_hand",
            "test_check_vocab.py::build_vocab_two_sorts",
            "test_check_vocab.py::vocab_most_common_then_sorted",
            "test_check_vocab.py::vocab_defaultdict_items",
        ],
        "bugs": [
            "test_check_vocab.py::greater_than",
            "test_check_vocab.py::lowercased",
            "test_check_vocab.py::alphabetical",
            "test_check_vocab.py::most_common_ties",
            "test_check_vocab.py::once_per_sentence",
        ],
    },
    "greedy_decode": {
        "alternatives": [
            "test_check_decoding.py::learner_loop",
            "test_check_decoding.py::reencode_each_step",
            "test_check_decoding.py::no_early_stop",
            "test_check_decoding.py::greedy_preallocated",
            "test_check_decoding.py::greedy_columns_stack",
            "test_check_decoding.py::greedy_one_sentence_at_a_time",
        ],
        "bugs": [
            "test_check_decoding.py::no_feedback",
            "test_check_decoding.py::first_position",
            "test_check_decoding.py::last_token_only",
            "test_check_decoding.py::no_causal_mask",
            "test_check_decoding.py::stop_at_first_eos",
        ],
    },
    # The nine newer checks, covered in their own files.
    "embedding_scale": {
        "alternatives": [
            "test_check_embeddings.py::embedding_indexing",
            "test_check_embeddings.py::embedding_scaled_table_copy",
            "test_check_embeddings.py::embedding_tensor_sqrt",
        ],
        "bugs": [
            "test_check_embeddings.py::embedding_no_scale",
            "test_check_embeddings.py::embedding_divided",
            "test_check_embeddings.py::embedding_times_d",
        ],
    },
    "learned_positions": {
        "alternatives": [
            "test_check_embeddings.py::positions_parameter",
            "test_check_embeddings.py::positions_batch_shaped",
        ],
        "bugs": [
            "test_check_embeddings.py::positions_from_one",
            "test_check_embeddings.py::positions_rows_only",
            "test_check_embeddings.py::positions_row_zero",
        ],
    },
    "greedy_loop": {
        "alternatives": [
            "test_check_generation.py::loop_forward_each_step",
            "test_check_generation.py::loop_list_of_columns",
        ],
        "bugs": [
            "test_check_generation.py::loop-bos-only",
            "test_check_generation.py::loop-first-position",
            "test_check_generation.py::loop-no-mask",
            "test_check_generation.py::loop-one-short",
        ],
    },
    "batch_by_tokens": {
        "alternatives": [
            "test_check_batching.py::batch_loop",
            "test_check_batching.py::batch_numpy_unstable",
            "test_check_batching.py::batch_longest_batch_first",
        ],
        "bugs": [
            "test_check_batching.py::batch_counts_tokens",
            "test_check_batching.py::batch_not_sorted",
            "test_check_batching.py::batch_drops_last",
        ],
    },
    "label_smoothing_loss": {
        "alternatives": [
            "test_check_loss.py::ls_explicit_q",
            "test_check_loss.py::ls_loop",
            "test_check_loss.py::ls_kl_plus_entropy",
        ],
        "bugs": [
            "test_check_loss.py::ls_cross_entropy_label_smoothing",
            "test_check_loss.py::no_smoothing",
            "test_check_loss.py::pad_not_ignored",
            "test_check_loss.py::ls_kl",
        ],
    },
    "train_step": {
        "alternatives": ["test_check_training.py::ts_learner(None)", "test_check_training.py::ts_flattened"],
        "bugs": [
            "test_check_training.py::no_zero_grad",
            "test_check_training.py::scheduler_first",
            "test_check_training.py::feeds_tgt_out",
            "test_check_training.py::own_optimizer",
        ],
    },
    "beam_step": {
        "alternatives": [
            "test_check_beam.py::beam_per_beam_then_joint",
            "test_check_beam.py::beam_transposed",
            "test_check_beam.py::beam_loop",
        ],
        "bugs": ["test_check_beam.py::per_beam", "test_check_beam.py::no_prefix", "test_check_beam.py::divide_by_k"],
    },
    "modified_precision": {
        "alternatives": ["test_check_bleu.py::mp_loop", "test_check_bleu.py::mp_counter_and"],
        "bugs": [
            "test_check_bleu.py::unclipped",
            "test_check_bleu.py::short_at_end",
            "test_check_bleu.py::negative_total",
        ],
    },
    "brevity_penalty": {
        "alternatives": ["test_check_bleu.py::bp_min", "test_check_bleu.py::bp_torch"],
        "bugs": ["test_check_bleu.py::inverted", "test_check_bleu.py::sign", "test_check_bleu.py::empty_gets_one"],
    },
    # Notebook 12's key/value cache, covered in its own file.
    "append_kv": {
        "alternatives": [f"{_KV}::append_cat", f"{_KV}::append_preallocated", f"{_KV}::append_concat_negative_dim"],
        "bugs": [
            f"{_KV}::append_on_heads",
            f"{_KV}::append_on_d_head",
            f"{_KV}::append_on_batch",
            f"{_KV}::append_stack",
            f"{_KV}::append_reversed",
            f"{_KV}::append_overwrite",
            f"{_KV}::append_forgets_values",
            f"{_KV}::append_values_unchanged",
            f"{_KV}::append_values_get_keys",
            f"{_KV}::append_swapped_outputs",
        ],
    },
    "cached_self_attention": {
        "alternatives": [f"test_check_kv_cache_position.py::{name}" for name in ("step_right", "step_shape_unpacked")],
        "bugs": [
            f"test_check_kv_cache_position.py::{name}"
            for name in (
                "step_at_zero",
                "step_keys_at_zero",
                "step_query_at_zero",
                "step_plus_one",
                "step_minus_one",
                "step_length_after",
                "step_last_new_index",
                "step_full_causal_mask",
                "step_mask_arguments_swapped",
            )
        ],
    },
    "reorder_kv": {
        "alternatives": [
            f"{_KV}::reorder_index_select",
            f"{_KV}::reorder_fancy_indexing",
            f"{_KV}::reorder_loop_stack",
            f"{_KV}::reorder_view",
        ],
        "bugs": [
            f"{_KV}::reorder_unchanged",
            f"{_KV}::reorder_keys_only",
            f"{_KV}::reorder_no_sentence_offset",
            f"{_KV}::reorder_finished_kept",
            f"{_KV}::reorder_heads_axis",
            f"{_KV}::reorder_argsort",
            f"{_KV}::reorder_time_axis",
            f"{_KV}::reorder_swapped_outputs",
        ],
    },
    # Notebook 13's loss of one rank of a DDP run, covered in its own file.
    "rank_loss": {
        "alternatives": [
            f"{_DDP}::rank_loss_scaled",
            f"{_DDP}::rank_loss_mean_of_batch",
            f"{_DDP}::rank_loss_tensor_counts",
        ],
        "bugs": [
            f"{_DDP}::rank_loss_own_mean",
            f"{_DDP}::rank_loss_no_world_size",
            f"{_DDP}::rank_loss_divides_by_world",
            f"{_DDP}::rank_loss_unscaled",
            f"{_DDP}::rank_loss_item",
            f"{_DDP}::rank_loss_own_mean_over_world",
        ],
    },
    "auroc": {
        "alternatives": [
            "test_check_confidence.py::loops",
            "test_check_confidence.py::with_numpy",
            "test_check_confidence.py::by_ranks",
            "test_check_confidence.py::as_tensor",
        ],
        "bugs": [
            "test_check_confidence.py::strict",
            "test_check_confidence.py::ge",
            "test_check_confidence.py::swapped",
            "test_check_confidence.py::zip",
            "test_check_confidence.py::sum",
            "test_check_confidence.py::one_list",
            "test_check_confidence.py::count",
            "test_check_confidence.py::strict_and_swapped",
            "test_check_confidence.py::sorts",
        ],
    },
    "rms_norm": {
        "alternatives": [
            f"{_MODERN}::rms_pow_mean",
            f"{_MODERN}::rms_rsqrt",
            f"{_MODERN}::rms_norm_of_vector",
        ],
        "bugs": [
            f"{_MODERN}::rms_functional",
            f"{_MODERN}::rms_centred",
            f"{_MODERN}::rms_std",
            f"{_MODERN}::rms_eps_outside",
            f"{_MODERN}::rms_no_sqrt",
            f"{_MODERN}::rms_sum",
            f"{_MODERN}::rms_over_batch",
            f"{_MODERN}::rms_over_positions",
            f"{_MODERN}::rms_whole_tensor",
            f"{_MODERN}::rms_no_gain",
            f"{_MODERN}::rms_multiplied",
            f"{_MODERN}::rms_llama_eps",
            f"{_MODERN}::rms_ignores_eps",
            f"{_MODERN}::rms_no_eps",
        ],
    },
}

# The files whose tables WRITTEN_DIFFERENTLY and BUGS_WRITTEN_DIFFERENTLY hold answers written differently.
WRITTEN_DIFFERENTLY_FILES = [
    test_check_attention,
    test_check_multi_head,
    test_check_masks,
    test_check_positional,
    test_check_layers,
    test_check_encoder_layer,
    test_check_decoder_layer,
    test_check_schedule,
    test_check_vocab,
    test_check_decoding,
]


# --- the tests ----------------------------------------------------------------------------


def test_exercise_error_is_an_assertion_error():
    assert issubclass(ExerciseError, AssertionError)


def test_every_check_is_documented_with_its_signature():
    for check in (
        checks.check_scaled_dot_product_attention,
        checks.check_causal_mask,
        checks.check_padding_mask,
        checks.check_target_mask,
        checks.check_mask_inversion,
        checks.check_positional_encoding,
        checks.check_multi_head_attention,
        checks.check_layer_norm,
        checks.check_feed_forward,
        checks.check_encoder_layer,
        checks.check_decoder_layer,
        checks.check_noam_rate,
    ):
        doc = check.__doc__ or ""
        assert "Expected signature:" in doc and "Raises:" in doc, check.__name__


def test_public_names_live_in_the_package():
    # Notebooks import from transformer_lessons.checks, and help(check_...) names that module (notebook 00 shows it),
    # whichever submodule defines the check.
    for name in checks.__all__:
        assert getattr(checks, name).__module__ == "transformer_lessons.checks", name
    assert sorted(n for n in dir(checks) if n.startswith("check_")) == sorted(
        n for n in checks.__all__ if n.startswith("check_")
    )


def test_every_exported_check_has_a_coverage_row():
    exported = {n.removeprefix("check_") for n in checks.__all__ if n.startswith("check_")}
    missing = sorted(exported - set(COVERAGE))
    assert not missing, f"checks without a row in COVERAGE (add their alternatives and bugs): {missing}"
    assert not set(COVERAGE) - exported, (
        f"COVERAGE rows for checks that are not exported: {sorted(set(COVERAGE) - exported)}"
    )


@pytest.mark.parametrize("name", sorted(COVERAGE))
def test_coverage_row_meets_the_standard(name):
    row = COVERAGE[name]
    assert len(set(row["alternatives"])) >= 2, f"{name}: fewer than 2 correct answers written differently"
    assert len(set(row["bugs"])) >= 3, f"{name}: fewer than 3 bugs"
    for entry in row["alternatives"] + row["bugs"]:
        filename, _, token = entry.partition("::")
        path = TESTS / filename
        assert path.is_file(), f"{name}: {entry}: no file {filename}"
        assert re.search(rf"(?<![\w-]){re.escape(token)}(?![\w-])", path.read_text(encoding="utf-8")), (
            f"{name}: {entry}: `{token}` does not appear in {filename}"
        )


def test_coverage_names_every_case_written_differently():
    # The tables of answers and bugs written differently are what runs; COVERAGE must list each of them under its check.
    for module in WRITTEN_DIFFERENTLY_FILES:
        here = f"{module.__name__}.py"
        for case, (name, _) in getattr(module, "WRITTEN_DIFFERENTLY", {}).items():
            assert f"{here}::{case}" in COVERAGE[name]["alternatives"], case
        for case, (name, _, _) in getattr(module, "BUGS_WRITTEN_DIFFERENTLY", {}).items():
            assert f"{here}::{case}" in COVERAGE[name]["bugs"], case
