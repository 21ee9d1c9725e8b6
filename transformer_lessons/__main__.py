"""Command line: ``python -m transformer_lessons {prepare,train,translate,evaluate,classroom}``.

Examples::

    python -m transformer_lessons train --preset quick
    python -m transformer_lessons translate "Ein Mann fährt Fahrrad."
    python -m transformer_lessons evaluate --checkpoint runs/quick/best.pt
    python -m transformer_lessons classroom --from /media/usb/multi30k

The command line answers at once: every option is checked while the arguments
are parsed (each by a small ``type=`` function of :mod:`transformer_lessons.cli_args`,
named by the parser in :mod:`transformer_lessons.cli_parser`), before any data, spaCy,
model or training is touched. Whatever goes wrong prints ONE line on stderr,
never a traceback or argparse's two-line usage message.

Exit status:

* 0: done.
* 2: the command cannot work as given: a bad option (``prog: error: ... (see --help)``),
  or a file or run it names that is missing, broken or in use, or an error the
  package raises on purpose (:mod:`transformer_lessons.errors`: ``error: ...``).
  Change the command or the files it names.
* 1: the command was right but the machine failed while carrying it out: an
  ``OSError`` such as a full disk or a folder that became read-only
  (``error: <file>: <reason>``). Free space or fix the folder, then run the same
  command again (training resumes). Not 2, because nothing in the command is wrong.
  Also ``classroom``'s answer when this machine is not ready for a class without network, and, under
  ``torchrun``, a process's answer when another process of the run stopped (``error: the other process ...``).
* 130: interrupted with Ctrl-C (training saves ``last.pt`` first and says so).
"""

from __future__ import annotations

import errno
import json
import signal
import sys
from pathlib import Path

from transformer_lessons.atomic import atomic_write_text
from transformer_lessons.cli_args import PROG
from transformer_lessons.cli_parser import UsageError, build_parser, one_line, usage_line
from transformer_lessons.config import ModeError
from transformer_lessons.console import printable_streams
from transformer_lessons.errors import CourseError, RankLostError

EXIT_FAILURE = 1  # the machine failed (OSError); the command itself was fine
EXIT_USER_ERROR = 2
EXIT_INTERRUPTED = 130  # 128 + SIGINT, what a shell reports for Ctrl-C


class UserError(Exception):
    """Something the user can fix, found while a command runs; printed as one line."""


def check_utf8(argv: list[str]) -> None:
    """Fail on an argument that is not valid UTF-8 (Linux hands it to Python with surrogate escapes, like '\\udcff')."""
    for i, arg in enumerate(argv):
        try:
            arg.encode("utf-8")
        except UnicodeEncodeError:
            try:
                raw = arg.encode("utf-8", "surrogateescape")  # the bytes as typed
            except UnicodeEncodeError:
                raw = arg.encode("utf-8", "backslashreplace")
            where = f"the value of {argv[i - 1]}" if i and argv[i - 1].startswith("--") else f"argument {i + 1}"
            prog = f"{PROG} {argv[0]}" if argv[0] in COMMANDS else PROG
            raise UsageError(
                usage_line(prog, f"{where} is not valid UTF-8: {raw!r}; use a UTF-8 terminal or file name")
            )


# --- The commands. Their options are already checked; they import the heavy modules when they run.


def _default_checkpoint() -> Path:
    """``runs/<mode>/best.pt``, then another preset's, else the course's trained model; says which on stderr."""
    from transformer_lessons.config import compute_mode
    from transformer_lessons.pretrained import PretrainedError, course_model_file, describe
    from transformer_lessons.rundir import default_out_dir

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
    """The ``--checkpoint`` (its existence checked by :func:`checkpoint_file`), else the default."""
    return _default_checkpoint() if arg is None else Path(arg)


def _load_corpus(path: str):
    from transformer_lessons.data import Corpus

    return Corpus.load(path)


