"""Route fidelity: does an instruction say what its route is? (no flwr)

BLEU cannot tell a grounded speaker from a constant sentence on the embedded houses (issue
41: one sentence written for every path scores BLEU-4 41.9 on val_unseen, the level of a
trained speaker). This score reads an instruction against the facts of its own route, the
facts the houses' instruction grammar (`envs.vln_instructions.describe`) renders, taken from
the data folder's own annotations (`regions/vp2room_label.json`, `objects/viewpoint_objects.json`,
the connectivity poses), so it works for any folder in the R2R layout that has them. Per path,
over the *distinct* rooms the instruction names (naming a room twice earns nothing twice):

- `rooms_on_route`: the share of the named rooms that the route enters or ends in (a path
  that names none scores 0). The start room is not among them unless the route enters it
  again: naming where the agent already stands needs no reading of the route, and scored
  100 when it counted (issue 64);
- `entered_named`: the share of the rooms the route enters (room changes) that it names;
- `room_f1`: the F1 of the named rooms against the rooms a description names, the entered ones
  and the goal's (the start room, which any speaker can name, is not among them): naming every
  room type passes the two shares above, not this;
- `goal_room`: the *last* room it names is the goal's (the grammar's rooms come in route
  order; naming every room type would otherwise pass);
- `stop_object`: of paths whose true instructions name an object at the goal, the share
  whose *last* named object is that object (the grammar ends "stop next to the <object>",
  the object nearest the goal). Crediting any object within reach of the goal, as before
  issue 64, gave a speaker naming another nearby object 71 where an independent parser gave
  0. Paths whose references name no goal object are not scored on it: the annotations give
  the objects within reach but not which is nearest;
- `first_turn`: its first turn phrase (left / right / around / straight) matches the route's
  first heading change (|delta| < 35 deg straight, > 145 around, as the grammar).

`fidelity` is the mean of room_f1, goal_room, stop_object and first_turn, each scored per path
and averaged over paths. Floors (`experiments.fedvln.speaker_floors`): the true references
score about 90, the best constant sentence and another path's instruction about 20-30, and
route-blind strategies a review tried (every room type listed; the start room repeated, then
every room, then the house's commonest object) stay at the other-path level. Phrases: room
synonyms are the grammar's (`ROOM_WORDS`, an ambiguous word such as "lounge" counts as any of
its rooms) and object names are the house's; both are matched together, longest first, an
object winning a tie, so "kitchen island", "office chair" and "toilet" are objects and "bed
room" is a room.
"""

from __future__ import annotations

import math
import re
from collections.abc import Sequence
from dataclasses import dataclass
from functools import lru_cache

import numpy as np

from envs.vln_data import Episode, VLNData
from envs.vln_instructions import ROOM_WORDS
from envs.vln_vocab import split_sentence

METRICS = ("rooms_on_route", "entered_named", "room_f1", "goal_room", "stop_object", "first_turn")
IN_FIDELITY = ("room_f1", "goal_room", "stop_object", "first_turn")

_ROOM_PHRASES: dict[str, set[str]] = {}
for _code, _words in ROOM_WORDS.items():
    for _w in _words:
        _ROOM_PHRASES.setdefault(" ".join(split_sentence(_w)), set()).add(_code)
_TURN = {"left": "left", "right": "right", "around": "around", "u": "around"}
_STRAIGHT = {"straight", "forward", "ahead"}


@dataclass(frozen=True)
class RouteFacts:
    rooms: frozenset[str]  # room codes of every viewpoint on the route
    entered: frozenset[str]  # room codes the route moves into
    goal_room: str
    stop_objects: frozenset[str]  # what the true instructions name at the goal (usually one)
    first_turn: str  # left | right | around | straight
    house_objects: tuple[str, ...]  # every object name of the house, longest first


def turn_class(delta: float) -> str:
    """The grammar's reading of a heading change (radians, positive = right)."""
    deg = math.degrees((delta + math.pi) % (2 * math.pi) - math.pi)
    if abs(deg) < 35:
        return "straight"
    if abs(deg) > 145:
        return "around"
    return "right" if deg > 0 else "left"


@lru_cache(maxsize=64)
def _house_objects(data: VLNData, scan: str) -> tuple[str, ...]:
    names = {
        " ".join(split_sentence(o[0]))
        for vps in [data.objects.get(scan, {})]
        for objs in vps.values()
        for o in objs
    }
    return tuple(sorted(names, key=lambda n: (-len(n), n)))


def route_facts(data: VLNData, e: Episode, references: Sequence[str]) -> RouteFacts:
    """The facts of an episode's route read off the data folder's annotations, and its stop
    object off its true instructions (`references`: every reference of the path)."""
    scan = data.scan(e.scan)
    rooms = data.rooms.get(e.scan, {})
    code = [str(rooms.get(v, {}).get("region_label", "-")) for v in e.path]
    entered = {b for a, b in zip(code, code[1:]) if a != b}
    objs = data.objects.get(e.scan, {}).get(e.path[-1], [])
    if len(e.path) > 1:
        a, b = scan.pos[scan.index[e.path[0]]], scan.pos[scan.index[e.path[1]]]
        turn = turn_class(math.atan2(b[0] - a[0], b[1] - a[1]) - e.heading)
    else:
        turn = "straight"
    house = _house_objects(data, e.scan)
    near = {" ".join(split_sentence(o[0])) for o in objs}
    named = (_last_object(r, house) for r in references)
    return RouteFacts(
        frozenset(code),
        frozenset(entered),
        code[-1],
        frozenset(o for o in named if o in near),
        turn,
        house,
    )


