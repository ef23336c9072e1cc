"""FedRL's two parties (Grid-World maps or Text2Action): alpha (partition 0, with rewards) and
beta (partition 1, without), whatever the federation's size."""

from __future__ import annotations

from pathlib import Path

from config.schema import ConfigError

FLAGS: tuple[str, ...] = ()
FRACTION_KEY = "fraction-train"
PARTIES = 2  # alpha and beta (Zhuo et al. 2019, Section 3)


def parties(c, asked: int | None) -> int:
    if asked not in (None, PARTIES):
        raise ConfigError(f"--num-clients {asked}: FedRL has exactly two parties (alpha and beta)")
    return PARTIES


def check_data(c) -> None:
    """Nothing to check here: the map and Text2Action files are read (and named in any error)
    by server/fedrl_run.check_config before anything starts."""


def check_policy(c, policy) -> None:
    """The parties' policy keys (fedrl.*) are each party's to enforce at each message,
    naming the key (server/fedrl_run.py stops the run naming the party)."""


def fit(grid, c):
    return c


def partitions(c) -> int:
    return PARTIES


def after_run(out: Path) -> Path | None:
    return None
