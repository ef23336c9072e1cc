"""Run-config keys of fault injection (`faults.*`, every method; what the faults do:
clients/faults.py)."""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property

from config.schema import DAY_S, ConfigError, Section, id_ranges, setting

KINDS = ("raise", "nan", "hang")


@dataclass(frozen=True)
class FaultSettings(Section):
    prefix = "faults."
    title = "Fault injection (every method)"

    raise_partitions: str = setting('partitions whose training calls raise ("1,3"; "" = none)')
    nan_partitions: str = setting('partitions whose training replies carry NaN ("1,3"; "" = none)')
    hang_partitions: str = setting(
        "partitions whose training calls answer only after faults.hang-s: they drop out for "
        "faults.rounds"
    )
    fraction: float = setting(
        "besides the lists: each training call is faulty with this probability (seeded)",
        lo=0,
        hi=1,
    )
    fraction_kind: str = setting(
        "what the faults drawn by faults.fraction do: raise, reply NaN, or hang", choices=KINDS
    )
    rounds: str = setting('faults only in these rounds ("2-4,7"; "" = every round)')
    hang_s: float = setting("how long a hang lasts; 0 = round-timeout + 5 s", lo=0, hi=7 * DAY_S)

    def validate(self) -> None:
        self.partitions  # noqa: B018 (parse the id lists now: ConfigError naming the key)
        self.round_set  # noqa: B018

    @cached_property
    def partitions(self) -> dict[str, set[int]]:
        """kind -> the partitions listed for it."""
        return {
            k: id_ranges(getattr(self, f"{k}_partitions"), f"faults.{k}-partitions") for k in KINDS
        }

    @cached_property
    def round_set(self) -> set[int]:
        return id_ranges(self.rounds, "faults.rounds")

    def check_partitions(self, num_partitions: int) -> None:
        """ConfigError naming the key for a partition this run does not have."""
        for kind, ids in self.partitions.items():
            bad = sorted(p for p in ids if not 0 <= p < num_partitions)
            if bad:
                raise ConfigError(
                    f"run config 'faults.{kind}-partitions': partition {bad[0]} does not "
                    f"exist in this run (0..{num_partitions - 1})"
                )