def _last_object(text: str, house_objects: tuple[str, ...]) -> str | None:
    """The last object an instruction names (rooms and objects matched together)."""
    found = _find(" ".join(split_sentence(text)), _phrases(house_objects))
    objects = [p for _, p, kind in found if kind == "object"]
    return objects[-1] if objects else None


def _phrases(house_objects: tuple[str, ...]) -> dict[str, str]:
    """{phrase: "room" | "object"}: the grammar's room words and the house's object names."""
    return {p: "room" for p in _ROOM_PHRASES} | {o: "object" for o in house_objects}


def _find(text: str, phrases: dict[str, str]) -> list[tuple[int, str, str]]:
    """(position, phrase, kind) of every whole-word occurrence of `phrases` ({phrase: kind}),
    longest phrase first at a spot, an object before a room of the same length."""
    found, taken = [], np.zeros(len(text) + 1, dtype=bool)
    order = sorted(phrases, key=lambda p: (-len(p), phrases[p] != "object"))
    for p in order:
        for m in re.finditer(rf"(?<!\S){re.escape(p)}(?!\S)", text):
            if not taken[m.start() : m.end()].any():
                taken[m.start() : m.end()] = True
                found.append((m.start(), p, phrases[p]))
    return sorted(found)


def read_instruction(text: str, facts: RouteFacts) -> dict:
    """What one instruction says: room mentions in order (sets of codes), named objects in
    order and its first turn phrase."""
    toks = split_sentence(text)
    norm = " ".join(toks)
    found = _find(norm, _phrases(facts.house_objects))
    rooms = [_ROOM_PHRASES[p] for _, p, kind in found if kind == "room"]
    objects = [p for _, p, kind in found if kind == "object"]
    turn = None
    for k, t in enumerate(toks):
        if toks[max(0, k - 2) : k] == ["on", "your"]:  # "keep the sofa on your left"
            continue
        if t in _TURN and (t != "u" or toks[k + 1 : k + 3] == ["-", "turn"]):
            turn = _TURN[t]
            break
        if t in _STRAIGHT:
            turn = "straight"
            break
    return {"rooms": rooms, "objects": objects, "turn": turn}


def _named_codes(mentions: list[set[str]], targets: frozenset[str]) -> set[str]:
    """The distinct rooms named: an ambiguous word counts as the one the route has, if any."""
    out = set()
    for m in mentions:
        hit = m & targets
        out |= hit if hit else {min(m)}
    return out


STATS = (
    "paths",
    "on_route_sum",
    "entered_sum",
    "entered_paths",
    "f1_sum",
    "goal_hits",
    "stop_hits",
    "stop_paths",
    "turn_hits",
)


def stats(items: list[tuple[str, RouteFacts]]) -> dict[str, float]:
    """Sufficient statistics of the shares over (instruction, facts) pairs: summed over houses
    they give the shares of the union (`from_stats`), so a federated speaker is scored
    without any instruction leaving its house."""
    out = dict.fromkeys(STATS, 0.0)
    for text, f in items:
        said = read_instruction(text, f)
        named = _named_codes(said["rooms"], f.rooms)
        described = f.entered | {f.goal_room}
        out["paths"] += 1
        out["on_route_sum"] += len(named & described) / len(named) if named else 0.0
        if f.entered:
            out["entered_sum"] += len(named & f.entered) / len(f.entered)
            out["entered_paths"] += 1
        hit = len(named & described)
        out["f1_sum"] += 2 * hit / (len(named) + len(described)) if named else 0.0
        last = said["rooms"][-1] if said["rooms"] else set()
        out["goal_hits"] += f.goal_room in last
        if f.stop_objects:
            out["stop_hits"] += bool(said["objects"]) and said["objects"][-1] in f.stop_objects
            out["stop_paths"] += 1
        out["turn_hits"] += said["turn"] == f.first_turn
    return out


def from_stats(t: dict[str, float]) -> dict[str, float]:
    """The shares (0-100) and `fidelity` from (summed) `stats`; a share with no eligible path
    is NaN."""

    def pct(hits, n):
        return 100.0 * t[hits] / t[n] if t[n] else float("nan")

    out = {
        "rooms_on_route": pct("on_route_sum", "paths"),
        "entered_named": pct("entered_sum", "entered_paths"),
        "room_f1": pct("f1_sum", "paths"),
        "goal_room": pct("goal_hits", "paths"),
        "stop_object": pct("stop_hits", "stop_paths"),
        "first_turn": pct("turn_hits", "paths"),
    }
    out["fidelity"] = float(np.nanmean([out[k] for k in IN_FIDELITY]))
    return out


def score(items: list[tuple[str, RouteFacts]]) -> dict[str, float]:
    """The five shares (0-100) and their mean over (instruction, facts) pairs."""
    return from_stats(stats(items))
