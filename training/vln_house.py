"""One house's VLN data as a FedVLN client sees it (no flwr): its labelled instructions, its
validation split, and the routes it samples in itself for the speaker to describe.

A house is `seen` when it has labelled training instructions (R2R's train scans) and `unseen`
otherwise (val_unseen scans: it only has the instructions it is evaluated on). Clients are
ordered seen houses first, then unseen ones, each sorted by scan id, so partition p of a
simulation is always the same house.
"""

from __future__ import annotations

import zlib
from dataclasses import dataclass
from functools import lru_cache

import numpy as np

from config import Config
from envs.errors import DataError
from envs.vln_data import Episode
from envs.vln_houses import HouseSpec
from envs.vln_routes import sample_routes
from envs.vln_setup import VLNSetup, open_vln


@dataclass
class House:
    setup: VLNSetup
    name: str
    role: str  # seen | unseen
    train: list[Episode]  # labelled instructions (none in an unseen house)
    val_split: str  # val_seen | val_unseen
    val: list[Episode]


def open_setup(
    data_dir: str, features_tsv: str, spec: HouseSpec, appearance: float = 0.0
) -> VLNSetup:
    """Cached per process: building the world is the slow part, and it is the same for every
    house of a run (simulation nodes share processes)."""
    return _cached_setup(data_dir, features_tsv, spec, float(appearance))


@lru_cache(maxsize=4)
def _cached_setup(data_dir: str, features_tsv: str, spec: HouseSpec, appearance: float):
    return open_vln(data_dir, features_tsv, spec, appearance)


def spec_of(c: Config) -> HouseSpec:
    """The embedded houses a run generates (seen, unseen)."""
    return HouseSpec(train_houses=c.fedvln.train_houses, unseen_houses=c.fedvln.unseen_houses)


def setup_of(c: Config, data_dir: str = "") -> VLNSetup:
    """The run's VLN data, world and vocabulary (`data_dir`: a node's own folder instead of
    fedvln.data-dir), cached per process."""
    return open_setup(
        data_dir or c.fedvln.data_dir, c.fedvln.features_tsv, spec_of(c), c.fedvln.appearance
    )


def house_names(setup: VLNSetup) -> tuple[list[str], list[str]]:
    """(seen houses, unseen houses) in client order."""
    seen = sorted({e.scan for e in setup.split("train")})
    unseen = sorted({e.scan for e in setup.split("val_unseen")} - set(seen))
    return seen, unseen


def open_house(setup: VLNSetup, name: str) -> House:
    train = [e for e in setup.split("train") if e.scan == name]
    if train:
        return House(
            setup,
            name,
            "seen",
            train,
            "val_seen",
            [e for e in setup.split("val_seen") if e.scan == name],
        )
    val = [e for e in setup.split("val_unseen") if e.scan == name]
    if not val:
        raise DataError(f"house {name!r} has no train or val_unseen instructions in {setup.source}")
    return House(setup, name, "unseen", [], "val_unseen", val)


def house_of_partition(setup: VLNSetup, partition: int) -> str:
    seen, unseen = house_names(setup)
    order = seen + unseen
    if not 0 <= partition < len(order):
        raise DataError(
            f"partition {partition} has no house: {setup.source} has "
            f"{len(seen)} seen + {len(unseen)} unseen houses"
        )
    return order[partition]


ROUTE_FILTER = 2  # 2: scored paths and (start, goal) dropped in either direction (issue 64)


def scored_keys(episodes) -> set[tuple]:
    """What no adaptation route may be: each scored episode's path and its (start, goal), both
    ways (a reversed route holds the same rooms, objects and turns mirrored; issue 64)."""
    keys = set()
    for e in episodes:
        keys |= {e.path, e.path[::-1], (e.path[0], e.path[-1]), (e.path[-1], e.path[0])}
    return keys


def is_scored(path: tuple, keys: set[tuple]) -> bool:
    """True when `path` is a scored path, or joins a scored start and goal (`scored_keys`)."""
    return path in keys or (path[0], path[-1]) in keys


