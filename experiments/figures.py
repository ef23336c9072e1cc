"""One way to save a study's figure: the command that made it is drawn on it and kept in it.

A figure outlives the script that drew it (issue 66: a committed PNG named a module that no
longer existed; another's command ran off its edge). `save` draws the command above the figure,
wrapped to the figure's width, and writes the same string into the PNG's text chunk `Command`,
so `tests/test_layout.py` can check that every committed figure names a command that still
runs. Where the command is already drawn in full (a suptitle), it is not drawn twice.
"""

from __future__ import annotations

import textwrap
from pathlib import Path

import matplotlib

matplotlib.use("Agg")  # study figures are files: no display, whatever the machine has
import matplotlib.pyplot as plt  # noqa: E402
from PIL import Image  # noqa: E402

COMMAND = "Command"  # the PNG text chunk holding the command that made the figure


def subplots(*args, **kwargs):
    """matplotlib's `plt.subplots`, drawn off-screen: the one way a study starts its figure."""
    return plt.subplots(*args, **kwargs)


def save(fig, png: Path | str, command: str, *, dpi: int = 110) -> Path:
    """Save `fig` to `png` with `command` drawn under it and kept in its `Command` chunk."""
    if not command.strip():
        raise ValueError(f"{png}: a study figure needs the command that made it")
    drawn = [t.get_text() for t in fig.texts]
    if fig._suptitle is not None:  # noqa: SLF001 (matplotlib keeps the suptitle apart)
        drawn.append(fig._suptitle.get_text())  # noqa: SLF001
    if command not in drawn:
        # a 6 pt monospace character is about 3.6 pt wide
        width = max(40, int(fig.get_figwidth() * 72 / 3.6))
        fig.text(  # above everything drawn; the tight box below takes it in
            0.5,
            1.005,
            "\n".join(textwrap.wrap(command, width, break_on_hyphens=False)),
            ha="center",
            va="bottom",
            fontsize=6,
            color="0.35",
            family="monospace",
        )
    png = Path(png)
    png.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(png, dpi=dpi, metadata={COMMAND: command}, bbox_inches="tight", pad_inches=0.1)
    plt.close(fig)
    return png


def command_of(png: Path | str) -> str | None:
    """The command a saved figure names (None for a figure saved without one)."""
    with Image.open(png) as im:
        return im.text.get(COMMAND) if hasattr(im, "text") else None
