"""Command line: ``python -m transformer_lessons {prepare,train,translate,evaluate,classroom}``.

Examples::

    python -m transformer_lessons train --preset quick
    python -m transformer_lessons translate "Ein Mann fährt Fahrrad."
    python -m transformer_lessons evaluate --checkpoint runs/quick/best.pt
    python -m transformer_lessons classroom --from /media/usb/multi30k

The command line answers at once: every option is checked while the arguments
are parsed (each by a small ``type=`` function below), before any data, spaCy,
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

import argparse
import errno
import json
import math
import os
import re
import signal
import sys
from pathlib import Path


from transformer_lessons.atomic import atomic_write_text
from transformer_lessons.data import SPLITS
from transformer_lessons.config import MAX_BEAM_SIZE, PRECISIONS
from transformer_lessons.errors import CourseError, RankLostError
from transformer_lessons.hardware import resolve_device
from transformer_lessons.tensorboard import INSTALL_HINT, TensorBoardMissingError, summary_writer_class

EXIT_FAILURE = 1  # the machine failed (OSError); the command itself was fine
EXIT_USER_ERROR = 2
EXIT_INTERRUPTED = 130  # 128 + SIGINT, what a shell reports for Ctrl-C
PROG = "python -m transformer_lessons"
PRESETS = ("quick", "cpu", "full")
#: The batcher seeds with ``seed + epoch``; 32 bits leave room for that and are what every RNG accepts.
MAX_SEED = 2**32 - 1
DEFAULT_MODEL_HELP = (
    "default: runs/<mode>/best.pt, then the other presets' best.pt, else the course's trained model: "
    "committed in the repository, downloaded once where there is no clone, replaced by $TRANSFORMER_LESSONS_MODEL"
)


class UserError(Exception):
    """Something the user can fix, found while a command runs; printed as one line."""


class UsageError(Exception):
    """A bad command line; the message is the whole line to print."""


def one_line(text: str) -> str:
    """``text`` as one line: its lines joined by "; ", or by a space after a line that ends in ":"."""
    lines = [line.strip() for line in str(text).splitlines() if line.strip()]
    joined = lines[:1]
    for before, line in zip(lines, lines[1:]):
        joined.append((" " if before.endswith(":") else "; ") + line)
    return "".join(joined)


def usage_line(prog: str, message: str) -> str:
    """``prog: error: message (see --help)``; argparse's ``argument --x: ...`` becomes ``--x ...``."""
    message = re.sub(r"^argument (\S+): ", r"\1 ", one_line(message))
    return f"{prog}: error: {message} (see --help)"


class OneLineParser(argparse.ArgumentParser):
    """An ``ArgumentParser`` whose errors are one line (raised as :class:`UsageError`), not usage + error + exit.

    ``add_subparsers`` makes its subparsers of the same class, so every command's
    errors (an unknown option, a bad choice, a value a ``type=`` rejects) go through here.
    """

    def error(self, message: str):  # argparse calls this for every bad argument
        raise UsageError(usage_line(self.prog, message))


# --- The checks, one per kind of value. Each takes the text the user typed and returns the value
# --- or raises ArgumentTypeError; argparse prefixes the option's name, so a message reads "--limit must be ...".


