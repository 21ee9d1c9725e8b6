"""Command line: ``python -m transformer_lessons {prepare,train,translate,evaluate}``.

Examples::

    python -m transformer_lessons train --preset quick
    python -m transformer_lessons translate "Ein Mann fährt Fahrrad."
    python -m transformer_lessons evaluate --checkpoint runs/quick/best.pt

User errors (no checkpoint, no data, a bad option) print one line and exit
with status 2; there is no traceback to read.
"""

from __future__ import annotations

import argparse
import json
import signal
import sys
from pathlib import Path

EXIT_USER_ERROR = 2
DEFAULT_MODEL_HELP = (
    "default: runs/<mode>/best.pt, then the other presets' best.pt, else the course's trained model: "
    "committed in the repository, downloaded once where there is no clone, replaced by $TRANSFORMER_LESSONS_MODEL"
)


class UserError(Exception):
    """Something the user can fix; printed as one line."""


def _add_data_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--data-dir", metavar="DIR", help="directory with the raw Multi30k .gz files (default: $TRANSFORMER_LESSONS_DATA, else the cache/download)")
    p.add_argument("--corpus", metavar="PATH", help="a corpus saved by 'prepare' (no spaCy needed); replaces --data-dir")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m transformer_lessons",
        description="Train, run and score the course's German->English Transformer on Multi30k.",
        epilog="Run 'python -m transformer_lessons COMMAND --help' for the options of a command.",
    )
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")

    p = sub.add_parser(
        "prepare",
        help="tokenize Multi30k and save the corpus to one file",
        description="Tokenize Multi30k (spaCy) and save the corpus, e.g. to train on a machine without spaCy (train --corpus).",
    )
    p.add_argument("--out", required=True, metavar="PATH", help="file to write (.json.gz)")
    p.add_argument("--preset", choices=("quick", "cpu", "full"), default=None, help="take min_freq/limit/max_len/bpe_merges from this training preset (default: full)")
    p.add_argument("--limit", type=int, help="keep only the first N training pairs")
    p.add_argument("--bpe-merges", type=int, metavar="N", help="subword units: N byte-pair merges per language (0 = whole words; default: the preset's)")
    p.add_argument("--data-dir", metavar="DIR", help="directory with the raw Multi30k .gz files")

    p = sub.add_parser(
        "train",
        help="train a model (resumes an interrupted run)",
        description="Train on Multi30k with a preset; checkpoints, history.json and metrics.json go to --out.",
    )
    p.add_argument("--preset", choices=("quick", "cpu", "full"), default=None, help="quick: CPU, ~2 min; cpu: the course's translator on a CPU, 90 min; full: one GPU, ~15 min (default: $TRANSFORMER_LESSONS_MODE, else full with a GPU, quick without)")
    p.add_argument("--out", metavar="DIR", help="output directory (default: runs/<preset>)")
    _add_data_args(p)
    p.add_argument("--epochs", type=int, help="number of epochs")
    p.add_argument("--limit", type=int, help="use only the first N training pairs")
    p.add_argument("--bpe-merges", type=int, metavar="N", help="subword units: N byte-pair merges per language (0 = whole words; default: the preset's)")
    p.add_argument("--max-tokens", type=int, help="padded tokens per batch")
    p.add_argument("--eval-every", type=int, help="validation BLEU every N epochs")
    p.add_argument("--bleu-val-limit", type=int, help="validation BLEU on the first N sentences only")
    p.add_argument("--beam", type=int, help="beam size for the final test evaluation (1 = greedy)")
    p.add_argument("--seed", type=int, help="random seed")
    p.add_argument(
        "--max-minutes",
        type=float,
        help="stop once the run's training time (all resumed calls together, evaluation excluded) reaches this many minutes, "
        "then evaluate; resume with a larger value to continue",
    )
    p.add_argument("--max-steps", type=int, help="stop after this many updates (resume later)")
    p.add_argument("--device", help="cpu, cuda, cuda:1, ... (default: cuda if available)")
    p.add_argument("--compile", action=argparse.BooleanOptionalAction, default=None, help="torch.compile the model (GPU only)")
    p.add_argument("--no-resume", action="store_true", help="start over even if --out holds last.pt")
    p.add_argument("--no-test", action="store_true", help="skip the final test-set evaluation")
    p.add_argument("--quiet", action="store_true", help="no progress bars; the one-line-per-epoch log is still printed")

    p = sub.add_parser("translate", help="translate German sentences", description="Translate German sentences into English.")
    p.add_argument("sentences", nargs="+", help="German sentences (quote each one)")
    p.add_argument("--checkpoint", metavar="PATH", help=f"a checkpoint ({DEFAULT_MODEL_HELP})")
    p.add_argument("--beam", type=int, default=4, help="beam size (default 4; 1 = greedy)")
    p.add_argument("--device", help="cpu or cuda (default: cuda if available)")

    p = sub.add_parser("evaluate", help="BLEU of a checkpoint on a Multi30k split", description="Translate a split and print sacreBLEU (with its signature).")
    p.add_argument("--checkpoint", metavar="PATH", help=f"the checkpoint to score ({DEFAULT_MODEL_HELP})")
    p.add_argument("--split", default="test_2016_flickr", help="Multi30k split (default test_2016_flickr)")
    _add_data_args(p)
    p.add_argument("--beam", type=int, default=4, help="beam size (default 4, the paper's; 1 = greedy)")
    p.add_argument("--length-penalty", type=float, default=0.6, help="GNMT length penalty alpha (default 0.6)")
    p.add_argument("--limit", type=int, help="score only the first N sentences")
    p.add_argument("--device", help="cpu or cuda (default: cuda if available)")
    p.add_argument("--output", metavar="PATH", help="also write the hypotheses, one per line")
    p.add_argument("--json", metavar="PATH", help="also write the scores as JSON")
    return parser


