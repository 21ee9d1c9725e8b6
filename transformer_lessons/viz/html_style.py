"""How the widgets' HTML is coloured, so that it reads in JupyterLab's light and dark themes.

A fixed dark grey (``#444``) is dark grey on the dark theme's black too: the translation disappears. So the
widgets' text takes JupyterLab's own theme variables (``--jp-content-font-color1`` is near black in the light
theme, white in the dark one), with a fallback for a front end that has none (Colab, VS Code). Where a colour
carries meaning (a warning, how sure the model was of a word, a word that changed), it is a *badge*: a light
background of its own with dark text on it, so its contrast is the same in every theme, and the meaning is also
said in words or numbers, not by the colour alone (a learner who cannot tell red from green reads the number).
"""

from __future__ import annotations

import html

TEXT = "var(--jp-content-font-color1, #1f1f1f)"  # the theme's text colour
MUTED = "var(--jp-content-font-color2, #555555)"  # secondary text (4.6:1 on the light theme, 9.5:1 on the dark)
FONT = "font-size:14px"  # the widgets' text: never below 12 px

# (lowest probability, background, what it means): light tints of Okabe and Ito's colour-blind-safe palette
# (blue, orange, vermillion), each under dark text (#1f1f1f: more than 10:1 on all three)
SURENESS = ((0.7, "#cfe4f7", "sure"), (0.3, "#fde3b0", "unsure"), (0.0, "#f9cdbf", "guessing"))
_BADGE_TEXT = "#1f1f1f"
_KINDS = {"error": ("#fde0dd", "#8a1c12"), "warning": ("#fdebc8", "#5c3b00"), "changed": ("#fde3b0", _BADGE_TEXT)}


def block(content: str) -> str:
    """A widget's result area: the theme's text colour, 14 px."""
    return f"<div style='{FONT};color:{TEXT};margin:0.4em 0;line-height:1.6'>{content}</div>"


def note(text: str) -> str:
    """A note under a result (an input cut to fit, a token never seen): secondary text, 13 px."""
    return f"<br><span style='font-size:13px;color:{MUTED}'>{text}</span>"


def badge(content: str, kind: str = "error") -> str:
    """``content`` on a light background of its own (error, warning, or a changed word): the same in every theme."""
    background, color = _KINDS[kind]
    return (
        f"<span style='background:{background};color:{color};border-radius:4px;padding:0.1em 0.35em'>{content}</span>"
    )


def sureness(p: float) -> tuple[str, str]:
    """``(background, meaning)`` for a word the model gave probability ``p``, judged on the per cent shown
    (``round(100 * p)``), so that a chip reading "70%" is never on the colour of "under 70%"."""
    percent = round(100 * p)
    return next((background, meaning) for low, background, meaning in SURENESS if percent >= round(100 * low))


def sureness_chip(word: str, p: float) -> str:
    """A word on its sureness colour, with its probability in per cent after it: colour and number say the same."""
    background, meaning = sureness(p)
    return (
        f"<span style='background:{background};color:{_BADGE_TEXT};border-radius:4px;padding:0.05em 0.3em;"
        f"white-space:nowrap' title='probability {p:.2f} ({meaning})'>{html.escape(word)}"
        f"<span style='font-size:12px;margin-left:0.2em'>{round(100 * p)}%</span></span>"
    )


def sureness_legend() -> str:
    """What the chips' colours mean, each shown on its own colour."""
    bounds = {"sure": "70% or more", "unsure": "30-70%", "guessing": "under 30%"}
    chips = " ".join(
        f"<span style='background:{background};color:{_BADGE_TEXT};border-radius:4px;padding:0 0.3em'>"
        f"{meaning}: {bounds[meaning]}</span>"
        for _, background, meaning in SURENESS
    )
    return f"<span style='font-size:13px;color:{MUTED}'>the probability the model gave each word: {chips}</span>"


__all__ = [
    "FONT",
    "MUTED",
    "SURENESS",
    "TEXT",
    "badge",
    "block",
    "note",
    "sureness",
    "sureness_chip",
    "sureness_legend",
]
