"""What a learner sees from a check, whichever check it is.

The feedback: a failing check draws itself in IPython as a few red lines holding
the diagnosis and none of the check's own frames; a pass prints one line and returns
None; a stub says "not implemented yet" and returns None; a slow answer hears "still
checking"; a NotImplementedError from PyTorch, a class without forward and a result
passed instead of the function are named as such. The wrong answers that an earlier
version of a check let through or misnamed (dropout, pad ids, cross-attention wiring,
biases, NaN, an instance instead of the class) are in that check's own file.
"""

from __future__ import annotations

import re
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import torch
from torch import nn

from check_helpers import failure
from transformer_lessons import checks
from transformer_lessons.checks import _feedback
from transformer_lessons.masks import causal_mask, target_mask

ROOT = Path(__file__).resolve().parents[1]
ANSI = re.compile(r"\x1b\[[0-9;]*m")


def causal_mask_no_diagonal(size):
    return torch.ones(size, size, dtype=torch.bool).tril(-1)  # the bug: a token may not see itself


# --- the feedback -----------------------------------------------------------------------


def test_pass_prints_one_line_and_returns_none(capsys):
    assert checks.check_causal_mask(causal_mask) is None
    assert capsys.readouterr().out.splitlines() == [
        "✔ causal_mask: correct (checked shape, bool dtype, lower triangle with the diagonal, sizes 1, 5, 8)"
    ]


def test_stub_says_not_implemented_and_returns_none_without_raising(capsys):
    def causal_mask(size):
        raise NotImplementedError("return a (size, size) bool tensor, True on and below the diagonal")

    assert checks.check_causal_mask(causal_mask) is None
    out = capsys.readouterr().out
    assert out.count("\n") == 1 and out.startswith("causal_mask: not implemented yet — ")


def test_a_stub_in_a_class_is_not_implemented_yet(capsys):
    class FeedForward(nn.Module):
        def __init__(self, d_model, d_ff, dropout=0.0):
            super().__init__()
            raise NotImplementedError("create w_1, w_2 and dropout")

    assert checks.check_feed_forward(FeedForward) is None
    assert "feed_forward: not implemented yet" in capsys.readouterr().out


def test_render_traceback_is_the_diagnosis_alone():
    error = failure(checks.check_causal_mask, causal_mask_no_diagonal)
    lines = error._render_traceback_()
    text = ANSI.sub("", "\n".join(lines))
    assert 1 <= len(lines) <= 6 and all(len(ANSI.sub("", line)) <= 100 for line in lines)
    assert text.startswith("✘ causal_mask: off by one: the diagonal is excluded")
    assert "tril(-1)" not in text and "tril(-1)" in " ".join(error.fixes)  # the fix waits for hint()
    assert text.endswith("more help: hint('causal_mask')")
    assert "transformer_lessons" not in text and "Traceback" not in text and "File " not in text
    assert "\x1b[31m" in lines[0]  # red
    assert str(error) == ANSI.sub("", text).replace("✘ ", "", 1).replace("\n  ", " ").replace(
        " more help", "\n  more help"
    )  # str(error) stays plain text
    assert "\x1b" not in str(error)


def test_render_traceback_points_at_the_learners_line_not_the_packages():
    def padding_mask(tokens, pad_id):
        keep = tokens.ne(pad_id).float()
        return keep[:, None, None, :] & torch.ones(1, dtype=torch.bool)  # float & bool: PyTorch raises

    error = failure(checks.check_padding_mask, padding_mask)
    text = ANSI.sub("", "\n".join(error._render_traceback_()))
    assert "of your `padding_mask`:" in text
    assert "return keep[:, None, None, :] & torch.ones(1, dtype=torch.bool)" in text  # the line, unwrapped
    assert "transformer_lessons" not in text