def _with_bpe_merges(config, merges: int | None):
    """The config with ``--bpe-merges`` applied (0 = whole words); unchanged when the option is absent."""
    return config if merges is None else config.replace(bpe_merges=merges or None)


def cmd_prepare(args) -> int:
    from transformer_lessons.config import TRAIN_PRESETS
    from transformer_lessons.run import prepare_corpus_for

    config = _with_bpe_merges(TRAIN_PRESETS[args.preset or "full"], args.bpe_merges)
    corpus = prepare_corpus_for(config, args.data_dir, progress=True, limit=args.limit)
    corpus.save(args.out)
    print(f"wrote {args.out}: {corpus}")
    return 0


def _limit_corpus(corpus, limit: int) -> None:
    """Keep the first ``limit`` training pairs of a saved corpus (it holds all of them; its vocab stays)."""
    corpus.pairs["train"] = corpus.pairs["train"][:limit]
    corpus.text["train"] = corpus.text["train"][:limit]
    if corpus.tokens is not None:
        corpus.tokens["train"] = corpus.tokens["train"][:limit]
    corpus.info["limit"] = limit


def _print_train_result(result: dict) -> None:
    out = Path(result["out_dir"])
    last = result["history"][-1] if result["history"] else None
    if last:
        print(
            f"trained {len(result['history'])} epochs, {result['step']} steps, {last['tokens_per_s']:,.0f} target tokens/s in the last epoch"
        )
    if result["best_epoch"] is not None:
        print(
            f"best validation BLEU (greedy) {result['best_val_bleu']:.2f} at epoch {result['best_epoch']}: {out / 'best.pt'}"
        )
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


def cmd_train(args) -> int:
    from transformer_lessons.distributed import from_environment
    from transformer_lessons.config import get_train_config
    from transformer_lessons.run import train

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
        "precision": args.precision,
        "average_last": args.average_last,
        "max_minutes": args.max_minutes,
        "schedule": args.schedule,
    }
    model = {
        "dropout": args.dropout,
        "norm_first": args.norm_first,
        "norm": args.norm,
        "ffn": args.ffn,
        "positional": args.positional,
        "n_kv_heads": args.kv_heads,
    }
    changes["model"] = config.model.replace(**{k: v for k, v in model.items() if v is not None})
    try:
        config = config.replace(**{k: v for k, v in changes.items() if v is not None})
    except ValueError as err:  # options that are fine alone but not together: --kv-heads 3 with 8 heads
        raise UserError(str(err)) from None
    config = _with_bpe_merges(config, args.bpe_merges)
    corpus = None
    if args.corpus:
        corpus = _load_corpus(args.corpus)
        corpus.require_splits(args.corpus)  # before --limit cuts 'train', which may be the one missing
        if config.limit is not None:
            _limit_corpus(corpus, config.limit)
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
        tensorboard=args.tensorboard,
    )
    if from_environment().is_main:  # under torchrun, rank 0 reports for every process
        _print_train_result(result)
    return 0


def cmd_translate(args) -> int:
    from transformer_lessons.translation import translate

    checkpoint = _checkpoint(args.checkpoint)
    for line in translate(
        checkpoint, list(args.sentences), beam_size=args.beam, device=args.device, use_cache=not args.no_cache
    ):
        print(line)
    return 0


def cmd_evaluate(args) -> int:
    from transformer_lessons.translation import evaluate

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
        use_cache=not args.no_cache,
    )
    print(f"{args.split} ({result['n']} sentences, beam {args.beam}): {result['bleu_text']}")
    print(f"signature: {result['signature']}")
    print(f"tutorial BLEU (lowercased, spaCy-tokenized, not comparable): {result['tutorial_bleu']:.2f}")
    if args.output:
        atomic_write_text(args.output, "\n".join(result["hypotheses"]) + "\n")
    if args.json:
        scores = {k: v for k, v in result.items() if k not in ("hypotheses", "references")}
        atomic_write_text(args.json, json.dumps(scores, indent=1) + "\n")
    return 0


