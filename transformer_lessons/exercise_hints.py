"""Every exercise of the course, in notebook order, with its three hints: the text, written once.

What the hints are for and how they are given out (:func:`transformer_lessons.exercises.hint`) is
:mod:`transformer_lessons.exercises`'s docstring; this module is only the list. Each entry: the
check's name (``check_<name>``), the notebook, and three hints:

1. the concept and where to look (the paper's section, the notebook's section);
2. the approach, in words;
3. the exact fix: the lines to write.

It imports nothing heavy: no torch.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Exercise:
    """One exercise: its check's name, the notebook it is in, its three hints (concept, approach, fix)."""

    name: str
    notebook: str
    hints: tuple[str, str, str]


EXERCISES: tuple[Exercise, ...] = (
    Exercise(
        "mask_inversion",
        "00_roadmap_and_setup",
        (
            "Reread 'Convention 1: masks say where attention may look' above: in this course True means 'may attend'; the input uses the opposite meaning.",
            "Every True becomes False and every False becomes True, element by element; the shape and the bool dtype stay.",
            "return ~blocked  (the bool NOT; not 1 - blocked, which needs numbers)",
        ),
    ),
    Exercise(
        "scaled_dot_product_attention",
        "01_self_attention",
        (
            "Paper §3.2.1, Eq. 1, and this notebook's sections 'Queries, keys and values' and 'Why divide by √d_k?': scores between each query and each key, "
            "scaled, blocked keys removed, a softmax, a weighted sum of the values.",
            "Multiply the queries by the transposed keys: swap the keys' last two axes, counted from the end, so that any "
            "batch axes before them stay where they are. Divide by the square root of the key size (the last axis). "
            "Set the scores of blocked keys (mask False) to minus infinity: masked_fill returns a new tensor and leaves "
            "the one you call it on unchanged, so keep its result. Softmax over the keys (the last axis), then weight "
            "the values; return the output and the weights.",
            "scores = query @ key.transpose(-2, -1) / math.sqrt(query.size(-1)); "
            "scores = scores.masked_fill(~mask, float('-inf')) if mask is not None; "
            "weights = scores.softmax(dim=-1) (then weights.masked_fill(~mask, 0.0): a fully blocked row gets zeros, "
            "not NaN); return weights @ value, weights",
        ),
    ),
    Exercise(
        "multi_head_attention",
        "02_multi_head_attention",
        (
            "Paper §3.2.2 and this notebook's section 'Shapes, step by step': H heads of size d_head = d_model / H, each attending "
            "on its own slice of the projections, then concatenated and projected once more.",
            "In __init__: four d_model-to-d_model linear layers and a dropout. In forward: project query, key and value, "
            "split the last axis (the features) into (heads, d_head) and move the heads axis before the positions, attend "
            "(mask and all), move the heads back next to d_head, merge them into d_model, and apply w_o. Split the "
            "features, not the flat memory: reshaping straight to (B, H, T, d_head) gives the right shape and wrong "
            "numbers. After a transpose the tensor is not contiguous, so merge with reshape.",
            "self.d_head = d_model // n_heads; self.w_q = nn.Linear(d_model, d_model) (likewise w_k, w_v, w_o); "
            "in forward: q = self.w_q(query).view(B, T, H, Dh).transpose(1, 2) (likewise k, v with S); "
            "out, _ = attention.scaled_dot_product_attention(q, k, v, mask, self.dropout) (the package's, which applies "
            "the dropout to the weights); "
            "return self.w_o(out.transpose(1, 2).reshape(B, T, D))",
        ),
    ),
    Exercise(
        "causal_mask",
        "03_masks",
        (
            "Paper §3.2.3, this notebook's section 'The future: what the decoder may see' and notebook 00's "
            "'Convention 1': query t may look at keys 0 .. t only, and True means 'may attend'.",
            "A square bool matrix with True on the diagonal and below it (a lower triangle), False above. "
            "PyTorch has a function that keeps the lower triangle of a matrix: torch.tril.",
            "return torch.ones(size, size, dtype=torch.bool).tril()",
        ),
    ),
    Exercise(
        "padding_mask",
        "03_masks",
        (
            "The section 'A padded batch' above: padding keys must get no weight, and the mask must broadcast over the "
            "scores (B, H, T, S), whose last axis is the keys (the section 'Broadcasting to (B, H, T, S)' shows it).",
            "Compare each token with pad_id (True for a real token): a comparison on a tensor gives a bool tensor. Then "
            "insert two size-1 axes for the heads and the queries, so that (B, S) becomes (B, 1, 1, S); indexing with "
            "None inserts an axis.",
            "return (tokens != pad_id)[:, None, None, :]",
        ),
    ),
    Exercise(
        "embedding_scale",
        "04_embeddings_and_positional_encoding",
        (
            "Paper §3.4 ('In the embedding layers, we multiply those weights by √d_model') and section 1 of this notebook.",
            "Look the tokens up in the table (call it), then multiply the looked-up vectors, not the table's weights, "
            "by the square root of d_model, which the table holds as its embedding_dim.",
            "return table(tokens) * math.sqrt(table.embedding_dim)",
        ),
    ),
    Exercise(
        "positional_encoding",
        "04_embeddings_and_positional_encoding",
        (
            "Paper §3.5 and section 2 of this notebook: PE(pos, 2i) = sin(pos / 10000^(2i/d_model)), PE(pos, 2i+1) = cos(the same angle).",
            "Build a column of positions 0 .. max_len-1, shape (max_len, 1), and a row of the even column indices 2i, "
            "shape (d_model/2,), both float32; dividing the column by 10000 to the power 2i/d_model broadcasts to all "
            "the angles, (max_len, d_model/2); put their sines in the even columns and their cosines in the odd ones.",
            "pos = torch.arange(max_len)[:, None]; two_i = torch.arange(0, d_model, 2); "
            "angle = pos / 10000 ** (two_i / d_model); pe = torch.zeros(max_len, d_model); "
            "pe[:, 0::2] = torch.sin(angle); pe[:, 1::2] = torch.cos(angle); return pe",
        ),
    ),
    Exercise(
        "learned_positions",
        "04_embeddings_and_positional_encoding",
        (
            "Paper §3.5, Table 3 row (E), and section 5 'Learned positional embeddings': instead of sinusoids, a trained table with one row per position.",
            "In __init__: keep max_len, an embedding table of max_len rows of d_model, and a dropout. In forward: refuse "
            "sequences longer than max_len, look up the rows of positions 0 .. L-1 (made on x's device) and add them, "
            "(L, d_model), to x, where they broadcast over the batch; then the dropout.",
            "self.table = nn.Embedding(max_len, d_model); self.dropout = nn.Dropout(dropout); in forward: "
            "if x.size(1) > self.max_len: raise ValueError(...); "
            "return self.dropout(x + self.table(torch.arange(x.size(1))))",
        ),
    ),
    Exercise(
        "layer_norm",
        "05_encoder",
        (
            "Section 1 'Layer normalisation' of this notebook (Ba et al. 2016; paper §3.1 uses it after every sublayer); "
            "nn.LayerNorm is the reference.",
            "Take the mean and the biased variance of each vector over its last axis (keep that axis), subtract the mean, "
            "divide by the square root of the variance plus eps, then multiply by weight and add bias. Two slips are "
            "common: torch's var and std divide by D - 1 unless told otherwise, and eps added to the standard "
            "deviation instead of the variance gives another function.",
            "mean = x.mean(dim=-1, keepdim=True); var = x.var(dim=-1, keepdim=True, unbiased=False); "
            "return self.weight * (x - mean) / torch.sqrt(var + self.eps) + self.bias",
        ),
    ),
    Exercise(
        "feed_forward",
        "05_encoder",
        (
            "Paper §3.3, Eq. 2, and section 2 of this notebook: FFN(x) = max(0, xW1 + b1)W2 + b2, the same two layers at every position.",
            "In __init__: a linear layer up to d_ff, one back down to d_model (both with biases), a dropout. In forward: "
            "the first layer, a ReLU, dropout, the second layer.",
            "self.w_1 = nn.Linear(d_model, d_ff); self.w_2 = nn.Linear(d_ff, d_model); self.dropout = nn.Dropout(dropout); "
            "return self.w_2(self.dropout(torch.relu(self.w_1(x))))",
        ),
    ),
    Exercise(
        "encoder_layer",
        "05_encoder",
        (
            "Paper §3.1 (and §5.4 for the dropout) and section 3 'Residual sublayers: post-norm and pre-norm': each "
            "sublayer's output is LayerNorm(x + Sublayer(x)), post-norm.",
            "Self-attention with the queries, keys and values all x and the source mask; add it (after dropout) to x and "
            "normalise; then the same with the feed-forward and the second norm.",
            "x = self.norm1(x + self.dropout(self.self_attn(x, x, x, src_mask))); "
            "return self.norm2(x + self.dropout(self.feed_forward(x)))",
        ),
    ),
    Exercise(
        "decoder_layer",
        "06_decoder",
        (
            "Paper §3.1 and sections 1 to 3 of this notebook: the decoder layer has a third sublayer, attention over the encoder's output; each sublayer is "
            "wrapped as LayerNorm(x + Sublayer(x)), with dropout applied 'to the output of each sub-layer, before it is "
            "added to the sub-layer input and normalized' (§5.4).",
            "Masked self-attention over x with tgt_mask; then cross-attention whose queries come from x as the first "
            "sublayer left it, and whose keys and values are memory, with src_mask; then the feed-forward. Each: "
            "dropout on its output, add to x, its own norm.",
            "x = self.norm1(x + self.dropout(self.self_attn(x, x, x, tgt_mask))); "
            "x = self.norm2(x + self.dropout(self.cross_attn(x, memory, memory, src_mask))); "
            "return self.norm3(x + self.dropout(self.feed_forward(x)))",
        ),
    ),
    Exercise(
        "sees_future",
        "06_decoder",
        (
            "Section 1 'Proof by experiment': change one input position and see which outputs move. Paper §3.1: "
            "predictions for position i may depend only on the known outputs at positions less than i.",
            "Put the layer in eval mode. Make random inputs (1, T, d_model) and a random memory; run the layer with "
            "the causal mask. Then for every position t: change the input at t only, run again, and compare the "
            "outputs at positions 0 .. t-1 with the first run. Any difference is a leak: return True; none: False.",
            "layer.eval(); mask = causal_mask(T); base = layer(inputs, memory, None, mask); for t in range(1, T): "
            "moved = inputs.clone(); moved[:, t] += 1.0; if not torch.allclose(layer(moved, memory, None, mask)[:, :t], "
            "base[:, :t], atol=1e-6): return True; return False",
        ),
    ),
    Exercise(
        "target_mask",
        "07_full_model_copy_task",
        (
            "Section 2 'The decoder's mask' and notebook 03's two masks: a target position may see neither padding nor "
            "the future.",
            "Build the padding mask of the target tokens, shaped (B, 1, 1, T), and the (T, T) causal mask; combine them "
            "with a logical AND, which broadcasts to (B, 1, T, T).",
            "return (tokens != pad_id)[:, None, None, :] & causal_mask(tokens.size(1))",
        ),
    ),
    Exercise(
        "greedy_loop",
        "07_full_model_copy_task",
        (
            "Section 5 'Greedy decoding': at inference there is no target to read, so the model reads what it has "
            "written so far; greedy decoding is beam search with a beam of one (paper §6.1).",
            "Encode the source once. Start a (B, 1) tensor of bos_id. n_tokens times: decode the whole sequence so far "
            "with a causal mask (as in training), take the logits of its last position, pick the most likely token of "
            "each row and append it as a new column. Return the sequence, <bos> included.",
            "memory = model.encode(src, None); ys = torch.full((src.size(0), 1), bos_id); for _ in range(n_tokens): "
            "logits = model.decode(memory, None, ys, causal_mask(ys.size(1))); "
            "ys = torch.cat([ys, logits[:, -1].argmax(dim=-1)[:, None]], dim=1); return ys",
        ),
    ),
    Exercise(
        "build_vocab",
        "08_data",
        (
            "The introduction to 'Exercise: build a vocabulary' above: rare tokens become <unk>, the specials come first, the order is "
            "deterministic.",
            "Count every token of every sentence (collections.Counter counts); keep those counted at least min_freq "
            "times; sort them by count, highest first, breaking ties alphabetically (sorted with a key that returns a "
            "tuple does both at once); put the four specials in front.",
            "counts = collections.Counter(t for tokens in token_lists for t in tokens); "
            "kept = sorted((t for t, n in counts.items() if n >= min_freq), key=lambda t: (-counts[t], t)); "
            "return ['<unk>', '<pad>', '<bos>', '<eos>', *kept]",
        ),
    ),
    Exercise(
        "batch_by_tokens",
        "08_data",
        (
            "Paper §5.1 ('batched together by approximate sequence length') and the section 'Batching by tokens': "
            "a batch costs rows times its longest row, padding included.",
            "Sort the indices, not the lengths, by the length they point to, shortest first. Walk through them with a "
            "current batch and its longest length. Before adding an index, work out the padded size the batch would "
            "have with it: one more row, and a longest length that may grow. If that is over max_tokens and the batch "
            "is not empty, close the batch and start a new one with this index. After the loop, keep the last batch too.",
            "order = sorted(range(len(lengths)), key=lambda i: lengths[i]); batches, batch, longest = [], [], 0; "
            "for i in order: if batch and (len(batch) + 1) * max(longest, lengths[i]) > max_tokens: "
            "batches.append(batch); batch, longest = [], 0; then batch.append(i); longest = max(longest, lengths[i]); "
            "after the loop: if batch: batches.append(batch); return batches",
        ),
    ),
    Exercise(
        "label_smoothing_loss",
        "09_training",
        (
            "Paper §5.4 (ε_ls = 0.1) and section 1 'Label smoothing': the target distribution q keeps "
            "1 - eps on the true class and spreads eps over the others, except <pad>.",
            "Take the log-probabilities of the logits with a stable log-softmax (not the log of a softmax: section 1 "
            "showed why); build q: 1 - eps on the true class, 0 on pad_id, eps shared equally by the V - 2 other "
            "classes; the loss at a position is minus the sum of q times log p; average it over the positions whose "
            "target is not padding.",
            "V = logits.size(-1); q = torch.full_like(logits, eps / (V - 2)); q.scatter_(1, target[:, None], 1 - eps); "
            "q[:, pad_id] = 0.0; loss = -(q * logits.log_softmax(dim=-1)).sum(dim=-1); "
            "return loss[target != pad_id].mean()",
        ),
    ),
    Exercise(
        "noam_rate",
        "09_training",
        (
            "Paper §5.3, Eq. 3, and section 3 'The learning-rate schedule': the rate rises for `warmup` steps, then falls.",
            "Scale by factor and by d_model to the power -1/2; take the smaller of two terms: the inverse square root of "
            "the step (the decay) and the step times warmup to the power -3/2 (the warm-up).",
            "return factor * d_model ** -0.5 * min(step ** -0.5, step * warmup ** -1.5)",
        ),
    ),
    Exercise(
        "train_step",
        "09_training",
        (
            "Teacher forcing (notebook 07, section 3; notebook 08, 'A batch'): the decoder reads tgt_in and the loss "
            "scores tgt_out. Then PyTorch's usual update: gradients, the optimizer (section 4), the schedule (section 3).",
            "Put the model in training mode; compute the logits from the batch's source, tgt_in and masks and the loss "
            "against tgt_out; clear the gradients, backpropagate, step the optimizer, then the scheduler; return the "
            "loss as a float.",
            "model.train(); loss = criterion(model(batch.src, batch.tgt_in, batch.src_mask, batch.tgt_mask), batch.tgt_out); "
            "optimizer.zero_grad(); loss.backward(); optimizer.step(); scheduler.step(); return loss.item()",
        ),
    ),
    Exercise(
        "greedy_decode",
        "10_decoding_and_bleu",
        (
            "Section 2 'Greedy decoding': encode once, then grow the output one token at a time, always "
            "taking the most likely next token (a beam of 1, paper §6.1).",
            "Encode the source once. Start each row with bos_id. At each step decode everything generated so far with a "
            "causal mask, take the last position's logits, pick the argmax, append it (eos_id for rows already finished), "
            "mark rows that produced eos_id, and stop once every row is finished or after max_new_tokens steps.",
            "memory = model.encode(src, src_mask); ys = torch.full((B, 1), bos_id); for _ in range(max_new_tokens): "
            "logits = model.decode(memory, src_mask, ys, causal_mask(ys.size(1))); "
            "nxt = logits[:, -1].argmax(-1).masked_fill(finished, eos_id); ys = torch.cat([ys, nxt[:, None]], 1); "
            "finished |= nxt == eos_id; break if finished.all()",
        ),
    ),
    Exercise(
        "beam_step",
        "10_decoding_and_bleu",
        (
            "Section 3 'Beam search' and its tree: a candidate's score is its prefix's score plus the new token's "
            "log-probability, and the K survivors are the best of ALL K·V candidates at once, not the best of each "
            "prefix: a strong prefix may keep several extensions and a weak one none. (So yes: at the tree's dotted line, two "
            "boxes that are not dropped extend the same prefix.)",
            "Add each prefix's score to its row of log-probabilities by broadcasting: a (K, V) table of candidate "
            "scores. Flatten it and take one topk of K (it returns them best first, with their flat indices). A flat "
            "index i of a (K, V) table is row i // V (the parent prefix) and column i % V (the token).",
            "cand = scores[:, None] + log_probs; top, idx = cand.view(-1).topk(K); V = log_probs.size(1); "
            "return top, idx // V, idx % V",
        ),
    ),
    Exercise(
        "modified_precision",
        "10_decoding_and_bleu",
        (
            "BLEU (Papineni et al. 2002, §2.1) and section 4 'BLEU, and which BLEU': a hypothesis n-gram counts only as many "
            "times as the reference has it.",
            "Count the n-grams of the hypothesis and of the reference (as tuples); for each hypothesis n-gram add the "
            "smaller of its two counts; total is the number of hypothesis n-grams (zero for a short hypothesis).",
            "grams = lambda w: Counter(tuple(w[i:i + n]) for i in range(len(w) - n + 1)); "
            "matches = sum(min(c, ref[g]) for g, c in hyp.items()); total = max(len(hypothesis) - n + 1, 0)",
        ),
    ),
    Exercise(
        "brevity_penalty",
        "10_decoding_and_bleu",
        (
            "BLEU (Papineni et al. 2002, §2.2.2) and the formula at the start of section 4: BP = 1 when c > r, else "
            "exp(1 - r/c). An output longer than the references is not penalised here (its precisions already are). "
            "Half as long: exp(1 - 2) = 0.37; twice as long: 1; empty: the limit as c goes to 0, which is 0.",
            "Three cases. Longer than the references: 1.0. Empty (hyp_len = 0): r/c cannot be computed, so return the "
            "limit of exp(1 - r/c) as c goes to 0, which is 0.0, before dividing. Otherwise the exponential.",
            "return 1.0 if hyp_len > ref_len else (0.0 if hyp_len == 0 else math.exp(1 - ref_len / hyp_len))",
        ),
    ),
    Exercise(
        "append_kv",
        "12_incremental_decoding",
        (
            "Section 2 'How: what the cache holds': the cache holds the keys and values of every earlier position; "
            "the shape (B, H, t, Dh) says which axis counts them.",
            "Join each cache with its new part along the axis that counts positions, the cached positions first, keys "
            "and values alike. A join along an existing axis, not a new one.",
            "return torch.cat([cache_k, new_k], dim=2), torch.cat([cache_v, new_v], dim=2)",
        ),
    ),
    Exercise(
        "cached_self_attention",
        "12_incremental_decoding",
        (
            "Which positions are the new ones? The cache holds positions 0 … t-1, so the new ones are t … t + T - 1: "
            "the first is number t, the count of positions already cached, not 0, and the step must pass it to the "
            "layer. Rotary positions rotate each query and key by its own absolute position (RoFormer, Su et al. "
            "2021, §3.2); the cached keys were rotated for theirs when they were stored. Hugging Face's transformers "
            "passes the same number to its layers as cache_position.",
            "Read t from the cache's time axis. Project the new keys and values, rotated for position t (the offset), "
            "grow the cache with your append_kv, then attend with the new queries, rotated for the same position, "
            "over all t + T keys, with the mask that hides later new positions. Return the output and the grown cache.",
            "t, T = past_k.size(2), y.size(1); new_k, new_v = attn.project_kv(y, y, offset=t); "
            "k, v = append_kv(past_k, past_v, new_k, new_v); "
            "return attn.attend(y, k, v, step_mask(T, t), offset=t), k, v",
        ),
    ),
    Exercise(
        "reorder_kv",
        "12_incremental_decoding",
        (
            "Section 3 'The cache and beam search': sentence a owns the K rows a * K … a * K + K - 1 of the cache, "
            "and parent[a, k] counts that sentence's prefixes only, from 0. Beam search itself is the paper's decoding "
            "(Vaswani et al. 2017, §6.1: beam size 4, length penalty 0.6) and notebook 10's §3.",
            "Turn each parent into a row of the whole cache by adding its sentence's first row, keep the sentences in "
            "keep (K rows each, in their order), and select those rows (dim 0) of both caches.",
            "A, K = parent.shape; rows = (torch.arange(A)[:, None] * K + parent)[keep].flatten(); "
            "return cache_k.index_select(0, rows), cache_v.index_select(0, rows)",
        ),
    ),
    Exercise(
        "rank_loss",
        "13_many_processes",
        (
            "This notebook's section 'The loss of a shard': DDP averages the ranks' gradients, so each rank's loss must "
            "be scaled for that average to be the whole batch's gradient.",
            "DDP adds the ranks' gradients and divides the sum by world_size. Which scalar must each rank "
            "backpropagate so that the result is the gradient of (the sum of all ranks' local sums) / total_tokens?",
            "return local_sum * world_size / total_tokens",
        ),
    ),
    Exercise(
        "rms_norm",
        "14_from_2017_to_today",
        (
            "Section 2 'RMSNorm' of this notebook (Zhang & Sennrich 2019, Eq. 4): LayerNorm without the mean and "
            "without the shift. Each vector of D numbers gets its own root mean square: the mean runs over the last axis "
            "only, and eps sits under the root, as in Eq. 4. PyTorch's F.rms_norm is what the check compares with, "
            "so an answer that calls it is refused.",
            "Square each entry, take the mean over the last axis (keep that axis), add eps, take the square root; "
            "divide x by it and multiply by the gain.",
            "return weight * x / torch.sqrt(x.pow(2).mean(dim=-1, keepdim=True) + eps)",
        ),
    ),
    Exercise(
        "auroc",
        "15_inside_the_translator",
        (
            "The two definitions above the exercise give the same number (Hanley & McNeil 1982): the area under the "
            "ROC curve, or the chance that a score drawn from the first list beats one drawn from the second, a tie "
            "counting half (the Mann-Whitney statistic over the number of pairs). The second needs no curve at all.",
            "Go over every pair (a from higher, b from lower): a win when a > b counts 1, a tie a half, a loss 0. "
            "Add them up and divide by the number of pairs, len(higher) times len(lower). Do not sort the lists in "
            "place: the caller still needs them.",
            "wins = sum(1.0 if a > b else 0.5 if a == b else 0.0 for a in higher for b in lower)\n"
            "return wins / (len(higher) * len(lower))",
        ),
    ),
)


__all__ = ["EXERCISES", "Exercise"]
