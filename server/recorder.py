"""The results contract of every run (docs/running.md, "Results (every run)"):

DIR/config.json    the full run config, plus what the run adds (parameter count, ...)
DIR/rounds.csv     one row per server round: round, stage, wall_s, n_clients, bytes_up,
                   bytes_down (training traffic), eval_bytes_down, then the method's metrics
DIR/clients.csv    one row per client per round: round, stage, node, partition, num_examples,
                   train_loss, fit_s, status (ok | rejected: why | failed: why)
DIR/silos.csv      decentralized methods: per silo per round, its model's RMSE/MAE on its own
                   test split and on the pooled test set
DIR/checkpoints/   the global model (decentralized: the silos' average) after every round

Files are rewritten after every round, so an interrupted run keeps what it finished; with
`resume` a Recorder takes those rows back and the run continues after its last round.
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

import pandas as pd
import torch
from flwr.app import ArrayRecord

from config.schema import ConfigError
from server.curves import Curves

ROUND_COLUMNS = ["round", "stage", "wall_s", "n_clients", "bytes_up", "bytes_down"]
CLIENT_COLUMNS = [
    "round",
    "stage",
    "node",
    "partition",
    "num_examples",
    "train_loss",
    "fit_s",
    "bytes_up",  # the arrays of its reply (each party's own audit log counts the same bytes)
    "status",
]


def out_dir(path: str, name: str) -> Path:
    """Run config `out-dir`, or runs/<method>-<time> under the server's working directory."""
    return Path(path or f"runs/{name}-{time.strftime('%Y%m%d-%H%M%S')}").resolve()


def recorder_for(c, name: str, stage: str = "train") -> Recorder:
    """The run's recorder: results under run config `out-dir` (server/app.py fixes it once),
    config.json from the parsed settings."""
    return Recorder(out_dir(c.run.out_dir, name), c.run_config(), stage=stage)


def finished_rounds(path: Path) -> int:
    """The last round of a results folder's rounds.csv, read defensively: its rounds must be
    the integers 1..k in order (a hand-edited 2.5, -3, "x" or 1e18, or no 'round' column, is
    refused naming the file). Used by `simulation.py --resume` and by the ServerApp's check of
    `resume-round`, so both read a folder the same way."""
    try:
        rounds = pd.read_csv(path, usecols=["round"])["round"]
    except (ValueError, KeyError, OSError, pd.errors.ParserError) as e:
        raise ConfigError(f"{path} is not readable ({e})") from None
    values = rounds.tolist()
    train = values[1:] if values[:1] == [0] else values  # round 0: the untrained model's row
    if not pd.api.types.is_integer_dtype(rounds) or train != list(range(1, len(train) + 1)):
        shown = ", ".join(str(r) for r in values[:6])
        raise ConfigError(f"{path}: column 'round' must be 1, 2, ..., k in order, got {shown}")
    return len(train)


def _missing(v) -> bool:
    """No node on this row (a silo no node holds, a run stopped before any node answered)."""
    return v is None or v is pd.NA or v == "" or (isinstance(v, float) and v != v)


class Recorder:
    def __init__(self, out_dir: str | Path, config: dict, stage: str = "train"):
        self.out = Path(out_dir)
        (self.out / "checkpoints").mkdir(parents=True, exist_ok=True)
        self.config = dict(config)
        self.stage = stage
        self.rounds: list[dict] = []
        self.clients: list[dict] = []
        self.silos: list[dict] = []
        if bool(self.config.get("resume", False)):
            self._take_back()
        self._round = 0
        self._t0 = time.perf_counter()
        self._up = self._down = self._eval_down = 0
        self._n_clients = 0
        self._metrics: dict = {}
        self.curves = Curves(self.out)  # TensorBoard event files beside rounds.csv
        self.write_config()

    def _take_back(self) -> None:
        """The rows of the run being resumed, up to its last complete round."""
        if not (self.out / "rounds.csv").exists():
            return
        self.rounds = pd.read_csv(self.out / "rounds.csv").to_dict("records")
        done = self.last_round()
        for name, rows in (("clients.csv", self.clients), ("silos.csv", self.silos)):
            if (self.out / name).exists():
                table = pd.read_csv(self.out / name, dtype={"node": "UInt64"})
                rows.extend(table[table["round"] <= done].to_dict("records"))

    def last_round(self) -> int:
        """The last round this folder finished (0: none)."""
        return int(max((r["round"] for r in self.rounds), default=0))

    def write_config(self, **extra) -> None:
        self.config.update(extra)
        (self.out / "config.json").write_text(json.dumps(self.config, indent=2, sort_keys=True))

    # ---- called by strategies during a round ------------------------------------------
    def start_round(self, server_round: int) -> None:
        self._round = server_round
        self._t0 = time.perf_counter()
        self._up = self._down = self._eval_down = 0
        self._n_clients = 0
        self._metrics = {}

    def add_metrics(self, metrics: dict) -> None:
        self._metrics.update(metrics)

    def add_bytes(self, up: int = 0, down: int = 0, evaluation: bool = False) -> None:
        """Training traffic goes to bytes_up/bytes_down, evaluation traffic (models sent to
        silos to be scored) to eval_bytes_down, so protocols compare on what training costs."""
        if evaluation:
            self._eval_down += int(down)
        else:
            self._up += int(up)
            self._down += int(down)

    def add_client(self, **row) -> None:
        self._n_clients += 1
        self.clients.append({"round": self._round, "stage": self.stage, **row})

    def add_silo_rows(self, rows: list[dict]) -> None:
        """Per-silo evaluation rows (decentralized methods): written to silos.csv."""
        self.silos.extend({"stage": self.stage, **r} for r in rows)

    def write_clients(self) -> None:
        """clients.csv as recorded so far (also when a run stops mid-round: FedRL's refused
        or failed party is named there, not only in the log)."""
        table = pd.DataFrame(self.clients, columns=CLIENT_COLUMNS)
        # 64-bit node ids stay integers when some row has no node (pandas would make the
        # column float and write 1.2575718379501738e+19, a different id)
        table["node"] = pd.array(
            [None if _missing(r.get("node")) else int(r["node"]) for r in self.clients],
            dtype="UInt64",
        )
        table.to_csv(self.out / "clients.csv", index=False)

    # ---- called by the server at the end of a round -----------------------------------
    def end_round(self, arrays: ArrayRecord | None = None) -> dict:
        """Write the round's row (metrics added by the strategy) and checkpoint the model."""
        row = {
            "round": self._round,
            "stage": self.stage,
            "wall_s": round(time.perf_counter() - self._t0, 4),
            "n_clients": self._n_clients,
            "bytes_up": self._up,
            "bytes_down": self._down,
            "eval_bytes_down": self._eval_down,
            **self._metrics,
        }
        if arrays is not None:  # first, atomically: rounds.csv must never name a round
            path = self.out / "checkpoints" / f"round_{self._round:04d}.pt"  # with no model
            torch.save(arrays.to_torch_state_dict(), path.with_suffix(".tmp"))
            os.replace(path.with_suffix(".tmp"), path)
        self.rounds.append(row)
        pd.DataFrame(self.rounds).to_csv(self.out / "rounds.csv", index=False)
        self.write_clients()
        if self.silos:
            pd.DataFrame(self.silos).to_csv(self.out / "silos.csv", index=False)
        self.curves.round(row, self.clients, self.silos)
        return row


