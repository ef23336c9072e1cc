"""The run config: defaults from pyproject.toml's [tool.flwr.app.config], overridden per run.

`flwr run` already merges defaults and overrides into context.run_config; `merged` does the same
for callers that do not go through it (Flower's deprecated run_simulation leaves run_config
empty, tests call the apps directly). `check_overrides` is what the launcher uses to reject an
unknown key or a value of the wrong type before anything starts.
"""

from __future__ import annotations

import math
import shlex
import tomllib
from functools import lru_cache
from pathlib import Path

from flwr.common.config import flatten_dict, parse_config_args

PYPROJECT = Path(__file__).resolve().parents[1] / "pyproject.toml"


class ConfigError(ValueError):
    """A run-config key or value is wrong; the message names it."""


@lru_cache(maxsize=1)
def defaults() -> dict:
    with open(PYPROJECT, "rb") as f:
        return flatten_dict(tomllib.load(f)["tool"]["flwr"]["app"]["config"])


def merged(run_config: dict | None) -> dict:
    return {**defaults(), **(run_config or {})}


def parse_overrides(text: str) -> dict:
    """'k=v k2="s"' -> {k: v, k2: "s"} (Flower's own parser, so values mean what `flwr run`
    makes of them)."""
    if not text.strip():
        return {}
    try:  # Flower's parser silently drops a token without '=' ("driving.lr 0.1")
        tokens = shlex.split(text)
    except ValueError as e:
        raise ConfigError(f"--run-config: cannot parse {text!r} ({e})") from None
    loose = [t for t in tokens if "=" not in t or not t.split("=", 1)[0].strip()]
    if loose:
        raise ConfigError(f"--run-config: {loose[0]!r} is not key=value (in {text!r})")
    try:
        return parse_config_args([text])
    except Exception as e:  # click.ClickException or TOML errors
        raise ConfigError(
            f"--run-config: cannot parse {text!r} ({getattr(e, 'message', e)})"
        ) from None


def check_overrides(overrides: dict) -> None:
    known = defaults()
    for key, value in overrides.items():
        if key not in known:
            close = [k for k in known if k.split(".")[-1] == key.split(".")[-1]]
            hint = f" (did you mean {close[0]!r}?)" if close else ""
            raise ConfigError(f"--run-config: unknown key {key!r}{hint}")
        want = type(known[key])
        ok = (isinstance(value, want) and (want is bool or not isinstance(value, bool))) or (
            want is float and isinstance(value, int) and not isinstance(value, bool)
        )
        if not ok:
            raise ConfigError(f"--run-config: {key!r} must be {want.__name__}, got {value!r}")
        if isinstance(value, float) and not math.isfinite(value):
            raise ConfigError(f"--run-config: {key!r} must be a finite number, got {value!r}")
    check_ranges(overrides)


DAY = 86400
# Every numeric key's allowed interval (lo, hi, lo_open): a value outside is a ConfigError before
# anything starts (the launcher) or before the first round (the ServerApp, for `flwr run`). The
# upper bounds are generous; they exist to refuse 1e308-style nonsense, not to tune.
RANGES = {
    "num-server-rounds": (1, 10**5, False),
    "num-clients": (1, 10**4, False),
    "resume-round": (0, 10**5, False),
    "fraction-train": (0, 1, True),
    "fraction-evaluate": (0, 1, True),
    "max-evaluate-clients": (0, 10**7, False),
    "seed": (0, 2**32 - 1, False),
    "node-wait-timeout": (0, 7 * DAY, True),
    "round-timeout": (0, 7 * DAY, True),
    "timeout-factor": (0, 1000, False),
    "timeout-floor": (0, DAY, True),
    "trim-fraction": (0, 0.49, False),
    "max-update-norm": (0, 1e12, False),
    "max-empty-rounds": (1, 10**5, False),
    "client-threads": (1, 1024, False),
    "cross-eval-max-silos": (0, 10**4, False),
    "eval-every": (1, 10**5, False),
    "driving.image-size": (8, 1024, False),
    "driving.channels": (1, 3, False),
    "driving.train-per-silo": (1, 10**7, False),
    "driving.test-per-silo": (1, 10**7, False),
    "driving.local-epochs": (1, 1000, False),
    "driving.local-steps": (0, 10**7, False),
    "driving.batch-size": (1, 10**5, False),
    "driving.lr": (0, 10, True),
    "driving.weight-decay": (0, 1, False),
    "driving.grad-clip": (0, 1e6, False),
    "driving.non-iid": (0, 1, False),
    "fedprox.proximal-mu": (0, 1e4, False),
    "cdl.beta": (0, 1, False),
    "cdl.temperature": (0, 1e4, True),
    "faults.fraction": (0, 1, False),
    "faults.hang-s": (0, 7 * DAY, False),
    "fedrl.retries": (0, 100, False),
    "fedrl.size": (5, 256, False),
    "fedrl.maps-seed": (0, 2**32 - 1, False),
    "fedrl.history": (0, 1024, False),
    "fedrl.max-steps": (0, 10**5, False),
    "fedrl.sigma": (0, 1e6, False),
    "fedrl.clip": (0, 1e6, False),
    "fedrl.delta": (0, 0.5, True),
    "fedrl.envs": (1, 10**5, False),
    "fedrl.act-steps": (1, 10**5, False),
    "fedrl.updates": (0, 10**6, False),
    "fedrl.batch-size": (1, 10**5, False),
    "fedrl.lr": (0, 10, True),
    "fedrl.gamma": (0, 1, False),
    "fedrl.target-update": (1, 10**7, False),
    "fedrl.eps-start": (0, 1, False),
    "fedrl.eps-end": (0, 1, False),
    "fedrl.eps-decay": (1, 10**9, False),
    "fedrl.replay": (1, 10**8, False),
    "fedrl.warmup": (0, 10**8, False),
    "fedrl.eval-episodes": (0, 10**7, False),
    "fedrl.t2a-words": (5, 10**5, False),
    "fedrl.t2a-folds": (2, 100, False),
    "fedrl.t2a-fold": (0, 99, False),
    "fedrl.t2a-valid-every": (0, 10**5, False),
    "fedrl.mlp-hidden": (0, 10**5, False),
    "fedvln.train-houses": (1, 200, False),
    "fedvln.unseen-houses": (0, 200, False),
    "fedvln.seen-rate": (0, 1, True),
    "fedvln.unseen-rate": (0, 1, True),
    "fedvln.preexplore-seen-rate": (0, 1, True),
    "fedvln.server-lr": (0, 100, False),
    "fedvln.server-lr-decay": (0, 1, False),
    "fedvln.local-epochs": (0, 1000, True),
    "fedvln.speaker-epochs": (0, 1000, True),
    "fedvln.preexplore-epochs": (0, 1000, True),
    "fedvln.max-local-steps": (0, 10**7, False),
    "fedvln.batch-size": (1, 10**5, False),
    "fedvln.lr": (0, 10, False),
    "fedvln.ml-weight": (0, 100, False),
    "fedvln.aug-ml-weight": (0, 100, False),
    "fedvln.embedding": (1, 4096, False),
    "fedvln.hidden": (1, 8192, False),
    "fedvln.aug-routes": (1, 10**5, False),
    "fedvln.preexplore-routes": (1, 10**5, False),
}