def cmd_classroom(args) -> int:
    from transformer_lessons import classroom

    if not args.check:
        classroom.prepare(args.source, quick_model=not args.no_train, progress=not args.quiet)
        if args.wheels:
            classroom.download_wheels(args.torch_index)
        print("\nwhat a learner's copy of this folder will find:")
    items = classroom.readiness()
    for item in items:
        print(item)
    missing = [item.what for item in items if item.needed and not item.ready]
    if missing:
        print(f"not ready: {', '.join(missing)}; run {PROG} classroom here while connected (or with --from DIR)")
        return EXIT_FAILURE
    print("ready: every notebook runs on this machine without a network")
    return 0


def cmd_lab(args) -> int:
    from transformer_lessons.lab_launch import launch

    return launch(solutions=args.solutions, extra=args.jupyter_args)


COMMANDS = {
    "prepare": cmd_prepare,
    "train": cmd_train,
    "translate": cmd_translate,
    "evaluate": cmd_evaluate,
    "classroom": cmd_classroom,
    "lab": cmd_lab,
}


def describe_os_error(err: OSError) -> str:
    """``<file>: <reason>`` (e.g. ``runs/quick/last.pt: No space left on device; free some space ...``); the reason alone when no file is named."""
    reason = err.strerror or str(err)
    if err.errno == errno.ENOSPC:  # the file it would have replaced is intact (atomic writes): say what to do
        reason += "; free some space and run the same command again"
    return f"{err.filename}: {reason}" if err.filename is not None else reason


def run_command(args) -> int:
    """Run the parsed command; every error it can meet becomes one line on stderr and an exit status."""
    try:
        return COMMANDS[args.command](args)
    except (
        UserError,
        CourseError,
        ModeError,  # TRANSFORMER_LESSONS_MODE set to something else than quick or full
    ) as err:  # DataError, CheckpointError, TrainingError, ...: messages that say what to do
        print(f"error: {one_line(str(err))}", file=sys.stderr)
        return (
            EXIT_FAILURE if isinstance(err, RankLostError) else EXIT_USER_ERROR
        )  # another process failed, not the command
    except OSError as err:  # a full disk, a read-only folder: the machine failed, not the command
        print(f"error: {describe_os_error(err)}", file=sys.stderr)
        return EXIT_FAILURE
    except KeyboardInterrupt:  # training has saved last.pt and said so; no traceback
        print("interrupted", file=sys.stderr)
        return EXIT_INTERRUPTED


def main(argv: list[str] | None = None) -> int:
    """Run the command line; returns the exit status (0 ok, 2 a user error, 1 an OSError, 130 Ctrl-C)."""
    argv = sys.argv[1:] if argv is None else list(argv)
    printable_streams()
    parser = build_parser()
    try:
        check_utf8(argv)
        args, extra = parser.parse_known_args(argv)  # every option is checked here, before any work
        args.jupyter_args = extra if args.command == "lab" else []  # lab hands the options it does not know on
        if (
            extra and args.command != "lab"
        ):  # said here rather than by parse_args, to name the command they were given to
            prog = f"{PROG} {args.command}" if args.command else PROG
            raise UsageError(usage_line(prog, f"unrecognized arguments: {' '.join(extra)}"))
    except UsageError as err:
        print(err, file=sys.stderr)
        return EXIT_USER_ERROR
    if args.command is None:
        parser.print_help()
        return EXIT_USER_ERROR
    return run_command(args)


if __name__ == "__main__":
    # Ctrl-C (SIGINT) raises KeyboardInterrupt, on which training saves last.pt, also when a script
    # started this process in the background (which makes it ignore SIGINT) or stops it with `timeout -s INT`.
    signal.signal(signal.SIGINT, signal.default_int_handler)
    sys.exit(main())