def _whole_number(text: str, low: int, high: int | None, what: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be {what}, got {text!r}") from None
    if value < low or (high is not None and value > high):
        raise argparse.ArgumentTypeError(f"must be {what}, got {value}")
    return value


def positive_int(text: str) -> int:
    """A count of at least 1 (``--limit``, ``--epochs``, ``--max-steps``, ...)."""
    return _whole_number(text, 1, None, "a positive whole number")


def non_negative_int(text: str) -> int:
    """0 or more (``--bpe-merges``: 0 means whole words)."""
    return _whole_number(text, 0, None, "0 or a positive whole number")


def seed_int(text: str) -> int:
    """A random seed, 0 to :data:`MAX_SEED`."""
    return _whole_number(text, 0, MAX_SEED, f"a whole number from 0 to {MAX_SEED}")


def beam_size(text: str) -> int:
    """1 (greedy) to ``config.MAX_BEAM_SIZE``: each beam multiplies the decoder's work."""
    return _whole_number(
        text, 1, MAX_BEAM_SIZE, f"a whole number from 1 (greedy) to {MAX_BEAM_SIZE} (the paper uses 4)"
    )


def finite_float(min: float, *, above: bool = False):  # noqa: A002 - reads like the option's bound
    """A ``type=`` for a finite number ``>= min`` (``> min`` when ``above``); rejects nan and inf."""
    what = f"a finite number {'>' if above else '>='} {min:g}"

    def check(text: str) -> float:
        try:
            value = float(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"must be {what}, got {text!r}") from None
        if not math.isfinite(value) or value < min or (above and value == min):
            raise argparse.ArgumentTypeError(f"must be {what}, got {value:g}")
        return value

    check.__name__ = "finite_float"  # argparse names the type in a few messages
    return check


def device_arg(text: str) -> str:
    """``cpu``, ``cuda``, ``cuda:N`` or ``mps``, and only one this machine has (:func:`~transformer_lessons.hardware.resolve_device`)."""
    try:
        resolve_device(text)
    except ValueError as err:
        raise argparse.ArgumentTypeError(str(err)) from None
    return text


def split_name(text: str) -> str:
    """One of the Multi30k splits, ``data.SPLITS``."""
    if text not in SPLITS:
        raise argparse.ArgumentTypeError(f"{text!r} is not a Multi30k split; choose one of {', '.join(SPLITS)}")
    return text


def _kind(path: Path, text: str) -> str | None:
    """``"dir"``, ``"file"`` or None (nothing there); a path we may not even look at (EACCES) is an error too."""
    try:
        return "dir" if path.is_dir() else "file" if path.exists() else None
    except OSError as err:
        raise argparse.ArgumentTypeError(f"{text} cannot be used: {err.strerror}") from None


def _check_writable(path: Path, text: str) -> None:
    """Fail unless ``path`` (a folder that exists, else the first existing folder above it) lets us create files."""
    folder = path if _kind(path, text) == "dir" else path.absolute().parent
    while _kind(folder, text) is None:  # the first folder that exists is the one where the rest gets created
        folder = folder.parent
    if _kind(folder, text) != "dir":
        raise argparse.ArgumentTypeError(f"{text} cannot be created: {folder} is a file")
    if not os.access(folder, os.W_OK | os.X_OK):
        raise argparse.ArgumentTypeError(f"{text} cannot be written: the folder {folder} is read-only for you")


def existing_dir_or_new(text: str) -> str:
    """A folder to write into (``train --out``): one that exists, or one that can be created; never a file."""
    if _kind(Path(text), text) == "file":
        raise argparse.ArgumentTypeError(
            f"{text} is a file, not a folder; the run's checkpoints and logs go in a folder"
        )
    _check_writable(Path(text), text)
    return text


def new_file(text: str) -> str:
    """A file to write (``prepare --out``, ``--output``, ``--json``): never an existing folder."""
    if _kind(Path(text), text) == "dir":
        raise argparse.ArgumentTypeError(f"{text} is a folder; give the name of a file to write")
    _check_writable(Path(text), text)
    return text


def existing_dir(text: str) -> str:
    """``--data-dir``: a folder that exists (expanded like ``data.resolve_data_dir``; "" means unset)."""
    if text and _kind(Path(text).expanduser(), text) != "dir":
        raise argparse.ArgumentTypeError(
            f"{text} does not exist or is not a folder; it should hold the raw Multi30k .gz files"
        )
    return text


def checkpoint_file(text: str) -> str:
    """``--checkpoint``: a file that exists (whether it is a checkpoint, loading it says)."""
    if _kind(Path(text), text) != "file":
        raise argparse.ArgumentTypeError(f"finds no checkpoint at {text}; train one with: {PROG} train --preset quick")
    return text


def corpus_file(text: str) -> str:
    """``--corpus``: a file that exists, made by ``prepare``."""
    if _kind(Path(text), text) != "file":
        raise argparse.ArgumentTypeError(f"finds no corpus file at {text}; make one with: {PROG} prepare --out {text}")
    return text


class TensorBoardOption(argparse.Action):
    """``--tensorboard [DIR]``: log to DIR (alone: ``<out>/tensorboard``); refused while parsing if the extra is missing."""

    def __call__(self, parser, namespace, values, option_string=None):
        try:
            summary_writer_class()
        except TensorBoardMissingError:
            raise argparse.ArgumentError(
                self, f"needs the tensorboard package, which is not installed: {INSTALL_HINT}"
            ) from None
        setattr(namespace, self.dest, values)


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


DEVICE_FORMS = "cpu, cuda, cuda:N or mps"


# --- The parser: one function per command.


def _add_data_args(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--data-dir",
        type=existing_dir,
        metavar="DIR",
        help="directory with the raw Multi30k .gz files (default: $TRANSFORMER_LESSONS_DATA, else the cache/download)",
    )
    p.add_argument(
        "--corpus",
        type=corpus_file,
        metavar="PATH",
        help="a corpus saved by 'prepare' (no spaCy needed); replaces --data-dir",
    )


def _add_prepare(sub) -> None:
    p = sub.add_parser(
        "prepare",
        help="tokenize Multi30k and save the corpus to one file",
        description="Tokenize Multi30k (spaCy) and save the corpus, e.g. to train on a machine without spaCy (train --corpus).",
    )
    p.add_argument("--out", type=new_file, required=True, metavar="PATH", help="file to write (.json.gz)")
    p.add_argument(
        "--preset",
        choices=PRESETS,
        default=None,
        help="take min_freq/limit/drop_longer_than/bpe_merges from this training preset (default: full)",
    )
    p.add_argument("--limit", type=positive_int, metavar="N", help="keep only the first N training pairs")
    p.add_argument(
        "--bpe-merges",
        type=non_negative_int,
        metavar="N",
        help="subword units: N byte-pair merges per language (0 = whole words; default: the preset's)",
    )
    p.add_argument("--data-dir", type=existing_dir, metavar="DIR", help="directory with the raw Multi30k .gz files")


def _add_train(sub) -> None:
    p = sub.add_parser(
        "train",
        help="train a model (resumes an interrupted run)",
        description="Train on Multi30k with a preset; checkpoints, history.json and metrics.json go to --out.",
    )
    p.add_argument(
        "--preset",
        choices=PRESETS,
        default=None,
        help="quick: CPU, ~2 min; cpu: the course's translator on a CPU, 90 min; full: one GPU, ~15 min (default: $TRANSFORMER_LESSONS_MODE, else full with a GPU, quick without)",
    )
    p.add_argument(
        "--out",
        type=existing_dir_or_new,
        metavar="DIR",
        help="output directory (default: runs/<preset>, in a clone the repository's top-level runs/)",
    )
    _add_data_args(p)
    p.add_argument("--epochs", type=positive_int, metavar="N", help="number of epochs")
    p.add_argument("--limit", type=positive_int, metavar="N", help="use only the first N training pairs")
    p.add_argument(
        "--bpe-merges",
        type=non_negative_int,
        metavar="N",
        help="subword units: N byte-pair merges per language (0 = whole words; default: the preset's)",
    )
    p.add_argument("--max-tokens", type=positive_int, metavar="N", help="padded tokens per batch")
    p.add_argument("--eval-every", type=positive_int, metavar="N", help="validation BLEU every N epochs")
    p.add_argument(
        "--bleu-val-limit", type=positive_int, metavar="N", help="validation BLEU on the first N sentences only"
    )
    p.add_argument(
        "--beam",
        type=beam_size,
        metavar="N",
        help=f"beam size for the final test evaluation (1 = greedy, at most {MAX_BEAM_SIZE})",
    )
    p.add_argument("--seed", type=seed_int, metavar="N", help=f"random seed (0 to {MAX_SEED})")
    p.add_argument(
        "--average-last",
        type=positive_int,
        metavar="N",
        help="test the mean of the last N epochs' weights (paper §6.1 averages 5) instead of the best epoch's",
    )
    p.add_argument(
        "--max-minutes",
        type=finite_float(0.0, above=True),
        metavar="M",
        help="stop once the run's training time (all resumed calls together, evaluation excluded) reaches this many minutes, "
        "then evaluate; resume with a larger value to continue",
    )
    p.add_argument("--max-steps", type=positive_int, metavar="N", help="stop after this many updates (resume later)")
    p.add_argument("--device", type=device_arg, help=f"{DEVICE_FORMS} (default: cuda if available)")
    p.add_argument(
        "--compile", action=argparse.BooleanOptionalAction, default=None, help="torch.compile the model (GPU only)"
    )
    p.add_argument(
        "--precision",
        choices=PRECISIONS,
        help="auto (default): bfloat16 autocast on recent GPUs, float32 elsewhere; "
        "bfloat16: on a CPU too (faster steps); float32: never",
    )
    p.add_argument(
        "--tensorboard",
        nargs="?",
        const=True,
        type=existing_dir_or_new,
        action=TensorBoardOption,
        metavar="DIR",
        help='also log to TensorBoard, into DIR (default: <out>/tensorboard); needs pip install "transformer-lessons[tensorboard]"',
    )
    p.add_argument("--no-resume", action="store_true", help="start over even if --out holds last.pt")
    p.add_argument("--no-test", action="store_true", help="skip the final test-set evaluation")
    p.add_argument("--quiet", action="store_true", help="no progress bars; the one-line-per-epoch log is still printed")


def _add_translate(sub) -> None:
    p = sub.add_parser(
        "translate", help="translate German sentences", description="Translate German sentences into English."
    )
    p.add_argument("sentences", nargs="+", help="German sentences (quote each one)")
    p.add_argument("--checkpoint", type=checkpoint_file, metavar="PATH", help=f"a checkpoint ({DEFAULT_MODEL_HELP})")
    p.add_argument(
        "--beam",
        type=beam_size,
        default=4,
        metavar="N",
        help=f"beam size (default 4; 1 = greedy; at most {MAX_BEAM_SIZE})",
    )
    p.add_argument("--device", type=device_arg, help=f"{DEVICE_FORMS} (default: cuda if available)")
    p.add_argument(
        "--no-cache",
        action="store_true",
        help="decode without the key/value cache: rerun the decoder on the whole prefix at each step (same output, slower; notebook 12)",
    )


def _add_evaluate(sub) -> None:
    p = sub.add_parser(
        "evaluate",
        help="BLEU of a checkpoint on a Multi30k split",
        description="Translate a split and print sacreBLEU (with its signature).",
    )
    p.add_argument(
        "--checkpoint", type=checkpoint_file, metavar="PATH", help=f"the checkpoint to score ({DEFAULT_MODEL_HELP})"
    )
    p.add_argument(
        "--split",
        type=split_name,
        default="test_2016_flickr",
        metavar="SPLIT",
        help=f"Multi30k split: {', '.join(SPLITS)} (default test_2016_flickr)",
    )
    _add_data_args(p)
    p.add_argument(
        "--beam",
        type=beam_size,
        default=4,
        metavar="N",
        help=f"beam size (default 4, the paper's; 1 = greedy; at most {MAX_BEAM_SIZE})",
    )
    p.add_argument(
        "--length-penalty",
        type=finite_float(0.0),
        default=0.6,
        metavar="ALPHA",
        help="GNMT length penalty alpha, >= 0 (default 0.6; 0 = none)",
    )
    p.add_argument("--limit", type=positive_int, metavar="N", help="score only the first N sentences")
    p.add_argument("--device", type=device_arg, help=f"{DEVICE_FORMS} (default: cuda if available)")
    p.add_argument("--output", type=new_file, metavar="PATH", help="also write the hypotheses, one per line")
    p.add_argument("--json", type=new_file, metavar="PATH", help="also write the scores as JSON")
    p.add_argument(
        "--no-cache",
        action="store_true",
        help="decode without the key/value cache: rerun the decoder on the whole prefix at each step (same output, slower; notebook 12)",
    )


def _add_classroom(sub) -> None:
    p = sub.add_parser(
        "classroom",
        help="prepare this course folder for a classroom without network (or --check a machine)",
        description="Make the course folder self-sufficient: Multi30k (checked) and its tokens in classroom/cache, the course's "
        "model checked, the quick model trained into runs/quick. Then copy the folder to the learners' machines: every "
        "notebook runs with the network off. Run it inside the course folder.",
    )
    p.add_argument(
        "--from",
        dest="source",
        type=existing_dir,
        metavar="DIR",
        help="copy Multi30k from this folder of .gz files instead of downloading it (default: $TRANSFORMER_LESSONS_DATA when set)",
    )
    p.add_argument(
        "--no-train",
        action="store_true",
        help="leave the quick model for each learner to train (notebook 10, about 2 min)",
    )
    p.add_argument(
        "--wheels",
        action="store_true",
        help="also download every Python package of this environment into classroom/wheels, for an offline make learn on machines of the same OS and Python",
    )
    p.add_argument(
        "--torch-index",
        metavar="URL",
        help="where --wheels gets PyTorch (default: from this environment's build, e.g. https://download.pytorch.org/whl/cpu for 2.13.0+cpu; PyPI for a plain version)",
    )
    p.add_argument(
        "--check",
        action="store_true",
        help="only say whether this machine is ready (no network, nothing changed); exit status 1 if not",
    )
    p.add_argument("--quiet", action="store_true", help="no progress bars")


def build_parser() -> argparse.ArgumentParser:
    parser = OneLineParser(
        prog=PROG,
        description="Train, run and score the course's German->English Transformer on Multi30k.",
        epilog=f"Run '{PROG} COMMAND --help' for the options of a command.",
    )
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")  # subparsers are OneLineParsers too
    for add in (_add_prepare, _add_train, _add_translate, _add_evaluate, _add_classroom):
        add(sub)
    return parser


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
    }
    config = _with_bpe_merges(config.replace(**{k: v for k, v in changes.items() if v is not None}), args.bpe_merges)
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


COMMANDS = {
    "prepare": cmd_prepare,
    "train": cmd_train,
    "translate": cmd_translate,
    "evaluate": cmd_evaluate,
    "classroom": cmd_classroom,
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
    parser = build_parser()
    try:
        check_utf8(argv)
        args, extra = parser.parse_known_args(argv)  # every option is checked here, before any work
        if extra:  # said here rather than by parse_args, to name the command they were given to
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
