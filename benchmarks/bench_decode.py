"""Decoding speed with a key/value cache against recomputing the whole prefix at every step.

What is compared: ``decode_token_lists`` (what ``translate`` and ``evaluate`` call)
with ``use_cache=False`` (each step feeds the decoder every token so far and
recomputes every position and the cross-attention keys and values of the
memory) and ``use_cache=True`` (each step feeds only the new token; see
``transformer_lessons/kv_cache.py``). The model is the course's committed model
on CPU; the sentences are the first ``--sentences`` of Multi30k test_2016_flickr
(tokenized with spaCy), or random sentences from the model's vocabulary, with a
message, when the data or spaCy is missing. Before timing, the script checks
that both give the same outputs, and exits with status 1 if they do not.

Sentences are grouped by the length of their greedy output (``<eos>``
included), and each group is timed on its own, greedy and with a beam of 4: the
cache saves more the longer the output. The two ways alternate for
``--rounds`` rounds and the best (least disturbed) time of each is kept. The
last line is the speedup of greedy decoding over all the sentences, at the
lengths real captions have.

Run:  python benchmarks/bench_decode.py [--sentences 150] [--rounds 3] [--beam-sizes 1,4] [--threads 1]
"""

from __future__ import annotations

import argparse
import os
import random
import sys
import time

import torch

from transformer_lessons.decode import fused_attention
from transformer_lessons.translation import decode_token_lists

#: Upper ends of the output-length buckets (tokens, ``<eos>`` included); the last bucket is open.
BUCKET_EDGES = (10, 14, 18)


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--sentences", type=int, default=150, help="test sentences to decode (default 150)")
    p.add_argument(
        "--rounds", type=int, default=3, help="alternating rounds; the best time of each way is kept (default 3)"
    )
    p.add_argument("--beam-sizes", default="1,4", help="comma-separated beam sizes; 1 = greedy (default 1,4)")
    p.add_argument("--batch-size", type=int, default=64, help="sentences decoded together, as translate() (default 64)")
    p.add_argument(
        "--threads",
        type=int,
        default=1,
        help="torch.set_num_threads; 0 keeps torch's default. "
        "1 by default: on a busy small machine more threads oversubscribe the cores",
    )
    p.add_argument(
        "--fused", action="store_true", help="switch off attention-weight recording (fused_attention) in both"
    )
    p.add_argument("--random", action="store_true", help="random sentences even when Multi30k is there")
    p.add_argument(
        "--data-dir",
        default=os.environ.get("TRANSFORMER_LESSONS_DATA"),
        help="raw Multi30k files (default: $TRANSFORMER_LESSONS_DATA)",
    )
    return p.parse_args(argv)


def load_sentences(args, src_vocab) -> tuple[list[list[str]], str]:
    """Tokenized German sentences and where they came from: Multi30k test_2016_flickr, else random words."""
    if not args.random:
        try:
            from transformer_lessons.data import Tokenizer, load_split

            pairs = load_split("test_2016_flickr", data_dir=args.data_dir, progress=False)[: args.sentences]
            return Tokenizer("de").tokenize_batch(
                de for de, _ in pairs
            ), f"Multi30k test_2016_flickr (first {len(pairs)})"
        except Exception as err:  # no data, no network or no spaCy: time on random sentences instead
            print(f"(no Multi30k test sentences: {str(err)[:100]}; using random sentences)")
    rng = random.Random(0)
    words = [w for w in src_vocab.itos if not w.startswith("<")]
    return [
        [rng.choice(words) for _ in range(rng.randint(8, 18))] for _ in range(args.sentences)
    ], f"{args.sentences} random sentences"


def bucket_name(i: int) -> str:
    low = 1 if i == 0 else BUCKET_EDGES[i - 1] + 1
    return f"{low}-{BUCKET_EDGES[i]}" if i < len(BUCKET_EDGES) else f"{low}+"


def buckets_by_output_length(outputs: list[list[int]]) -> list[list[int]]:
    """Sentence indices per bucket of greedy output length (empty buckets dropped)."""
    groups: list[list[int]] = [[] for _ in range(len(BUCKET_EDGES) + 1)]
    for i, out in enumerate(outputs):
        groups[sum(len(out) > edge for edge in BUCKET_EDGES)].append(i)
    return groups


def time_both(course, sentences, beam_size: int, args) -> tuple[float, float, bool]:
    """Best-of-rounds seconds ``(recompute, cached)`` for decoding ``sentences``, and whether the outputs agree."""
    times: dict[bool, list[float]] = {False: [], True: []}
    outputs: dict[bool, list] = {}
    for _ in range(args.rounds):
        for use_cache in (False, True):  # alternate, so a neighbour's load hits both alike
            start = time.perf_counter()
            outputs[use_cache] = decode_token_lists(
                course.model,
                sentences,
                course.src_vocab,
                course.tgt_vocab,
                beam_size,
                batch_size=args.batch_size,
                use_cache=use_cache,
            )
            times[use_cache].append(time.perf_counter() - start)
    return min(times[False]), min(times[True]), outputs[False] == outputs[True]


def main(argv: list[str] | None = None) -> None:
    from contextlib import nullcontext

    from transformer_lessons.pretrained import load_course_model

    args = parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)
    course = load_course_model(device="cpu", progress=False)
    sentences, source = load_sentences(args, course.src_vocab)
    beam_sizes = [int(b) for b in args.beam_sizes.split(",")]
    print(
        f"model: the course model ({course.model.num_parameters():,} parameters, {course.model.config.n_layers} layers, d_model {course.model.config.d_model}), "
        f"cpu, {torch.get_num_threads()} threads, torch {torch.__version__}, attention weights {'not recorded (fused)' if args.fused else 'recorded (eval default)'}"
    )
    print(f"sentences: {source}; batch {args.batch_size}; best of {args.rounds} alternating rounds")
    with fused_attention(course.model) if args.fused else nullcontext():
        greedy = decode_token_lists(
            course.model, sentences, course.src_vocab, course.tgt_vocab, 1, batch_size=args.batch_size
        )
        groups = [(bucket_name(i), g) for i, g in enumerate(buckets_by_output_length(greedy)) if g]
        print(f"\n{'decoding':<9} {'output len':>10} {'sents':>6} {'recompute s':>12} {'cached s':>9} {'speedup':>8}")
        totals: dict[int, list[float]] = {}
        for beam_size in beam_sizes:
            how = "greedy" if beam_size == 1 else f"beam {beam_size}"
            total = totals.setdefault(beam_size, [0.0, 0.0])
            for name, group in groups:
                slow, fast, same = time_both(course, [sentences[i] for i in group], beam_size, args)
                if not same:
                    print(f"error: {how} outputs differ with and without the cache on bucket {name}", file=sys.stderr)
                    raise SystemExit(1)
                total[0], total[1] = total[0] + slow, total[1] + fast
                print(f"{how:<9} {name:>10} {len(group):>6} {slow:>12.3f} {fast:>9.3f} {slow / fast:>7.2f}x")
            print(
                f"{how:<9} {'all':>10} {len(sentences):>6} {total[0]:>12.3f} {total[1]:>9.3f} {total[0] / total[1]:>7.2f}x"
            )
    print("\noutputs identical with and without the cache: yes")
    if 1 in totals:
        slow, fast = totals[1]
        print(f"speedup cached / recompute: {slow / fast:.2f}x")


if __name__ == "__main__":
    main()