def _default_checkpoint() -> Path:
    """``runs/<mode>/best.pt``, then another preset's, else the course's trained model; says which on stderr."""
    from transformer_lessons.config import compute_mode
    from transformer_lessons.pretrained import PretrainedError, course_model_file, describe
    from transformer_lessons.train import default_out_dir

    mode = compute_mode()
    names = dict.fromkeys((mode, "full" if mode == "quick" else "quick", "cpu"))  # in order, without repeats
    candidates = [default_out_dir(name) / "best.pt" for name in names]
    for path in candidates:
        if path.is_file():
            print(f"using {path}", file=sys.stderr)
            return path
    try:
        path = course_model_file()
    except PretrainedError as err:
        raise UserError(f"no checkpoint given, none found at {' or '.join(map(str, candidates))}, and {err}") from err
    print(f"using {describe(path)}", file=sys.stderr)
    return path


def _checkpoint(arg: str | None) -> Path:
    if arg is None:
        return _default_checkpoint()
    path = Path(arg)
    if not path.is_file():
        raise UserError(f"no checkpoint at {path}; train one with: python -m transformer_lessons train --preset quick")
    return path


def _load_corpus(path: str):
    from transformer_lessons.data import Corpus

    if not Path(path).is_file():
        raise UserError(f"no corpus file at {path}; make one with: python -m transformer_lessons prepare --out {path}")
    return Corpus.load(path)


def cmd_prepare(args) -> int:
    from transformer_lessons.train import TRAIN_PRESETS, prepare_corpus_for

    config = _with_bpe_merges(TRAIN_PRESETS[args.preset or "full"], args.bpe_merges)
    corpus = prepare_corpus_for(config, args.data_dir, progress=True, limit=args.limit)
    corpus.save(args.out)
    print(f"wrote {args.out}: {corpus}")
    return 0


def _with_bpe_merges(config, merges: int | None):
    """The config with ``--bpe-merges`` applied (0 = whole words); unchanged when the option is absent."""
    if merges is None:
        return config
    if merges < 0:
        raise UserError(f"--bpe-merges must be 0 (whole words) or more, got {merges}")
    return config.replace(bpe_merges=merges or None)