def save_by_parity(recorder: "Recorder", name: str, rnd: int, state: dict) -> None:
    """`state` (tensors and plain data) as of round `rnd`, written atomically to
    checkpoints/<name>_<rnd % 2>.pt: whichever moment the run dies, the round rounds.csv ends
    at is on disk (the other file holds the round before)."""
    path = recorder.out / "checkpoints" / f"{name}_{rnd % 2}.pt"
    torch.save({**state, "round": rnd}, path.with_suffix(".tmp"))
    os.replace(path.with_suffix(".tmp"), path)


def load_by_parity(recorder: "Recorder", name: str, rnd: int) -> dict:
    """What save_by_parity wrote for round `rnd`, or ConfigError saying why it cannot resume."""
    path = recorder.out / "checkpoints" / f"{name}_{rnd % 2}.pt"
    if not path.is_file():
        raise ConfigError(f"cannot resume: {path} is missing")
    saved = _checkpoint(path)
    if not isinstance(saved, dict) or not isinstance(saved.get("round"), int):
        raise ConfigError(f"cannot resume: {path} is not a checkpoint of this run (no 'round')")
    if int(saved["round"]) != rnd:
        raise ConfigError(
            f"cannot resume: {path} holds round {saved['round']}, rounds.csv ends at {rnd}"
        )
    return saved


def load_round(recorder: "Recorder", rnd: int) -> dict:
    """The global model the run checkpointed after round `rnd` (tensors only)."""
    path = recorder.out / "checkpoints" / f"round_{rnd:04d}.pt"
    if not path.is_file():
        raise ConfigError(f"cannot resume: {path} is missing")
    saved = _checkpoint(path)
    if not isinstance(saved, dict) or not saved:
        raise ConfigError(f"cannot resume: {path} is not a model checkpoint (no arrays)")
    for name, t in saved.items():
        if not isinstance(t, torch.Tensor):
            raise ConfigError(f"cannot resume: {path}: {name!r} is not an array")
        if t.is_floating_point() and not bool(torch.isfinite(t).all()):
            raise ConfigError(f"cannot resume: {path}: {name!r} holds NaN or infinite values")
    return saved


def _checkpoint(path: Path):
    """torch.load that cannot run code (weights_only) and names the file when it fails: a
    pickle that would run code, a truncated or foreign file."""
    try:
        return torch.load(path, map_location="cpu", weights_only=True)
    except Exception as e:  # UnpicklingError, RuntimeError (bad zip), EOFError, ...
        first = (str(e).splitlines() or [""])[0][:160]
        raise ConfigError(
            f"cannot resume: {path} is not a checkpoint that loads without running code "
            f"({type(e).__name__}: {first})"
        ) from None


def trailing_empty_rounds(recorder: "Recorder") -> int:
    """The rounds at the end of rounds.csv that left the model as it was: none accepted, or
    held back (FedVLN's fedvln.min-round-houses), as the run counted them for max-empty-rounds."""
    n = 0
    for row in reversed(recorder.rounds):
        held = float(row.get("held_back", 0) or 0) > 0
        if float(row.get("n_accepted", 1) or 0) > 0 and not held:
            break
        n += 1
    return n
