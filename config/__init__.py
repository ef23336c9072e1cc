"""The run config, typed: one settings class per method or domain, parsed once per run.

    from config import parse
    c = parse(context.run_config)      # defaults merged, every key checked
    c.run.seed, c.driving.lr, c.fedrl.sigma, c.fedvln.stage

`server/` and `clients/` both import this package and never each other. `python simulation.py
--list-config [section]` prints every key with its default and meaning, from these classes.
"""

from __future__ import annotations

import difflib
from dataclasses import dataclass, fields, replace
from functools import lru_cache

from config.dp import DPSettings
from config.driving import CDLSettings, DrivingSettings, FedProxSettings
from config.faults import FaultSettings
from config.fedrl import FedRLSettings
from config.fedvln import FedVLNSettings
from config.run import RunSettings
from config.schema import ConfigError, defaults, merged

SECTIONS = {
    "run": RunSettings,
    "driving": DrivingSettings,
    "fedprox": FedProxSettings,
    "cdl": CDLSettings,
    "faults": FaultSettings,
    "dp": DPSettings,
    "fedrl": FedRLSettings,
    "fedvln": FedVLNSettings,
}


@dataclass(frozen=True)
class Config:
    run: RunSettings
    driving: DrivingSettings
    fedprox: FedProxSettings
    cdl: CDLSettings
    faults: FaultSettings
    dp: DPSettings
    fedrl: FedRLSettings
    fedvln: FedVLNSettings

    def run_config(self) -> dict:
        """Back to `{key: value}` for every key (what a run's config.json records)."""
        return {
            cls.key(f): getattr(getattr(self, name), f.name)
            for name, cls in SECTIONS.items()
            for f in fields(cls)
        }


def parse(run_config: dict | None) -> Config:
    """Every section of `run_config` (over pyproject's defaults), or ConfigError naming the key.
    Parsed once per distinct config: a ClientApp gets the same one on every message."""
    known = defaults()
    # the type is part of the key: True == 1 == 1.0 would otherwise share one cached parse
    items = ((k, type(v).__name__, v) for k, v in merged(run_config).items() if k in known)
    return _parse(tuple(sorted(items)))


@lru_cache(maxsize=16)
def _parse(items: tuple) -> Config:
    cfg = {k: v for k, _, v in items}
    c = Config(**{name: cls.parse(cfg) for name, cls in SECTIONS.items()})
    if c.run.num_server_rounds == 0:  # the method's default (config/methods.py `rounds`)
        from config.methods import METHODS, default_rounds

        if c.run.method in METHODS:
            rounds = default_rounds(c)
            c = replace(c, run=replace(c.run, num_server_rounds=rounds))
    return c


def check_overrides(overrides: dict) -> Config:
    """What the launcher runs before anything starts: no unknown key, no wrong value."""
    known = defaults()
    for key in overrides:
        if key not in known:
            close = [k for k in known if k.split(".")[-1] == key.split(".")[-1]]
            close = close or difflib.get_close_matches(key, list(known), n=1, cutoff=0.75)
            hint = f" (did you mean {close[0]!r}?)" if close else ""
            raise ConfigError(f"--run-config: unknown key {key!r}{hint}")
    return parse(overrides)


def sections_of(name: str | None) -> list[str]:
    """The sections `name` means: all (None), the ones a method reads (a method's name first:
    `cdl` is a method and a section), or one section (run, driving, faults, ...)."""
    from config.methods import METHODS

    if name is None:
        return list(SECTIONS)
    if name in METHODS:
        return ["run", *METHODS[name].settings, "faults"]
    if name in SECTIONS:
        return [name]
    raise ConfigError(
        f"--list-config: {name!r} is neither a section ({', '.join(SECTIONS)}) nor a method "
        f"({', '.join(METHODS)})"
    )


def reference(name: str | None = None) -> list[tuple[str, str, object, str]]:
    """(section title, key, default, meaning) of every key, or of what `name` (a section or a
    method) reads."""
    return [
        (SECTIONS[sec].title, *row) for sec in sections_of(name) for row in SECTIONS[sec].rows()
    ]


def bounds() -> dict[str, tuple[float, float, bool]]:
    """key -> (lo, hi, lo excluded) of every numeric key (the fuzz corpus probes them)."""
    return {
        cls.key(f): (f.metadata["lo"], f.metadata["hi"], f.metadata["lo_open"])
        for cls in SECTIONS.values()
        for f in fields(cls)
        if f.metadata.get("lo") is not None
    }


def render(name: str | None = None, markdown: bool = False) -> str:
    """Every key (of one section or method) with its default and meaning: plain text for
    `simulation.py --list-config`, or the Markdown of docs/run-config.md."""
    out, title = [], None
    for sec, key, default, meaning in reference(name):
        if sec != title:
            title = sec
            out += (
                [f"\n### {sec}\n", "| key | default | meaning |", "|---|---|---|"]
                if markdown
                else [f"\n[{sec}]"]
            )
        value = toml_literal(default)
        if markdown:
            out.append(f"| `{key}` | `{value}` | {meaning.replace('|', '&#124;')} |")
        else:
            out.append(f"  {key} = {value}\n      {meaning}")
    return "\n".join(out).lstrip("\n") + "\n"


def toml_literal(v) -> str:
    """How `--run-config` writes the value (strings quoted, booleans lower-case)."""
    if isinstance(v, bool):
        return str(v).lower()
    return f'"{v}"' if isinstance(v, str) else repr(v)
