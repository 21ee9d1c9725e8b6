"""Check functions for the exercises: run the learner's answer and name the likely bug.

Every ``check_*`` takes the learner's function or class and

* prints one line when the answer is right, and returns ``None`` (so a cell
  ending in the check echoes nothing after that line);
* raises :class:`ExerciseError` (an ``AssertionError``) when it is wrong. The
  check computes what each common mistake would produce and, when the answer
  matches one of them, says which ("did you forget to divide by sqrt(d_k)?"),
  or two of them at once ("two things differ"). The message names the bug and
  the concept and ends with ``more help: hint('<name>')``; the code of the fix,
  written in the check between ``[[`` and ``]]``, is kept out of it until the
  learner asks :func:`transformer_lessons.hint`. The simulations use what the
  learner built (their own LayerNorm, epsilon, dropout) where that matters.
  In Jupyter the error shows as that diagnosis alone, a few red lines, without
  the check's own traceback; ``str(error)`` is the same plain message;
* notes its verdict for :func:`transformer_lessons.progress` (pass, fail, stub);
* prints "not implemented yet" and returns ``None`` while the answer is still a
  stub raising ``NotImplementedError``, so a notebook with open exercises still
  runs top to bottom. Only the learner's own ``raise NotImplementedError`` counts:
  one that PyTorch raises inside their code is reported as a bug, with the line;
* prints "still checking ..." every few seconds while a slow answer runs.

Answers are compared with independent references (PyTorch's own
``F.scaled_dot_product_attention``, ``nn.LayerNorm``, ``nn.MultiheadAttention``
holding the learner's weights, the package's layers) and with properties (rows
sum to 1, masked keys get zero weight, no NaN, inputs left unchanged, no peeking
at future positions). Inputs are small and seeded inside
``torch.random.fork_rng``, so running a check never changes the learner's random
state.

One module per concept, in the order the notebooks meet them:

================================  ====================================================
``common``                        what every check shares: :class:`ExerciseError`,
                                  the ``exercise`` decorator, calling and comparing
``slips``                         mistakes tried one and two at a time ("two things
                                  differ"); what the learner's module holds of its own
``_feedback``                     what the learner sees: the red box, their stub
                                  told from PyTorch's errors, "still checking"
``attention``                     scaled dot-product attention
``multi_head``                    multi-head attention
``masks``                         causal, padding and target masks; converting conventions
``embeddings``                    token embeddings scaled by √d_model; learned positions
``positional``                    the sinusoidal positional encoding
``layers``                        layer norm and the position-wise feed-forward
``sublayers``                     what the layer checks share: the learner's parts in the
                                  reference, restacked wrongly
``encoder_layer``                 the encoder layer
``decoder_layer``                 the decoder layer
``leak_test``                     the leak test that tells a layer that sees the future
``generation``                    the greedy loop: the model writes one token at a time
``batching``                      batching by tokens
``schedule``                      the learning-rate schedule
``loss``                          the label-smoothing loss
``training``                      one training step
``vocab``                         building a vocabulary
``decoding``                      greedy decoding with an end token and finished rows
``beam``                          one step of beam search
``bleu``                          BLEU's clipped n-gram precision and brevity penalty
``kv_cache``                      a key/value cache: appending a step, reordering for beams
``distributed``                   the loss one rank of a DDP run backpropagates
``modern``                        RMSNorm, a change made since the paper
``confidence``                    the AUROC: how well one number separates two groups
================================  ====================================================
"""

from transformer_lessons.checks.common import ExerciseError
from transformer_lessons.checks.attention import check_scaled_dot_product_attention
from transformer_lessons.checks.batching import check_batch_by_tokens
from transformer_lessons.checks.beam import check_beam_step
from transformer_lessons.checks.bleu import check_brevity_penalty, check_modified_precision
from transformer_lessons.checks.confidence import check_auroc
from transformer_lessons.checks.decoder_layer import check_decoder_layer
from transformer_lessons.checks.leak_test import check_sees_future
from transformer_lessons.checks.decoding import check_greedy_decode
from transformer_lessons.checks.distributed import check_rank_loss
from transformer_lessons.checks.embeddings import check_embedding_scale, check_learned_positions
from transformer_lessons.checks.encoder_layer import check_encoder_layer
from transformer_lessons.checks.generation import check_greedy_loop
from transformer_lessons.checks.kv_cache import check_append_kv, check_reorder_kv
from transformer_lessons.checks.kv_position import check_cached_self_attention
from transformer_lessons.checks.layers import check_feed_forward, check_layer_norm
from transformer_lessons.checks.modern import check_rms_norm
from transformer_lessons.checks.multi_head import check_multi_head_attention
from transformer_lessons.checks.loss import check_label_smoothing_loss
from transformer_lessons.checks.masks import (
    check_causal_mask,
    check_mask_inversion,
    check_padding_mask,
    check_target_mask,
)
from transformer_lessons.checks.positional import check_positional_encoding
from transformer_lessons.checks.schedule import check_noam_rate
from transformer_lessons.checks.training import check_train_step
from transformer_lessons.checks.vocab import check_build_vocab

__all__ = [
    "ExerciseError",
    "check_append_kv",
    "check_auroc",
    "check_batch_by_tokens",
    "check_beam_step",
    "check_brevity_penalty",
    "check_build_vocab",
    "check_cached_self_attention",
    "check_causal_mask",
    "check_decoder_layer",
    "check_embedding_scale",
    "check_encoder_layer",
    "check_feed_forward",
    "check_greedy_decode",
    "check_greedy_loop",
    "check_label_smoothing_loss",
    "check_layer_norm",
    "check_learned_positions",
    "check_mask_inversion",
    "check_modified_precision",
    "check_multi_head_attention",
    "check_noam_rate",
    "check_padding_mask",
    "check_positional_encoding",
    "check_rank_loss",
    "check_reorder_kv",
    "check_rms_norm",
    "check_scaled_dot_product_attention",
    "check_sees_future",
    "check_target_mask",
    "check_train_step",
]

# Every public name reports this package as its home, where notebooks import it from:
# help(check_mask_inversion) says "in module transformer_lessons.checks", and a traceback
# names transformer_lessons.checks.ExerciseError, whichever submodule defines them.
for _name in __all__:
    globals()[_name].__module__ = __name__
del _name
