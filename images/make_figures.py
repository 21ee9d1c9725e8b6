"""Draw the course's diagrams with matplotlib and save them as SVG.

Usage (from the repository root):

    .venv/bin/python images/make_figures.py            # writes into images/
    .venv/bin/python images/make_figures.py OUT_DIR    # writes somewhere else

Each figure is written twice: ``name.svg`` (vector, to open and zoom) and ``name.png``
(the copy the notebooks embed, see ``transformer_lessons/authoring/figures.py``:
Colab shows no SVG from inside a notebook). The PNG is opaque, on the SVG's white
background, so JupyterLab's dark theme does not swallow the black lines.

The output is byte-for-byte reproducible: no date in the metadata (no matplotlib
version in the PNG either) and a fixed ``svg.hashsalt`` for the ids matplotlib writes. Colours mean the same thing in
every figure (one colour per kind of sublayer; see ``COLORS``). Every text is at least 12 px where
JupyterLab shows the figure (at most 940 px wide) and dark enough on white: tests/test_figure_text.py.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
from matplotlib.patches import Circle, FancyArrowPatch, FancyBboxPatch, Rectangle  # noqa: E402

COLORS = {
    "embed": "#d9d2e9",  # token embedding (lavender)
    "self_attn": "#f9cb9c",  # encoder self-attention (orange)
    "masked_attn": "#f4a6a6",  # decoder masked self-attention (red)
    "cross_attn": "#d5a6bd",  # cross-attention (mauve)
    "ffn": "#9fc5e8",  # position-wise feed-forward (blue)
    "norm": "#ffe599",  # add & norm (yellow)
    "output": "#b6d7a8",  # linear + softmax (green)
    "layer_bg": "#f3f3f3",  # the frame around one layer
    "q": "#ea9999",
    "k": "#93c47d",
    "v": "#6fa8dc",
    "input": "#d9d9d9",
}
HEAD_COLORS = ["#fde3c8", "#f9c08a", "#f39c4f", "#d9771e"]  # heads: tones of the attention orange
INK = "#262626"
FONT = 13
SMALL = 11
# The widest figures (qkv, multi_head: about 14.5 in) are shown 940 px wide in JupyterLab, 0.9 px per
# point: their text needs 14 pt to be 12 px or more, and mathtext 20 pt (its scripts are 0.7 of it).
WIDE = 14
WIDE_MATH = 20
GREY = "#555555"  # captions: 7.5:1 on white

FIGURES = ("encoder_decoder", "encoder_layer", "decoder_layer", "qkv", "multi_head")


# --- drawing helpers (data units are inches: font sizes mean what they say) --------


def canvas(width: float, height: float):
    fig = plt.figure(figsize=(width, height))
    ax = fig.add_axes((0, 0, 1, 1))
    ax.set_xlim(0, width)
    ax.set_ylim(0, height)
    ax.set_aspect("equal")
    ax.axis("off")
    return fig, ax


def box(ax, cx, cy, w, h, text="", color="white", fontsize=FONT, lw=1.3, ec=INK, weight="normal", z=2, rounding=0.08):
    ax.add_patch(
        FancyBboxPatch(
            (cx - w / 2, cy - h / 2),
            w,
            h,
            boxstyle=f"round,pad=0,rounding_size={rounding}",
            fc=color,
            ec=ec,
            lw=lw,
            zorder=z,
        )
    )
    if text:
        ax.text(cx, cy, text, ha="center", va="center", fontsize=fontsize, color=INK, weight=weight, zorder=z + 1)
    return {"top": (cx, cy + h / 2), "bottom": (cx, cy - h / 2), "left": (cx - w / 2, cy), "right": (cx + w / 2, cy)}


def arrow(ax, start, end, color=INK, lw=1.5, style="-|>", z=1, **kw):
    ax.add_patch(
        FancyArrowPatch(
            start, end, arrowstyle=style, mutation_scale=14, lw=lw, color=color, shrinkA=0, shrinkB=0, zorder=z, **kw
        )
    )


def path_arrow(ax, points, color=INK, lw=1.5, z=1):
    """A polyline through ``points`` with an arrowhead on the last segment."""
    xs, ys = zip(*points[:-1])
    ax.plot(xs, ys, color=color, lw=lw, zorder=z, solid_capstyle="butt", solid_joinstyle="miter")
    arrow(ax, points[-2], points[-1], color=color, lw=lw, z=z)


def add_circle(ax, cx, cy, symbol="+", r=0.2, color="white"):
    ax.add_patch(Circle((cx, cy), r, fc=color, ec=INK, lw=1.3, zorder=3))
    ax.text(cx, cy, symbol, ha="center", va="center", fontsize=FONT + 2, zorder=4)


def pe_symbol(ax, cx, cy, r=0.26):
    """A circle with a sine wave: the positional encoding."""
    ax.add_patch(Circle((cx, cy), r, fc="white", ec=INK, lw=1.3, zorder=3))
    t = np.linspace(-0.75, 0.75, 60)
    ax.plot(cx + t * r, cy + 0.45 * r * np.sin(t * 2 * np.pi / 0.75), color=INK, lw=1.3, zorder=4)


def grid(ax, x0, y0, rows, cols, cell, color, values=None, lw=0.8, z=2):
    """A small matrix of cells, lower-left corner at (x0, y0); ``values`` shade the cells (0..1)."""
    for r in range(rows):
        for c in range(cols):
            alpha = 1.0 if values is None else 0.12 + 0.88 * values[r][c]
            ax.add_patch(
                Rectangle(
                    (x0 + c * cell, y0 + (rows - 1 - r) * cell),
                    cell,
                    cell,
                    fc=color,
                    ec=INK,
                    lw=lw,
                    alpha=1.0,
                    zorder=z,
                )
            )
            if values is not None:  # shade with white on top so the grid lines stay crisp
                ax.add_patch(
                    Rectangle(
                        (x0 + c * cell, y0 + (rows - 1 - r) * cell),
                        cell,
                        cell,
                        fc="white",
                        ec=INK,
                        lw=lw,
                        alpha=1 - alpha,
                        zorder=z + 0.1,
                    )
                )
    return {
        "left": (x0, y0 + rows * cell / 2),
        "right": (x0 + cols * cell, y0 + rows * cell / 2),
        "top": (x0 + cols * cell / 2, y0 + rows * cell),
        "bottom": (x0 + cols * cell / 2, y0),
    }


def legend(ax, x, y, entries, fontsize=SMALL):
    for i, (label, color) in enumerate(entries):
        yy = y - i * 0.38
        ax.add_patch(
            FancyBboxPatch(
                (x, yy - 0.12), 0.36, 0.24, boxstyle="round,pad=0,rounding_size=0.04", fc=color, ec=INK, lw=1.0
            )
        )
        ax.text(x + 0.5, yy, label, va="center", fontsize=fontsize, color=INK)


PNG_DPI = 100  # 1 inch of drawing = 100 pixels: the widest figure is 1460 px, sharp at a notebook's width


def save(fig, out_dir: Path, name: str) -> Path:
    path = out_dir / f"{name}.svg"
    # No date and a fixed Creator: regenerating gives the same bytes.
    fig.savefig(path, format="svg", metadata={"Date": None, "Creator": "transformer_lessons images/make_figures.py"})
    # No "Software" entry (it holds matplotlib's version); an opaque white background.
    fig.savefig(out_dir / f"{name}.png", format="png", dpi=PNG_DPI, metadata={"Software": None}, facecolor="white")
    plt.close(fig)
    return path


# --- one layer: sublayers with residual connections --------------------------------


def sublayer_stack(ax, cx, y0, sublayers, width=3.4, h=0.62, norm_h=0.42, gap=0.72, residual_x=None):
    """Draw sublayers bottom-up, each followed by Add & Norm with its residual path.

    ``sublayers`` is a list of ``(text, color, qkv)``; ``qkv`` is ``None`` (a
    single input) or labels for three input arrows. Returns the y of the top
    of the last Add & Norm box and a dict of the boxes.
    """
    residual_x = residual_x if residual_x is not None else cx - width / 2 - 0.45
    y = y0
    boxes = []
    for text, color, qkv in sublayers:
        start = y + 0.15  # where the residual branch leaves the main path
        block_y = y + gap + h / 2
        b = box(ax, cx, block_y, width, h, text, color)
        ax.plot([cx, cx], [y, start], color=INK, lw=1.5)
        if qkv:
            used = [dx for dx, label in zip((-0.9, 0.0, 0.9), qkv) if label is not None]
            # With all three inputs from below, fan out; with Q alone (cross-attention),
            # tap it from the residual line so it cannot be mistaken for K or V.
            fan = start + 0.1 if 0.0 in used else start
            ax.plot([cx, cx], [start, fan], color=INK, lw=1.5)
            ax.plot([min(used) + cx, max(used) + cx], [fan, fan], color=INK, lw=1.5)
            for dx, label in zip((-0.9, 0.0, 0.9), qkv):
                if label is None:
                    continue
                arrow(ax, (cx + dx, fan), (cx + dx, block_y - h / 2))
                ax.text(cx + dx + 0.08, fan + 0.08, label, fontsize=SMALL, ha="left", va="bottom", color=INK)
                if fan == start and dx:
                    ax.plot([cx + dx], [fan], "o", color=INK, markersize=4, zorder=4)
        else:
            arrow(ax, (cx, start), (cx, block_y - h / 2))
        norm_y = block_y + h / 2 + 0.32 + norm_h / 2
        n = box(ax, cx, norm_y, width, norm_h, "Add & Norm", COLORS["norm"], fontsize=SMALL + 1)
        arrow(ax, (cx, block_y + h / 2), (cx, norm_y - norm_h / 2))
        # Residual: around the sublayer, into the Add & Norm box.
        ax.plot([cx, residual_x, residual_x], [start, start, norm_y], color=INK, lw=1.5)
        arrow(ax, (residual_x, norm_y), n["left"])
        ax.plot([cx], [start], "o", color=INK, markersize=4, zorder=4)
        boxes.append((b, n))
        y = norm_y + norm_h / 2
    return y, boxes


def draw_encoder_layer(out_dir):
    fig, ax = canvas(7.4, 7.0)
    cx = 3.6
    ax.text(cx, 0.25, "x: one vector per source token (S × d_model)", ha="center", fontsize=SMALL, color=INK)
    arrow(ax, (cx, 0.5), (cx, 1.15))
    top, _ = sublayer_stack(
        ax,
        cx,
        1.15,
        [("Multi-head self-attention", COLORS["self_attn"], ("Q", "K", "V")), ("Feed-forward", COLORS["ffn"], None)],
    )
    frame_top = top + 0.55
    ax.add_patch(
        FancyBboxPatch(
            (1.3, 0.95),
            4.6,
            frame_top - 0.95,
            boxstyle="round,pad=0,rounding_size=0.15",
            fc=COLORS["layer_bg"],
            ec="#9e9e9e",
            lw=1.2,
            zorder=0,
        )
    )
    arrow(ax, (cx, top), (cx, frame_top + 0.35))
    ax.text(
        cx, frame_top + 0.45, "to the next layer (S × d_model)", ha="center", va="bottom", fontsize=SMALL, color=INK
    )
    ax.text(6.1, (0.95 + frame_top) / 2, "× N", fontsize=FONT + 3, va="center", color=INK, weight="bold")
    ax.text(1.45, frame_top - 0.27, "Encoder layer", fontsize=FONT, color=INK, weight="bold", va="center")
    ax.text(
        6.05,
        2.05,
        "Q, K and V are\nall x: every\ntoken looks at\nevery token",
        fontsize=SMALL - 1,
        va="center",
        color="#555555",
    )
    return save(fig, out_dir, "encoder_layer")


def draw_decoder_layer(out_dir):
    fig, ax = canvas(8.2, 9.2)
    cx = 3.6
    ax.text(cx, 0.25, "y: one vector per target token so far (T × d_model)", ha="center", fontsize=SMALL, color=INK)
    arrow(ax, (cx, 0.5), (cx, 1.15))
    top, boxes = sublayer_stack(
        ax,
        cx,
        1.15,
        [
            ("Masked multi-head\nself-attention", COLORS["masked_attn"], ("Q", "K", "V")),
            ("Multi-head\ncross-attention", COLORS["cross_attn"], ("Q", None, None)),
            ("Feed-forward", COLORS["ffn"], None),
        ],
        h=0.72,
    )
    frame_top = top + 0.55
    ax.add_patch(
        FancyBboxPatch(
            (1.3, 0.95),
            4.6,
            frame_top - 0.95,
            boxstyle="round,pad=0,rounding_size=0.15",
            fc=COLORS["layer_bg"],
            ec="#9e9e9e",
            lw=1.2,
            zorder=0,
        )
    )
    arrow(ax, (cx, top), (cx, frame_top + 0.35))
    ax.text(
        cx, frame_top + 0.45, "to the next layer (T × d_model)", ha="center", va="bottom", fontsize=SMALL, color=INK
    )
    # Keys and values of the cross-attention come from the encoder.
    cross_box = boxes[1][0]
    y_box = cross_box["bottom"][1]
    y_mem = y_box - 0.3
    mem = box(ax, 7.15, y_mem, 1.7, 0.62, "encoder\noutput", "white", fontsize=SMALL)
    ax.plot([mem["left"][0], cx], [y_mem, y_mem], color=INK, lw=1.5)
    for dx, label in ((0.0, "K"), (0.9, "V")):
        arrow(ax, (cx + dx, y_mem), (cx + dx, y_box))
        ax.text(cx + dx + 0.08, y_mem + 0.05, label, fontsize=SMALL, ha="left", va="bottom")
    ax.plot([cx + 0.9], [y_mem], "o", color=INK, markersize=4, zorder=4)
    ax.text(6.1, (0.95 + frame_top) / 2 + 1.2, "× N", fontsize=FONT + 3, va="center", color=INK, weight="bold")
    ax.text(1.45, frame_top - 0.27, "Decoder layer", fontsize=FONT, color=INK, weight="bold", va="center")
    ax.text(6.05, 1.8, "causal mask: token t\nsees tokens 0..t only", fontsize=SMALL - 1, va="center", color="#555555")
    return save(fig, out_dir, "decoder_layer")


# --- the whole encoder-decoder --------------------------------------------------------


def mini_layer(ax, cx, y0, width, parts, title):
    """A compact layer: coloured strips bottom-up, framed. Returns the frame's top y and strip centres.

    Each sublayer strip is followed by an Add & Norm strip; a residual path on the right
    carries the sublayer's input around it into that Add & Norm (the paper's Figure 1).
    """
    pad, gap, skip_room = 0.14, 0.16, 0.38  # skip_room: space on the right for the residual paths
    heights = {"norm": 0.24}
    strip_w = width - 2 * pad - skip_room
    strip_cx = cx - width / 2 + pad + strip_w / 2
    skip_x = strip_cx + strip_w / 2 + skip_room / 2
    y = y0 + gap
    centres = {}
    top_of_parts = y
    branch_y = None  # where the residual path of the current sublayer leaves the main path
    for key, text in parts:
        h = heights.get(key, 0.44)
        color = COLORS["norm"] if key == "norm" else COLORS[key]
        b = box(
            ax,
            strip_cx,
            y + h / 2,
            strip_w,
            h,
            text,
            color,
            fontsize=SMALL,
            lw=1.0,
            rounding=0.05,
        )
        ax.plot([cx, cx], [y - gap, y], color=INK, lw=1.2, zorder=1.5)  # the main path, through the gap below
        if key == "norm":  # the residual path: around the sublayer, added in this Add & Norm
            ax.plot([cx, skip_x, skip_x], [branch_y, branch_y, y + h / 2], color=INK, lw=1.2, zorder=1.5)
            arrow(ax, (skip_x, y + h / 2), b["right"], lw=1.2, z=1.5)
            ax.plot([cx], [branch_y], "o", color=INK, markersize=3.5, zorder=4)
        else:
            branch_y = y - gap / 2
        centres.setdefault(key, []).append(y + h / 2)
        y += h + gap
        top_of_parts = y
    top = top_of_parts - gap + pad + 0.3
    ax.plot([cx, cx], [top_of_parts - gap, top], color=INK, lw=1.2, zorder=1.5)  # on to the frame's top
    ax.add_patch(
        FancyBboxPatch(
            (cx - width / 2, y0),
            width,
            top - y0,
            boxstyle="round,pad=0,rounding_size=0.1",
            fc=COLORS["layer_bg"],
            ec="#9e9e9e",
            lw=1.1,
            zorder=1,
        )
    )
    ax.text(cx - width / 2 + 0.12, top - 0.17, title, fontsize=SMALL, va="center", ha="left", color="#444444")
    return top, centres


def draw_encoder_decoder(out_dir):
    fig, ax = canvas(11.6, 13.1)
    ex, dx = 2.9, 8.3  # centres of the encoder and decoder columns
    width = 3.5
    enc_parts = [
        ("self_attn", "Self-attention"),
        ("norm", "Add & Norm"),
        ("ffn", "Feed-forward"),
        ("norm", "Add & Norm"),
    ]
    dec_parts = [
        ("masked_attn", "Masked self-attention"),
        ("norm", "Add & Norm"),
        ("cross_attn", "Cross-attention"),
        ("norm", "Add & Norm"),
        ("ffn", "Feed-forward"),
        ("norm", "Add & Norm"),
    ]

    for cx, label, tokens in (
        (ex, "source tokens", "ein Hund rennt"),
        (dx, "target tokens, shifted right", "<bos> a dog runs"),
    ):
        ax.text(cx, 0.3, f"{label}\n“{tokens}”", ha="center", va="center", fontsize=SMALL, color=INK)
        arrow(ax, (cx, 0.62), (cx, 1.0))
        box(ax, cx, 1.3, width * 0.8, 0.6, "Embedding × √d_model", COLORS["embed"])
        arrow(ax, (cx, 1.6), (cx, 1.98))
        add_circle(ax, cx, 2.18)
        pe_symbol(ax, cx - 1.25, 2.18)
        arrow(ax, (cx - 0.99, 2.18), (cx - 0.2, 2.18))
        ax.text(cx - 1.6, 2.18, "positional\nencoding", ha="right", va="center", fontsize=SMALL, color=INK)
        arrow(ax, (cx, 2.38), (cx, 2.75))

    # Encoder: layer 1, dots, layer N.
    top1, _ = mini_layer(ax, ex, 2.75, width, enc_parts, "encoder layer 1")
    ax.text(ex, top1 + 0.45, "⋮", ha="center", va="center", fontsize=FONT + 6, color=INK)
    arrow(ax, (ex, top1), (ex, top1 + 0.22))
    arrow(ax, (ex, top1 + 0.7), (ex, top1 + 0.95))
    topN, _ = mini_layer(ax, ex, top1 + 0.95, width, enc_parts, "encoder layer N")
    mem_y = topN + 0.55
    box(ax, ex, mem_y, width * 0.8, 0.5, "encoder output (memory)", "white", fontsize=SMALL)
    arrow(ax, (ex, topN), (ex, mem_y - 0.25))
    ax.text(
        ex - width / 2 - 0.25,
        (2.75 + topN) / 2,
        "N× encoder layers",
        rotation=90,
        ha="center",
        va="center",
        fontsize=FONT,
        color=INK,
    )

    # Decoder: layer 1, dots, layer N.
    dtop1, c1 = mini_layer(ax, dx, 2.75, width, dec_parts, "decoder layer 1")
    ax.text(dx, dtop1 + 0.45, "⋮", ha="center", va="center", fontsize=FONT + 6, color=INK)
    arrow(ax, (dx, dtop1), (dx, dtop1 + 0.22))
    arrow(ax, (dx, dtop1 + 0.7), (dx, dtop1 + 0.95))
    dtopN, cN = mini_layer(ax, dx, dtop1 + 0.95, width, dec_parts, "decoder layer N")
    ax.text(
        dx + width / 2 + 0.25,
        (2.75 + dtopN) / 2,
        "N× decoder layers",
        rotation=90,
        ha="center",
        va="center",
        fontsize=FONT,
        color=INK,
    )

    # The memory feeds the cross-attention of EVERY decoder layer (keys and values).
    bus_x = (ex + dx) / 2
    strip_left = dx - width / 2 + 0.14
    ax.plot(
        [ex + width * 0.4, bus_x, bus_x],
        [mem_y, mem_y, c1["cross_attn"][0]],
        color="#a64d79",
        lw=2.0,
        zorder=1.5,
        solid_joinstyle="miter",
    )
    for y in (c1["cross_attn"][0], cN["cross_attn"][0]):
        arrow(ax, (bus_x, y), (strip_left, y), color="#a64d79", lw=2.0, z=3)
        ax.plot([bus_x], [y], "o", color="#a64d79", markersize=5, zorder=4)
    ax.text(
        (ex + width * 0.4 + bus_x) / 2 + 0.1,
        mem_y + 0.2,
        "keys and values\nfor every decoder layer",
        ha="center",
        va="bottom",
        fontsize=SMALL,
        color="#741b47",
    )

    # Output: linear + softmax.
    lin_y = dtopN + 0.55
    arrow(ax, (dx, dtopN), (dx, lin_y - 0.25))
    box(ax, dx, lin_y, width * 0.8, 0.5, "Linear (d_model → vocab)", COLORS["output"])
    arrow(ax, (dx, lin_y + 0.25), (dx, lin_y + 0.55))
    box(ax, dx, lin_y + 0.8, width * 0.8, 0.5, "Softmax", COLORS["output"])
    arrow(ax, (dx, lin_y + 1.05), (dx, lin_y + 1.35))
    ax.text(
        dx,
        lin_y + 1.55,
        "next-token probabilities\n“a dog runs <eos>”",
        ha="center",
        va="center",
        fontsize=SMALL,
        color=INK,
    )

    legend(
        ax,
        0.35,
        12.6,
        [
            ("embedding", COLORS["embed"]),
            ("encoder self-attention", COLORS["self_attn"]),
            ("masked self-attention", COLORS["masked_attn"]),
            ("cross-attention", COLORS["cross_attn"]),
            ("feed-forward", COLORS["ffn"]),
            ("add & norm (adds the residual)", COLORS["norm"]),
            ("output projection", COLORS["output"]),
        ],
    )
    return save(fig, out_dir, "encoder_decoder")


# --- attention itself --------------------------------------------------------------------


def draw_qkv(out_dir):
    fig, ax = canvas(14.6, 6.6)
    cell = 0.32
    tokens = ["the", "cat", "sat"]
    # X: T tokens x d_model.
    x0, y0 = 0.95, 2.75
    g = grid(ax, x0, y0, 3, 5, cell, COLORS["input"])
    for i, t in enumerate(tokens):
        ax.text(x0 - 0.1, y0 + (2 - i) * cell + cell / 2, t, ha="right", va="center", fontsize=WIDE)
    ax.text(x0 + 2.5 * cell, y0 - 0.3, "X\n(T × d_model)", ha="center", va="top", fontsize=WIDE)
    ax.text(
        1.55,
        1.25,
        "S = T here:\none key, one value\nper token of X",
        ha="center",
        va="center",
        fontsize=WIDE,
        color=GREY,
    )

    rows = {"Q": 5.2, "K": 3.23, "V": 1.25}
    colors = {"Q": COLORS["q"], "K": COLORS["k"], "V": COLORS["v"]}
    mats = {}
    for name, y in rows.items():
        b = box(ax, 3.8, y, 1.3, 0.66, f"× $W^{name}$", "white", fontsize=WIDE_MATH)
        path_arrow(ax, [g["right"], (2.85, g["right"][1]), (2.85, y), b["left"]])
        mats[name] = grid(ax, 5.0, y - 1.5 * cell, 3, 3, cell, colors[name])
        arrow(ax, b["right"], mats[name]["left"])
        ax.text(
            5.0 + 1.5 * cell,
            y - 1.5 * cell - 0.08,
            {"Q": "Q (T × d_k)", "K": "K (S × d_k)", "V": "V (S × d_v)"}[name],
            ha="center",
            va="top",
            fontsize=WIDE,
        )
    ax.text(
        3.8,
        6.15,
        "three learned projections\n(the same X, three matrices)",
        ha="center",
        va="center",
        fontsize=WIDE,
        color=GREY,
    )

    # Scores: Q Kᵀ / √d_k.
    sc = box(ax, 7.8, 4.2, 2.1, 0.9, "$Q K^{\\top} / \\sqrt{d_k}$", "white", fontsize=WIDE_MATH + 2)
    path_arrow(ax, [mats["Q"]["right"], (6.4, mats["Q"]["right"][1]), (6.4, 4.4), (sc["left"][0], 4.4)])
    path_arrow(ax, [mats["K"]["right"], (6.4, mats["K"]["right"][1]), (6.4, 4.0), (sc["left"][0], 4.0)])
    scores = [[0.9, 0.3, 0.55], [0.2, 1.0, 0.65], [0.45, 0.8, 0.6]]
    sg = grid(ax, 9.15, 4.2 - 1.5 * cell, 3, 3, cell, "#b4a7d6", values=scores)
    arrow(ax, sc["right"], sg["left"])
    ax.text(9.15 + 1.5 * cell, 4.2 - 1.5 * cell - 0.08, "scores\n(T × S)", ha="center", va="top", fontsize=WIDE)
    sm = box(ax, 11.3, 4.2, 1.75, 0.9, "softmax\nover each row", COLORS["self_attn"], fontsize=WIDE)
    arrow(ax, sg["right"], sm["left"])
    weights = [[0.62, 0.1, 0.28], [0.05, 0.8, 0.15], [0.2, 0.55, 0.25]]
    wg = grid(ax, 12.55, 4.2 - 1.5 * cell, 3, 3, cell, COLORS["self_attn"], values=weights)
    arrow(ax, sm["right"], wg["left"])
    ax.text(
        12.55 + 1.5 * cell, 4.2 + 1.5 * cell + 0.1, "weights A\nrows sum to 1", ha="center", va="bottom", fontsize=WIDE
    )

    # Weighted sum of the values.
    ws = box(ax, 11.3, 1.25, 1.75, 0.9, "$A\\,V$\nweighted sum", "white", fontsize=WIDE)
    path_arrow(ax, [wg["bottom"], (wg["bottom"][0], 1.95), (11.3, 1.95), ws["top"]])
    arrow(ax, mats["V"]["right"], ws["left"])
    out = grid(ax, 12.55, 1.25 - 1.5 * cell, 3, 3, cell, "#cfe2f3")
    arrow(ax, ws["right"], out["left"])
    ax.text(12.55 + 1.5 * cell, 1.25 - 1.5 * cell - 0.08, "output\n(T × d_v)", ha="center", va="top", fontsize=WIDE)
    ax.text(
        8.3,
        0.5,
        "each output row mixes the value rows,\nweighted by how well its query\nmatched each key",
        ha="center",
        va="center",
        fontsize=WIDE,
        color=GREY,
    )
    return save(fig, out_dir, "qkv")


def draw_multi_head(out_dir):
    fig, ax = canvas(14.3, 8.6)
    n_heads = 4
    bar_h = 0.52
    rows = {"Q": 2.8, "K": 2.08, "V": 1.36}  # one row per projection, Q on top
    col_w, gap, x0 = 1.75, 0.3, 3.9  # head h's slices sit in column h, under head h
    col_left = [x0 + h * (col_w + gap) for h in range(n_heads)]
    head_xs = [left + col_w / 2 for left in col_left]
    mid = (col_left[0] + col_left[-1] + col_w) / 2

    # X -> three projections.
    ax.text(0.8, rows["K"], "X", ha="center", va="center", fontsize=WIDE_MATH)
    ax.text(0.8, rows["K"] - 0.4, "(T × d_model)", ha="center", va="center", fontsize=WIDE)
    spine = 1.65
    ax.plot([1.0, spine], [rows["K"]] * 2, color=INK, lw=1.5, zorder=1)
    ax.plot([spine, spine], [rows["V"], rows["Q"]], color=INK, lw=1.5, zorder=1)
    for name, y in rows.items():
        b = box(ax, 2.8, y, 1.5, 0.56, f"× $W^{name}$", "white", fontsize=WIDE_MATH)
        arrow(ax, (spine, y), b["left"])
        arrow(ax, b["right"], (x0, y))
        # One projection is one row, Q = [Q_1 | Q_2 | Q_3 | Q_4]: a line joins its slices across the columns.
        ax.plot([x0, col_left[-1] + col_w], [y, y], color=INK, lw=1.2, zorder=1)
        ax.text(col_left[-1] + col_w + 0.25, y, f"$XW^{name}$", ha="left", va="center", fontsize=WIDE_MATH)
        for h, left in enumerate(col_left):  # the projection, cut into h slices of d_k columns
            ax.add_patch(Rectangle((left, y - bar_h / 2), col_w, bar_h, fc=HEAD_COLORS[h], ec=INK, lw=1.0, zorder=2))
            ax.text(left + col_w / 2, y, f"$XW^{name}_{h + 1}$", ha="center", va="center", fontsize=WIDE_MATH, zorder=3)
    ax.text(col_left[-1] + col_w + 0.25, rows["V"] - 0.55, "(each T × d_model)", ha="left", va="center", fontsize=WIDE)
    ax.text(
        mid,
        0.5,
        "split: each projection is cut into h = 4 slices of d_k = d_model / h columns;\n"
        "slice i is head i's query, key or value (notebook 02's loop shows why)",
        ha="center",
        va="center",
        fontsize=WIDE,
        color=GREY,
    )

    # Each head takes its own column of slices.
    head_y, frame_pad = 4.2, 0.1
    frame_top = rows["Q"] + bar_h / 2 + frame_pad
    for h, (left, hx) in enumerate(zip(col_left, head_xs)):
        ax.add_patch(
            FancyBboxPatch(
                (left - frame_pad, rows["V"] - bar_h / 2 - frame_pad),
                col_w + 2 * frame_pad,
                rows["Q"] - rows["V"] + bar_h + 2 * frame_pad,
                boxstyle="round,pad=0,rounding_size=0.08",
                fc="none",
                ec="#888888",
                lw=1.0,
                ls="--",
                zorder=1,
            )
        )
        arrow(ax, (hx, frame_top), (hx, head_y - 0.45))
        box(
            ax,
            hx,
            head_y,
            col_w + 0.15,
            0.9,
            f"head {h + 1}\nattention on\ncolumn {h + 1}",
            HEAD_COLORS[h],
            fontsize=WIDE,
        )
    ax.text(
        0.15,
        head_y + 0.1,
        "the heads attend\nin parallel, each in\nits own d_k-dimensional\nsubspace",
        ha="left",
        va="center",
        fontsize=WIDE,
        color=GREY,
    )

    # Concat.
    chunk_w = 0.55
    concat_y = 5.5
    x_left = mid - n_heads * chunk_w / 2
    for h, hx in enumerate(head_xs):
        cx = x_left + (h + 0.5) * chunk_w
        path_arrow(
            ax, [(hx, head_y + 0.45), (hx, head_y + 0.8), (cx, concat_y - 0.3), (cx, concat_y)], color=INK, lw=1.2
        )
        ax.add_patch(
            Rectangle((x_left + h * chunk_w, concat_y), chunk_w, bar_h, fc=HEAD_COLORS[h], ec=INK, lw=1.0, zorder=2)
        )
        ax.text(cx, concat_y + bar_h / 2, str(h + 1), ha="center", va="center", fontsize=WIDE, zorder=3)
    ax.text(
        x_left + n_heads * chunk_w + 0.2,
        concat_y + bar_h / 2,
        "concat: T × (h · d_k) = T × d_model",
        ha="left",
        va="center",
        fontsize=WIDE,
    )
    arrow(ax, (mid, concat_y + bar_h), (mid, 6.4))
    b = box(ax, mid, 6.75, 2.3, 0.7, "Linear $W^O$", "white", fontsize=WIDE_MATH)
    ax.text(mid + 1.35, 6.75, "mixes the heads back together", ha="left", va="center", fontsize=WIDE, color=GREY)
    arrow(ax, b["top"], (mid, 7.5))
    ax.add_patch(Rectangle((x_left, 7.5), n_heads * chunk_w, bar_h, fc=COLORS["self_attn"], ec=INK, lw=1.0))
    ax.text(mid, 8.3, "MultiHead(X, X, X)  (T × d_model): self-attention", ha="center", va="center", fontsize=WIDE)
    return save(fig, out_dir, "multi_head")


DRAWERS = {
    "encoder_decoder": draw_encoder_decoder,
    "encoder_layer": draw_encoder_layer,
    "decoder_layer": draw_decoder_layer,
    "qkv": draw_qkv,
    "multi_head": draw_multi_head,
}


def main(argv: list[str] | None = None) -> list[Path]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "out_dir", nargs="?", default=str(Path(__file__).resolve().parent), help="where to write (default: images/)"
    )
    args = parser.parse_args(argv)
    out_dir = Path(args.out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    with plt.rc_context({"svg.hashsalt": "transformer-lessons", "font.family": "DejaVu Sans", "svg.fonttype": "path"}):
        return [DRAWERS[name](out_dir) for name in FIGURES]


if __name__ == "__main__":
    for written in main(sys.argv[1:]):
        print(written)
