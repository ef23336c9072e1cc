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
    try:   # Flower's parser silently drops a token without '=' ("driving.lr 0.1")
        tokens = shlex.split(text)
    except ValueError as e:
        raise ConfigError(f"--run-config: cannot parse {text!r} ({e})") from None
    loose = [t for t in tokens if "=" not in t]
    if loose:
        raise ConfigError(f"--run-config: {loose[0]!r} is not key=value (in {text!r})")
    try:
        return parse_config_args([text])
    except Exception as e:  # click.ClickException or TOML errors
        raise ConfigError(f"--run-config: cannot parse {text!r} ({getattr(e, 'message', e)})") from None


def check_overrides(overrides: dict) -> None:
    known = defaults()
    for key, value in overrides.items():
        if key not in known:
            close = [k for k in known if k.split(".")[-1] == key.split(".")[-1]]
            hint = f" (did you mean {close[0]!r}?)" if close else ""
            raise ConfigError(f"--run-config: unknown key {key!r}{hint}")
        want = type(known[key])
        ok = isinstance(value, want) or (want is float and isinstance(value, int)
                                         and not isinstance(value, bool))
        if not ok:
            raise ConfigError(f"--run-config: {key!r} must be {want.__name__}, got {value!r}")
        if isinstance(value, float) and not math.isfinite(value):
            raise ConfigError(f"--run-config: {key!r} must be a finite number, got {value!r}")
        if key in ("round-timeout", "node-wait-timeout", "timeout-floor") and not value > 0:
            raise ConfigError(f"--run-config: {key!r} must be > 0 seconds, got {value!r}")
        if key == "timeout-factor" and value < 0:
            raise ConfigError(f"--run-config: 'timeout-factor' must be >= 0, got {value!r}")


def positive(cfg: dict, key: str, kind=int):
    """cfg[key] as `kind`, > 0, or ConfigError naming the key."""
    v = cfg[key]
    if isinstance(v, bool) or not isinstance(v, (int, float)) or v <= 0:
        raise ConfigError(f"run config {key!r} must be a positive number, got {v!r}")
    return kind(v)


def id_ranges(text: str, key: str) -> set[int]:
    """"1,3,5-7" -> {1, 3, 5, 6, 7} ("" -> none); ConfigError naming `key` otherwise."""
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
            raise ConfigError(f"run config {key!r}: {part!r} is not an id or a range a-b "
                              f"(in {text!r})") from None
    return out


FAULT_KINDS = ("raise", "nan", "hang")


def check_faults(cfg: dict, num_partitions: int) -> None:
    """ConfigError naming the key for a `faults.*` setting that cannot apply to this run (the
    faults themselves: clients/faults.py)."""
    for kind in FAULT_KINDS:
        key = f"faults.{kind}-partitions"
        bad = sorted(p for p in id_ranges(cfg[key], key) if not 0 <= p < num_partitions)
        if bad:
            raise ConfigError(f"run config {key!r}: partition {bad[0]} does not exist in this "
                              f"run (0..{num_partitions - 1})")
    id_ranges(cfg["faults.rounds"], "faults.rounds")
    if not 0.0 <= float(cfg["faults.fraction"]) <= 1.0:
        raise ConfigError(f"run config 'faults.fraction' must be in [0, 1], "
                          f"got {cfg['faults.fraction']}")
    if str(cfg["faults.fraction-kind"]) not in FAULT_KINDS:
        raise ConfigError(f"run config 'faults.fraction-kind' must be one of "
                          f"{', '.join(FAULT_KINDS)}, got {cfg['faults.fraction-kind']!r}")
    if float(cfg["faults.hang-s"]) < 0:
        raise ConfigError("run config 'faults.hang-s' must be >= 0")
