"""How a settings class declares its run-config keys, and how a run config becomes one.

Each method or domain has one frozen dataclass (`config/run.py`, `config/driving.py`, ...). A
field is one run-config key: its name is the key (`batch_size` -> `<prefix>batch-size`), its
type and meaning are the field's, its default is pyproject.toml's `[tool.flwr.app.config]`
(the defaults `flwr run` merges, so there is one copy of each value). `Section.parse` turns a
run config into the typed object once, with a `ConfigError` naming the key for a wrong type, a
value out of range or not among the choices; code downstream reads attributes and never casts.
"""

from __future__ import annotations

import difflib
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
        close = difflib.get_close_matches(str(value), [str(c) for c in choices], n=1, cutoff=0.6)
        hint = f" (did you mean {close[0]!r}?)" if close else ""
        raise ConfigError(
            f"run config {key!r} must be one of {', '.join(choices)}, got {value!r}{hint}"
        )
    if lo is None or isinstance(value, (bool, str)):
        return
    lo_open = meta.get("lo_open", False)
    if value < lo or value > hi or (lo_open and value == lo):
        raise ConfigError(f"run config {key!r} must be in {interval(meta)}, got {value!r}")


def _bound(v) -> str:
    """A bound as people write it: 4294967295, not 4.29497e+09; 0.5 and 1e-06 stay short."""
    return str(int(v)) if float(v).is_integer() and abs(v) < 1e16 else f"{v:g}"


def interval(meta) -> str:
    return f"{'(' if meta.get('lo_open') else '['}{_bound(meta['lo'])}, {_bound(meta['hi'])}]"


def describe(meta) -> str:
    text = meta["help"]
    if meta.get("choices"):
        text += f" (one of: {', '.join(repr(c) for c in meta['choices'])})"
    elif meta.get("lo") is not None:
        text += f" (in {interval(meta)})"
    return text


def parse_overrides(text: str) -> dict:
    """'k=v k2="s"' -> {k: v, k2: "s"} (Flower's own parser, so values mean what `flwr run`
    makes of them)."""
    if not text.strip():
        return {}
    if len(text) > MAX_RUN_CONFIG:  # every check below is linear, but Flower's parser is not
        raise ConfigError(
            f"--run-config: {len(text):,} characters; at most {MAX_RUN_CONFIG:,} (a run config "
            "is a few hundred: put long values in a file the config names)"
        )
    try:  # Flower's parser silently drops a token without '=' ("driving.lr 0.1")
        tokens = shlex.split(text)
    except ValueError as e:
        raise ConfigError(f"--run-config: cannot parse {_short(text)} ({e})") from None
    loose = [t for t in tokens if "=" not in t or not t.split("=", 1)[0].strip()]
    if loose:
        raise ConfigError(f"--run-config: {loose[0]!r} is not key=value (in {_short(text)})")
    seen: set[str] = set()
    for t in tokens:
        key = t.split("=", 1)[0].strip()
        if key in seen:
            raise ConfigError(f"--run-config: key {key!r} is given more than once; give it once")
        seen.add(key)
    try:
        return parse_config_args([text])
    except Exception as e:  # click.ClickException or TOML errors
        unquoted(text, tokens)
        raise ConfigError(
            f"--run-config: cannot parse {_short(text)} ({getattr(e, 'message', e)})"
        ) from None


MAX_RUN_CONFIG = 64 * 1024


def _short(text: str, n: int = 200) -> str:
    """The text as an error message quotes it: at most n characters."""
    return repr(text) if len(text) <= n else f"{text[:n]!r}... ({len(text):,} characters)"


def unquoted(text: str, tokens: list[str]) -> None:
    """ConfigError for the likeliest parse failure: a string left unquoted (a path, a name),
    naming the key, its type and the quoting rule; returns if that is not the cause."""
    import re

    for token in tokens:
        key, value = (part.strip() for part in token.split("=", 1))
        if re.search(rf"{re.escape(key)}\s*=\s*[\"']", text):
            continue  # quoted in the text (the shell-style split took the quotes off)
        try:
            tomllib.loads(f"v = {value}")
        except tomllib.TOMLDecodeError:
            kind = type(defaults()[key]).__name__ if key in defaults() else "str"
            how = (
                f': quote it, {key}="{value}" (in a shell: --run-config \'{key}="{value}"\')'
                if kind == "str"
                else ""
            )
            raise ConfigError(
                f"--run-config: {key}={value} is not a value; {key!r} is a {kind}{how}"
            ) from None


def id_ranges(text: str, key: str, most: int = 100_000) -> set[int]:
    """ "1,3,5-7" -> {1, 3, 5, 6, 7} ("" -> none); ConfigError naming `key` otherwise. Bounded
    before anything is allocated: at most `most` ids in all ("1-30000000" took 42 s and
    2.5 GB before a later check refused it)."""
    out: set[int] = set()
    for part in str(text).replace(" ", "").split(","):
        if not part:
            continue
        lo, dash, hi = part.partition("-")
        try:
            if dash and not hi:
                raise ValueError
            a, b = int(lo), int(hi or lo)
        except ValueError:
            raise ConfigError(
                f"run config {key!r}: {part!r} is not an id or a range a-b (in {text!r})"
            ) from None
        if b < a:
            raise ConfigError(f"run config {key!r}: range {part!r} runs backwards (in {text!r})")
        if b - a + 1 + len(out) > most:
            raise ConfigError(f"run config {key!r}: more than {most} ids (in {text[:60]!r})")
        out.update(range(a, b + 1))
    return out