def check_ranges(cfg: dict) -> None:
    """ConfigError naming the key for a numeric value that is non-finite or outside RANGES
    (generated houses are capped at 200 each: 3,000 took 88 s just to validate)."""
    for key, value in cfg.items():
        if key not in RANGES or isinstance(value, bool) or not isinstance(value, (int, float)):
            continue
        lo, hi, lo_open = RANGES[key]
        if not math.isfinite(value) or value > hi or value < lo or (lo_open and value == lo):
            interval = f"{'(' if lo_open else '['}{lo:g}, {hi:g}]"
            raise ConfigError(f"run config {key!r} must be in {interval}, got {value!r}")


def positive(cfg: dict, key: str, kind=int):
    """cfg[key] as `kind`, > 0, or ConfigError naming the key."""
    v = cfg[key]
    if isinstance(v, bool) or not isinstance(v, (int, float)) or v <= 0:
        raise ConfigError(f"run config {key!r} must be a positive number, got {v!r}")
    return kind(v)


def id_ranges(text: str, key: str) -> set[int]:
    """ "1,3,5-7" -> {1, 3, 5, 6, 7} ("" -> none); ConfigError naming `key` otherwise."""
    out: set[int] = set()
    for part in str(text).replace(" ", "").split(","):
        if not part:
            continue
        lo, dash, hi = part.partition("-")
        try:
            if dash and not hi:
                raise ValueError
            out.update(range(int(lo), int(hi or lo) + 1))
        except ValueError:
            raise ConfigError(
                f"run config {key!r}: {part!r} is not an id or a range a-b (in {text!r})"
            ) from None
    return out


FAULT_KINDS = ("raise", "nan", "hang")


def check_faults(cfg: dict, num_partitions: int) -> None:
    """ConfigError naming the key for a `faults.*` setting that cannot apply to this run (the
    faults themselves: clients/faults.py)."""
    for kind in FAULT_KINDS:
        key = f"faults.{kind}-partitions"
        bad = sorted(p for p in id_ranges(cfg[key], key) if not 0 <= p < num_partitions)
        if bad:
            raise ConfigError(
                f"run config {key!r}: partition {bad[0]} does not exist in this "
                f"run (0..{num_partitions - 1})"
            )
    id_ranges(cfg["faults.rounds"], "faults.rounds")
    if not 0.0 <= float(cfg["faults.fraction"]) <= 1.0:
        raise ConfigError(
            f"run config 'faults.fraction' must be in [0, 1], got {cfg['faults.fraction']}"
        )
    if str(cfg["faults.fraction-kind"]) not in FAULT_KINDS:
        raise ConfigError(
            f"run config 'faults.fraction-kind' must be one of "
            f"{', '.join(FAULT_KINDS)}, got {cfg['faults.fraction-kind']!r}"
        )
    if float(cfg["faults.hang-s"]) < 0:
        raise ConfigError("run config 'faults.hang-s' must be >= 0")
