"""How a settings class declares its run-config keys, and how a run config becomes one.

Each method or domain has one frozen dataclass (`config/run.py`, `config/driving.py`, ...). A
field is one run-config key: its name is the key (`batch_size` -> `<prefix>batch-size`), its
type and meaning are the field's, its default is pyproject.toml's `[tool.flwr.app.config]`
(the defaults `flwr run` merges, so there is one copy of each value). `Section.parse` turns a
run config into the typed object once, with a `ConfigError` naming the key for a wrong type, a
value out of range or not among the choices; code downstream reads attributes and never casts.
"""

from __future__ import annotations

import math
import shlex
import tomllib
from dataclasses import field, fields
from functools import lru_cache
from pathlib import Path
from typing import ClassVar

from flwr.common.config import flatten_dict, parse_config_args

# the checkout's pyproject.toml (what `flwr run` merges), or the copy a wheel carries in
# config/ (pyproject [tool.hatch.build.targets.wheel.force-include])
PYPROJECT = next(
    p
    for p in (
        Path(__file__).resolve().parents[1] / "pyproject.toml",
        Path(__file__).resolve().parent / "pyproject.toml",
    )
    if p.is_file()
)
DAY_S = 86400
TYPES = {"int": int, "float": float, "bool": bool, "str": str}


class ConfigError(ValueError):
    """A run-config key or value is wrong; the message names it."""


@lru_cache(maxsize=1)
def defaults() -> dict:
    """pyproject.toml's run config, flattened ("fedrl.sigma": 1.0, ...)."""
    with open(PYPROJECT, "rb") as f:
        return flatten_dict(tomllib.load(f)["tool"]["flwr"]["app"]["config"])


def merged(run_config: dict | None) -> dict:
    """Defaults overridden by `run_config`. `flwr run` already merges; Flower's deprecated
    run_simulation leaves run_config empty and tests call the apps directly."""
    return {**defaults(), **(run_config or {})}


def setting(
    help: str,
    *,
    lo: float | None = None,
    hi: float | None = None,
    lo_open: bool = False,
    choices: tuple[str, ...] | None = None,
):
    """One run-config key: its meaning, and the interval [lo, hi] (lo excluded with `lo_open`)
    or the strings it may take. Upper bounds are generous: they refuse 1e308-style nonsense."""
    meta = {"help": help, "lo": lo, "hi": hi, "lo_open": lo_open, "choices": choices}
    return field(metadata=meta)


class Section:
    """A frozen dataclass of the keys under one `prefix` ("" for the top-level keys); values
    derived from several keys are properties, checked in `validate`."""

    prefix: ClassVar[str] = ""
    title: ClassVar[str] = ""

    @classmethod
    def key(cls, f) -> str:
        return cls.prefix + f.name.replace("_", "-")

    @classmethod
    def parse(cls, cfg: dict):
        """The typed settings of a run config (keys it lacks take pyproject's default)."""
        known = defaults()
        values = {}
        for f in fields(cls):
            k = cls.key(f)
            values[f.name] = coerce(k, cfg[k] if k in cfg else known[k], TYPES[f.type])
            check_value(k, values[f.name], f.metadata)
        obj = cls(**values)
        obj.validate()
        return obj

    def validate(self) -> None:
        """Checks that involve more than one key (ConfigError naming them)."""

    @classmethod
    def rows(cls) -> list[tuple[str, object, str]]:
        """(key, default, meaning) of every key, for --list-config and the README table."""
        known = defaults()
        return [(cls.key(f), known[cls.key(f)], describe(f.metadata)) for f in fields(cls)]


def coerce(key: str, value, kind: type):
    """`value` as `kind`, or ConfigError: a bool is not a number, an int is a float."""
    ok = (isinstance(value, kind) and (kind is bool or not isinstance(value, bool))) or (
        kind is float and isinstance(value, int) and not isinstance(value, bool)
    )
    if not ok:
        raise ConfigError(f"run config {key!r} must be {kind.__name__}, got {value!r}")
    if kind is float:
        value = float(value)
        if not math.isfinite(value):
            raise ConfigError(f"run config {key!r} must be a finite number, got {value!r}")
    return value


def check_value(key: str, value, meta) -> None:
    choices, lo, hi = meta.get("choices"), meta.get("lo"), meta.get("hi")
    if choices is not None and value not in choices:
        raise ConfigError(f"run config {key!r} must be one of {', '.join(choices)}, got {value!r}")
    if lo is None or isinstance(value, (bool, str)):
        return
    lo_open = meta.get("lo_open", False)
    if value < lo or value > hi or (lo_open and value == lo):
        interval = f"{'(' if lo_open else '['}{lo:g}, {hi:g}]"
        raise ConfigError(f"run config {key!r} must be in {interval}, got {value!r}")


def describe(meta) -> str:
    text = meta["help"]
    if meta.get("choices"):
        text += f" (one of: {', '.join(repr(c) for c in meta['choices'])})"
    elif meta.get("lo") is not None:
        text += f" (in {'(' if meta['lo_open'] else '['}{meta['lo']:g}, {meta['hi']:g}])"
    return text


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
