"""FedVLN's houses (embedded, or R2R/Matterport under `fedvln.data-dir`): one client per house,
the seen houses first, then the unseen ones; `--stage`/`--variant` choose what a run trains and
`--fraction` is r, the share of seen houses trained each round (`fedvln.seen-rate`)."""

from __future__ import annotations

from pathlib import Path

from config.schema import ConfigError

FLAGS = ("stage", "variant")  # simulation.py's --stage and --variant set fedvln.stage/variant
FRACTION_KEY = "fedvln.seen-rate"


def parties(c, asked: int | None) -> int:
    """The data's seen plus unseen houses; --num-clients may only agree with it."""
    from envs.errors import DataError
    from training.vln_house import house_names, setup_of

    try:
        setup = setup_of(c)
        setup.data.validate()
        seen, unseen = house_names(setup)
    except (DataError, OSError) as e:
        raise ConfigError(f"fedvln.data-dir: {e}") from None
    houses = len(seen) + len(unseen)
    if asked not in (None, houses):
        raise ConfigError(
            f"--num-clients {asked}: FedVLN has one client per house and this data has {houses}"
        )
    return houses


def check_data(c) -> None:
    """The starting checkpoints named in the run config load (read without running code,
    weights_only) before anything starts."""
    from envs.errors import DataError
    from models import vln_checkpoint

    for key, path in (("agent-init", c.fedvln.agent_init), ("speaker-init", c.fedvln.speaker_init)):
        if path and Path(path).is_file():
            try:
                vln_checkpoint.load(path)
            except DataError as e:
                raise ConfigError(f"fedvln.{key}: {e}") from None


def check_policy(c, policy) -> None:
    """What every house would refuse under `policy`, said before anything starts: a chained
    speaker round without fedvln.allow-chain, and rounds whose model may mix fewer houses
    than its fedvln.min-round-houses (strategies/fedvln_strategy.py, Mixing)."""
    said = f"the houses' policy ({policy.source})"
    if c.fedvln.speaker_round == "chain" and not policy.fedvln.allow_chain:
        raise ConfigError(
            "run config 'fedvln.speaker-round' = \"chain\" hands each house's speaker to the "
            f"next house; {said} refuses it (fedvln.allow-chain): pass --policy "
            "deploy/policies/research.toml, or a policy of yours with allow-chain = true"
        )
    least = policy.fedvln.min_round_houses
    if c.fedvln.speaker_round == "chain" and least > 1:
        raise ConfigError(
            "run config 'fedvln.speaker-round' = \"chain\" hands each house's speaker, "
            f"mixed with no other, to the next house; {said} trains only where at least "
            f"{least} houses are mixed (fedvln.min-round-houses): a house that serves a chain "
            "sets min-round-houses = 1 as well as allow-chain (deploy/policies/research.toml)"
        )
    if c.fedvln.min_round_houses < least:
        raise ConfigError(
            f"run config 'fedvln.min-round-houses' = {c.fedvln.min_round_houses} lets a "
            f"round's model reach every house with fewer houses' updates mixed in than {said} "
            f"allows (fedvln.min-round-houses = {least}): set 'fedvln.min-round-houses' to "
            f"{least} or more (and the stage's rates so that a round trains that many), or "
            "pass a policy that allows fewer (deploy/policies/research.toml: 1)"
        )


def fit(grid, c):
    return c


def partitions(c) -> int:
    return c.run.num_clients


def after_run(out: Path) -> Path | None:
    """After a speaker stage: what the speaker said for every val path (said.csv,
    training/vln_said.py). The launcher holds every house's data; the server does not."""
    import json

    try:
        cfg = json.loads((out / "config.json").read_text())
    except (OSError, ValueError):
        return None
    if cfg.get("fedvln.stage") != "speaker":
        return None
    from training.vln_said import write_said

    return write_said(out)
