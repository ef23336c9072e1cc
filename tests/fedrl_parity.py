"""One FedRL run config through the Flower app (in-process grid) and through the one-process
runner, compared round by round: the two transports of one protocol must compute the same."""

import pandas as pd
import pytest

from clients.app import app
from config import parse
from server import fedrl_run as fedrl_server
from tests.conftest import RESEARCH, InProcessGrid
from training.fedrl_protocol import DirectTransport, Selection
from training.fedrl_setup import Settings


def assert_flower_equals_local(cfg: dict, out, rounds: int = 4, every: int = 2):
    """Runs `cfg` both ways (results in `out`), in the study mode that repeats to the digit
    (fedrl.reproducible-noise, under the research policy that allows it); returns (Flower's
    rounds.csv, its grid)."""
    cfg = {**cfg, "fedrl.reproducible-noise": True}
    grid = InProcessGrid(app, cfg, 2, node_config_extra=RESEARCH)
    fedrl_server.run(grid, parse(cfg), "fedrl")
    flower = pd.read_csv(out / "rounds.csv")
    s = Settings.of(parse(cfg))
    local = DirectTransport(s)
    select = Selection(s.select_key())
    for rnd in range(1, rounds + 1):
        row = local.round(rnd % every == 0)
        if rnd % every == 0:
            row.update(select(local, rnd, rnd == rounds, True))
            row.update(local.proto.privacy())  # as the ServerApp does after evaluating
        got = flower[flower["round"] == rnd].iloc[0]
        for k, v in row.items():
            assert got[k] == pytest.approx(v, rel=1e-6, nan_ok=True), k
    return flower, grid


def flower_rounds_here(out: str, rounds: int = 6) -> None:
    """Runs tests/test_fedrl.SMALL through the FedRL ClientApp on the in-process grid in this
    process (study mode), writing `out`/rounds.csv: for a fresh process whose environment a
    test chooses (tests/test_fedrl.py, the kernels a party computes with)."""
    import torch

    from config.schema import merged
    from tests.test_fedrl import SMALL

    torch.set_num_threads(1)
    cfg = merged({**SMALL, "out-dir": out, "num-server-rounds": rounds})
    cfg["fedrl.reproducible-noise"] = True
    fedrl_server.run(InProcessGrid(app, cfg, 2, node_config_extra=RESEARCH), parse(cfg), "fedrl")
