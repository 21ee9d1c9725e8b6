"""Pictures of the sinusoidal positional encoding (paper §3.5).

``plot_positional_encoding`` draws the whole table, positions down and
columns across; ``positional_encoding_explorer`` adds number boxes over position
and column ("dimension"), showing one column as a wave over positions and one
position as its vector of numbers.

The axes say *column*, not *i*: in the paper's formula ``i`` is the index of a
sin/cos *pair*, which fills columns ``2i`` (sin) and ``2i+1`` (cos).
"""

from __future__ import annotations

import math

import matplotlib.pyplot as plt
import numpy as np
import seaborn as sns
from matplotlib.axes import Axes
from matplotlib.figure import Figure
from matplotlib.patches import Rectangle

from transformer_lessons.layers import sinusoidal_positional_encoding
from transformer_lessons.viz.common import squeeze_leading, to_numpy
from transformer_lessons.viz.widgets import HIGHLIGHT_COLOR, FigureWidget, number_box, widget_figure

PE_CMAP = "RdBu_r"  # diverging: sin/cos values are signed, 0 is white


def plot_positional_encoding(pe, ax: Axes | None = None, *, title: str | None = None) -> Axes:
    """Heatmap of a positional-encoding table, positions down, columns across.

    Args:
        pe: tensor or array ``(L, D)``, e.g. from
            :func:`~transformer_lessons.layers.sinusoidal_positional_encoding`.
        ax: Axes to draw into; a new figure by default.
        title: optional title.

    Returns:
        The Axes. Colours are centred on 0 (red positive, blue negative). The
        x-axis counts columns (pair ``i`` fills columns ``2i`` and ``2i+1``);
        the positions are labelled every 10, horizontally.
    """
    table = squeeze_leading(to_numpy(pe).astype(float), 2, "pe")
    L, D = table.shape
    if ax is None:
        _, ax = plt.subplots(figsize=(min(12.0, 3.0 + D * 0.09), min(8.0, 2.5 + L * 0.05)), layout="constrained")
    limit = max(1.0, float(np.abs(table).max()))
    step = 10 if L > 20 else 1  # every label at 100 positions would overlap
    sns.heatmap(table, ax=ax, cmap=PE_CMAP, vmin=-limit, vmax=limit, cbar_kws={"label": "value"}, yticklabels=step)
    ax.tick_params(axis="y", labelrotation=0)
    ax.tick_params(axis="x", labelrotation=0)
    ax.set_xlabel("column: 2i (sin) or 2i+1 (cos), where i is the pair")
    ax.set_ylabel("position pos")
    ax.set_title(title or f"positional encoding: {L} positions × {D} columns ({D // 2} sin/cos pairs)")
    return ax


class PositionalEncodingExplorer(FigureWidget):
    """Widget returned by :func:`positional_encoding_explorer`."""

    _kind_name = "positional encoding explorer"

    def __init__(self, max_len: int = 100, d_model: int = 64, base: float = 10000.0):
        self.table = sinusoidal_positional_encoding(max_len, d_model, base).numpy()  # (L, D)
        self.base = base
        style = {"description_width": "80px"}
        controls = {
            "position": number_box(min(10, max_len - 1), 0, max_len - 1, "position", style, continuous_update=True),
            "dimension": number_box(min(4, d_model - 1), 0, d_model - 1, "column", style, continuous_update=True),
        }
        super().__init__(controls)
        self._update()

    @property
    def position(self) -> int:
        return self.controls["position"].value

    @property
    def dimension(self) -> int:
        return self.controls["dimension"].value

    def current_matrix(self) -> np.ndarray:
        """The whole table ``(max_len, d_model)``."""
        return self.table

    def current_row(self) -> np.ndarray:
        """The selected position's encoding vector ``(d_model,)``."""
        return self.table[self.position]

    def current_column(self) -> np.ndarray:
        """The selected dimension over all positions ``(max_len,)``."""
        return self.table[:, self.dimension]

    def wavelength(self) -> float:
        """Wavelength in positions of the selected dimension: 2π · base^(2i/d_model)."""
        two_i = self.dimension - self.dimension % 2
        return 2 * math.pi * self.base ** (two_i / self.table.shape[1])

    def describe(self) -> str:
        return f"positional encoding explorer: position {self.position}, column {self.dimension}"

    def _draw(self) -> Figure:
        L, D = self.table.shape
        p, i = self.position, self.dimension
        fig = widget_figure(12.0, 5.0)
        grid = fig.add_gridspec(2, 2, width_ratios=[1.0, 1.25])
        ax_table = fig.add_subplot(grid[:, 0])
        image = ax_table.imshow(self.table, aspect="auto", cmap=PE_CMAP, vmin=-1, vmax=1, interpolation="nearest")
        fig.colorbar(image, ax=ax_table, shrink=0.8)
        # Outline the selected row and column on the table.
        ax_table.add_patch(Rectangle((-0.5, p - 0.5), D, 1, fill=False, edgecolor="black", linewidth=1.6))
        # The column: solid orange (the colour of its curve) over a black edge, visible on red, white and blue.
        for colour, width in (("black", 3.4), (HIGHLIGHT_COLOR, 2.0)):
            ax_table.add_patch(Rectangle((i - 0.5, -0.5), 1, L, fill=False, edgecolor=colour, linewidth=width))
        ax_table.set_xlabel("column (2i or 2i+1)")
        ax_table.set_ylabel("position pos")
        ax_table.set_title(f"table {L} × {D}")

        ax_col = fig.add_subplot(grid[0, 1])
        ax_col.plot(np.arange(L), self.current_column(), color=HIGHLIGHT_COLOR)
        ax_col.plot([p], [self.table[p, i]], "o", color="black")
        fn = "sin" if i % 2 == 0 else "cos"
        ax_col.set_title(
            f"column {i} = {fn}(pos / {self.base:g}^(2i/{D})) with 2i = {i - i % 2}: "
            f"wavelength {self.wavelength():.1f} positions",
            fontsize=10,
        )
        ax_col.set_xlabel("position pos")
        ax_col.set_ylim(-1.15, 1.15)
        ax_col.grid(alpha=0.3)

        ax_row = fig.add_subplot(grid[1, 1])
        ax_row.bar(np.arange(D), self.current_row(), color="#4a4a4a", width=0.8)
        ax_row.bar([i], [self.table[p, i]], color=HIGHLIGHT_COLOR, width=0.8)
        ax_row.set_title(f"encoding of position {p} (one vector of {D} numbers)", fontsize=10)
        ax_row.set_xlabel("column (2i or 2i+1)")
        ax_row.set_ylim(-1.15, 1.15)
        ax_row.grid(alpha=0.3, axis="y")
        return fig


def positional_encoding_explorer(
    max_len: int = 100, d_model: int = 64, base: float = 10000.0
) -> PositionalEncodingExplorer:
    """Number boxes over position and dimension of the sinusoidal table (paper §3.5).

    Shows the table with the selected position (row, solid black) and dimension
    (column, solid orange) outlined, the selected dimension as an orange curve
    over positions, and the selected position's vector as bars.

    Returns:
        A ``VBox`` with ``.controls`` (``position``, ``dimension``),
        ``.current_row()``, ``.current_column()``, ``.current_matrix()``,
        ``.wavelength()`` and ``.figure``.
    """
    return PositionalEncodingExplorer(max_len, d_model, base)