def cmd_train(args) -> int:
    from transformer_lessons.train import get_train_config, train

    config = get_train_config(args.preset)
    changes = {
        "epochs": args.epochs,
        "limit": args.limit,
        "max_tokens": args.max_tokens,
        "eval_every": args.eval_every,
        "bleu_val_limit": args.bleu_val_limit,
        "beam_size": args.beam,
        "seed": args.seed,
        "compile": args.compile,
        "max_minutes": args.max_minutes,
    }
    config = _with_bpe_merges(config.replace(**{k: v for k, v in changes.items() if v is not None}), args.bpe_merges)
    for name in ("epochs", "max_tokens", "eval_every", "beam_size"):
        if getattr(config, name) < 1:
            raise UserError(f"--{name.replace('_', '-')} must be at least 1, got {getattr(config, name)}")
    corpus = None
    if args.corpus:
        corpus = _load_corpus(args.corpus)
        if config.limit is not None:  # a saved corpus holds all its pairs: apply the limit here (its vocab stays)
            corpus.pairs["train"] = corpus.pairs["train"][: config.limit]
            corpus.text["train"] = corpus.text["train"][: config.limit]
            if corpus.tokens is not None:
                corpus.tokens["train"] = corpus.tokens["train"][: config.limit]
            corpus.info["limit"] = config.limit
    result = train(
        config,
        corpus,
        out_dir=args.out,
        device=args.device,
        resume=not args.no_resume,
        progress=not args.quiet,
        log=True,  # the per-epoch lines, also with --quiet: they are the run's record
        max_steps=args.max_steps,
        data_dir=args.data_dir,
        evaluate_test=not args.no_test,
    )
    out = Path(result["out_dir"])
    last = result["history"][-1] if result["history"] else None
    if last:
        print(f"trained {len(result['history'])} epochs, {result['step']} steps, {last['tokens_per_s']:,.0f} target tokens/s in the last epoch")
    if result["best_epoch"] is not None:
        print(f"best validation BLEU (greedy) {result['best_val_bleu']:.2f} at epoch {result['best_epoch']}: {out / 'best.pt'}")
    if result["test"]:
        t = result["test"]
        print(f"test_2016_flickr (beam {t['beam_size']}): BLEU {t['bleu']:.2f}  {t['signature']}")
        print(f"  tutorial BLEU (lowercased, tokenized): {t['tutorial_bleu']:.2f}")
    if result["stopped"] == "max_steps":
        print(f"stopped after {result['step']} steps as asked; run the same command again to continue")
    if result["stopped"] == "time_limit":
        print(
            f"stopped by the time limit after {result['train_time_s'] / 60:.1f} min of training; "
            "run again with a larger --max-minutes (it counts the whole run) to continue"
        )
    return 0


def cmd_translate(args) -> int:
    from transformer_lessons.decode import translate

    checkpoint = _checkpoint(args.checkpoint)
    if args.beam < 1:
        raise UserError(f"--beam must be at least 1, got {args.beam}")
    for line in translate(checkpoint, list(args.sentences), beam_size=args.beam, device=args.device):
        print(line)
    return 0


def cmd_evaluate(args) -> int:
    from transformer_lessons.decode import evaluate

    checkpoint = _checkpoint(args.checkpoint)
    corpus = _load_corpus(args.corpus) if args.corpus else None
    result = evaluate(
        checkpoint,
        args.split,
        data_dir=args.data_dir,
        beam_size=args.beam,
        length_penalty=args.length_penalty,
        corpus=corpus,
        device=args.device,
        limit=args.limit,
    )
    print(f"{args.split} ({result['n']} sentences, beam {args.beam}): {result['bleu_text']}")
    print(f"signature: {result['signature']}")
    print(f"tutorial BLEU (lowercased, spaCy-tokenized, not comparable): {result['tutorial_bleu']:.2f}")
    if args.output:
        Path(args.output).write_text("\n".join(result["hypotheses"]) + "\n", encoding="utf-8")
    if args.json:
        scores = {k: v for k, v in result.items() if k not in ("hypotheses", "references")}
        Path(args.json).write_text(json.dumps(scores, indent=1) + "\n", encoding="utf-8")
    return 0


COMMANDS = {"prepare": cmd_prepare, "train": cmd_train, "translate": cmd_translate, "evaluate": cmd_evaluate}


def main(argv: list[str] | None = None) -> int:
    """Run the command line; returns the exit status (0 ok, 2 for a user error)."""
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.command is None:
        parser.print_help()
        return EXIT_USER_ERROR
    from transformer_lessons.data import DataError
    from transformer_lessons.train import CheckpointError

    try:
        return COMMANDS[args.command](args)
    except (UserError, DataError, CheckpointError) as err:
        print(f"error: {err}", file=sys.stderr)
        return EXIT_USER_ERROR
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    # Ctrl-C (SIGINT) raises KeyboardInterrupt, on which training saves last.pt, also when a script
    # started this process in the background (which makes it ignore SIGINT) or stops it with `timeout -s INT`.
    signal.signal(signal.SIGINT, signal.default_int_handler)
    sys.exit(main())