def speaker_routes(house: House, n_routes: int, seed: int) -> list[Episode]:
    """Routes (start heading, node path) sampled in this house for the speaker to describe;
    their instructions are written batch by batch during training (back-translation,
    `training.vln_agent.BackTranslation`). The same (house, n_routes, seed) always gives the
    same routes, so the centralized reference can rebuild exactly what each house samples.

    None shares its path, or its start and goal, with an episode the house is scored on
    (`house.val`), in either direction: augmentation and pre-exploration never train on the
    routes a table scores, walked either way (a reversed route holds the same rooms, objects
    and turns mirrored), as the official pre-exploration samples away from the evaluation data
    (issues 41, 64). The routes are the first n_routes of a 3x larger draw that survive that
    filter, so asking for fewer gives a prefix of asking for more."""
    scan = house.setup.world.scan(house.name)
    rng = np.random.default_rng([seed, zlib.crc32(house.name.encode())])
    scored = scored_keys(house.val)
    out = []
    for path, heading in sample_routes(scan, 3 * n_routes, rng):
        nodes = tuple(scan.ids[v] for v in path)
        if is_scored(nodes, scored):
            continue
        k = len(out)
        out.append(
            Episode(f"aug-{house.name}-{k}", house.name, nodes, float(heading), "", 10**7 + k)
        )
        if len(out) == n_routes:
            break
    return out


def routes_house(house: House, where: str) -> House:
    """The house whose routes `house` adapts on (`fedvln.routes-house`): itself (`own`, the
    paper), or for an unseen house the next unseen house in name order, cyclically
    (`next-unseen`: the held-out-house control of issue 64). Adapting elsewhere and being
    scored here tells "gain from this house" from "gain from any adaptation" (more steps on
    the task, a look of unseen houses in general). A seen house always keeps its own."""
    if where == "own" or house.role != "unseen":
        return house
    unseen = house_names(house.setup)[1]
    if len(unseen) < 2:
        raise DataError(
            f"fedvln.routes-house = {where!r} needs 2 or more unseen houses; "
            f"{house.setup.source} has {len(unseen)}"
        )
    return open_house(house.setup, unseen[(unseen.index(house.name) + 1) % len(unseen)])


def local_iterations(n_items: int, epochs: float, batch_size: int, cap: int = 0) -> int:
    """Minibatch updates in `epochs` passes over n_items (at least one), capped if cap > 0."""
    it = max(1, int(np.ceil(epochs * n_items / batch_size)))
    return min(it, cap) if cap > 0 else it


@lru_cache(maxsize=2)
def _grammar_houses(spec: HouseSpec) -> dict:
    from envs.vln_houses import houses_of

    return houses_of(spec)


def grammar_words(house: House, routes: list[Episode], spec: HouseSpec, seed: int) -> list[str]:
    """One instruction per route written by the embedded houses' own grammar
    (`envs.vln_houses.grammar_instruction`, the grammar that wrote every instruction of the
    data): a perfect speaker (`fedvln.route-words = "grammar"`). A diagnostic, not FedVLN: it
    tells what a stage's routes teach from what our speaker's words do
    (`experiments.fedvln.augment_budget`). One instruction per route, in one of the grammar's
    styles, written once and reused every time the route is drawn, where the speaker writes
    new words for every batch through its dropout: the two differ in the words' truth *and*
    in their variety. The same (house, routes, seed) gives the same words."""
    from envs.vln_houses import grammar_instruction

    scan = house.setup.world.scan(house.name)
    rng = np.random.default_rng([seed, zlib.crc32(house.name.encode()), 1])
    g = _grammar_houses(spec)[house.name]
    return [grammar_instruction(g, [scan.index[v] for v in e.path], e.heading, rng) for e in routes]


def follower_steps(
    n_labelled: int, n_routes: int, epochs: float, batch_size: int, cap: int = 0
) -> int:
    """Optimizer steps of one local follower training, as the official code counts them
    (train.py l. 478-495, 708): with labelled data and speaker routes, half the labelled
    batches of `epochs` passes, each step one labelled plus one route batch; with routes only
    (an unseen house pre-exploring), `epochs` passes over the routes; else over the labels."""
    if n_labelled and n_routes:
        return -(-local_iterations(n_labelled, epochs, batch_size, cap) // 2)
    return local_iterations(n_labelled or n_routes, epochs, batch_size, cap)