def test_a_failing_check_in_ipython_shows_only_the_diagnosis():
    # A real IPython shell (no kernel), in a fresh process so that it installs no hooks in this one.
    script = textwrap.dedent(
        """
        from IPython.core.interactiveshell import InteractiveShell
        shell = InteractiveShell.instance()
        shell.run_cell("import torch\\nfrom transformer_lessons.checks import check_causal_mask")
        print("=== fail")
        shell.run_cell("def causal_mask(size):\\n    return torch.ones(size, size, dtype=torch.bool).tril(-1)\\n"
                       "check_causal_mask(causal_mask)")
        print("=== pass")
        shell.run_cell("from transformer_lessons.masks import causal_mask\\ncheck_causal_mask(causal_mask)")
        print("=== stub")
        shell.run_cell("def causal_mask(size):\\n    raise NotImplementedError('write it')\\ncheck_causal_mask(causal_mask)")
        print("=== end")
        """
    )
    result = subprocess.run([sys.executable, "-c", script], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr
    out = ANSI.sub("", result.stdout)
    failed, passed, stub = (part.strip() for part in re.split(r"=== \w+\n?", out)[1:4])
    assert failed.startswith("✘ causal_mask: off by one: the diagonal is excluded"), out
    assert "more help: hint('causal_mask')" in failed and len(failed.splitlines()) <= 4
    for frame_marker in ("Traceback", "transformer_lessons", "checks/common", "File ", "ExerciseError"):
        assert frame_marker not in failed, out
    # The pass prints its line and echoes nothing: a True returned would show as "Out[..]: True".
    assert len(passed.splitlines()) == 1 and passed.startswith("✔ causal_mask: correct"), out
    assert "Out[" not in out
    assert stub.startswith("causal_mask: not implemented yet") and len(stub.splitlines()) == 1, out


def test_a_slow_answer_hears_still_checking(monkeypatch, capsys):
    monkeypatch.setattr(_feedback, "_SLOW_AFTER_S", 0.05)
    monkeypatch.setattr(_feedback, "_SLOW_EVERY_S", 0.05)

    def noam_rate(step, d_model, warmup, factor=1.0):
        time.sleep(0.03)  # a slow answer: 11 calls take a third of a second
        return factor * d_model**-0.5 * min(step**-0.5, step * warmup**-1.5)

    checks.check_noam_rate(noam_rate)
    lines = capsys.readouterr().out.splitlines()
    assert any(line.startswith("… still checking noam_rate (") for line in lines), lines
    assert lines[-1].startswith("✔ noam_rate: correct")


def test_a_fast_answer_hears_nothing_more(capsys):
    checks.check_noam_rate(lambda s, d, w, f=1.0: f * d**-0.5 * min(s**-0.5, s * w**-1.5))
    assert "still checking" not in capsys.readouterr().out


# --- NotImplementedError: the learner's stub, or PyTorch's -------------------------------------


def test_not_implemented_error_from_pytorch_is_a_bug_not_a_stub(capsys):
    def target_mask(tokens, pad_id):
        T = tokens.size(1)
        causal = torch.tril(torch.ones(T, T))  # float: & with a bool tensor raises NotImplementedError
        return causal & (tokens != pad_id)[:, None, None, :]

    message = str(failure(checks.check_target_mask, target_mask))
    assert "your code raised NotImplementedError" in message and "comes from PyTorch, not from your stub" in message
    assert "causal & (tokens != pad_id)" in message  # the learner's line
    assert "not implemented yet" not in capsys.readouterr().out


def test_a_class_without_forward_is_named():
    class FeedForward(nn.Module):
        def __init__(self, d_model, d_ff, dropout=0.0):
            super().__init__()
            self.w_1, self.w_2 = nn.Linear(d_model, d_ff), nn.Linear(d_ff, d_model)

        def foward(self, x):  # misspelt: nn.Module's placeholder forward raises NotImplementedError
            return self.w_2(torch.relu(self.w_1(x)))

    assert "no `forward` method" in str(failure(checks.check_feed_forward, FeedForward))


# --- a result instead of the function ------------------------------------------------------


def test_a_result_instead_of_the_function_is_named():
    message = str(failure(checks.check_target_mask, target_mask(torch.tensor([[2, 5, 1]]), 1)))
    assert "not what it returns" in message and "check_target_mask(" in message
