"""The command line's parser: its commands, their options, and errors of one line.

:func:`build_parser` makes the parser that :mod:`transformer_lessons.__main__` runs,
one function per command (``_add_train``, ...). Each option names its check
(:mod:`transformer_lessons.cli_args`), so every value is checked while the
arguments are parsed, before any work. :class:`OneLineParser` turns whatever
argparse would say about a bad command line (usage, error, exit) into one
:class:`UsageError` line: ``prog: error: ... (see --help)``.
"""

from __future__ import annotations

import argparse
import re

from transformer_lessons.cli_args import (
    MAX_SEED,
    PROG,
    TensorBoardOption,
    beam_size,
    checkpoint_file,
    corpus_file,
    device_arg,
    existing_dir,
    existing_dir_or_new,
    finite_float,
    new_file,
    non_negative_int,
    positive_int,
    probability_below_one,
    seed_int,
    split_name,
)
from transformer_lessons.config import MAX_BEAM_SIZE, PRECISIONS, SCHEDULES, TRAIN_PRESETS
from transformer_lessons.data import SPLITS

PRESETS = tuple(TRAIN_PRESETS)  # quick, laptop, cpu, full
DEFAULT_MODEL_HELP = (
    "default: runs/<mode>/best.pt, then the other presets' best.pt, else the course's trained model: "
    "committed in the repository, downloaded once where there is no clone, replaced by $TRANSFORMER_LESSONS_MODEL"
)
DEVICE_FORMS = "cpu, cuda, cuda:N or mps"


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
        help="quick: CPU, ~2 min, a toy; laptop: your own translator, 10 min of training on a CPU; cpu: the course's translator on a CPU, 90 min; full: one GPU, ~15 min (default: $TRANSFORMER_LESSONS_MODE, else full with a GPU, quick without)",
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
    _add_schedule(p)
    p.add_argument("--device", type=device_arg, help=f"{DEVICE_FORMS} (default: cuda if available)")
    p.add_argument(
        "--compile", action=argparse.BooleanOptionalAction, default=None, help="torch.compile the model (GPU only)"
    )
    _add_model_args(p)
    p.add_argument(
        "--precision",
        choices=PRECISIONS,
        help="auto (default): bfloat16 autocast on recent GPUs, float32 elsewhere; native: also on a CPU with "
        "bfloat16 arithmetic (Linux: AVX512-BF16, AMX or Arm bf16); bfloat16: on any CPU too; float32: never",
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


def _add_lab(sub) -> None:
    p = sub.add_parser(
        "lab",
        help="open the course in JupyterLab (what make learn runs; Windows and macOS too)",
        description="Start JupyterLab on the course folder (run it there), opened on learner/: the notebooks with the "
        "exercises open. Options this command does not know go to jupyter lab as they are (--port 8890, --no-browser).",
    )
    p.add_argument(
        "--solutions",
        action="store_true",
        help="open notebooks/ instead: every answer and output (what make lab opens)",
    )


def build_parser() -> argparse.ArgumentParser:
    parser = OneLineParser(
        prog=PROG,
        description="Train, run and score the course's German->English Transformer on Multi30k.",
        epilog=f"Run '{PROG} COMMAND --help' for the options of a command.",
    )
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")  # subparsers are OneLineParsers too
    for add in (_add_prepare, _add_train, _add_translate, _add_evaluate, _add_classroom, _add_lab):
        add(sub)
    return parser


def _add_schedule(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--schedule",
        choices=SCHEDULES,
        help="noam: the paper's learning rate (Eq. 3); to_end: the same warm-up, then a straight line to 0 at the end "
        "of the run's --max-minutes or --epochs, whichever comes first; noam_no_ramp: the paper's peak rate from the first "
        "update, then its decay (default: the preset's)",
    )


def _add_model_args(p: argparse.ArgumentParser) -> None:
    """The model's departures from the paper (``ModelConfig``; notebook 14 measures each): default, the preset's."""
    p.add_argument(
        "--norm-first",
        action="store_true",
        default=None,
        help="pre-norm: LayerNorm before each sublayer (Xiong et al. 2020)",
    )
    p.add_argument("--norm", choices=("layernorm", "rmsnorm"), help="rmsnorm: RMSNorm (Zhang & Sennrich 2019)")
    p.add_argument("--ffn", choices=("relu", "swiglu"), help="swiglu: a gated feed-forward (Shazeer 2020)")
    p.add_argument(
        "--positional",
        choices=("sinusoidal", "learned", "rotary"),
        help="rotary: rotated queries and keys (Su et al. 2021) instead of added sinusoids",
    )
    p.add_argument(
        "--dropout",
        type=probability_below_one,
        metavar="P",
        help="dropout rate, 0 to below 1 (paper §5.4: 0.1; default: the preset's)",
    )
    p.add_argument(
        "--kv-heads",
        type=positive_int,
        metavar="N",
        help="key/value heads shared by the query heads (Ainslie et al. 2023); 1 is multi-query attention",
    )
