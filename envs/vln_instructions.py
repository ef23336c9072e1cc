"""A grammar that writes R2R-like navigation instructions for a path in a house (no flwr).

The path is first described as facts read off the house: the turn before each move (from the
viewpoints' positions and the start heading), the rooms entered, an object passed on the way
and what is next to the goal. Each of the three instructions of a path then renders those facts
with its own choices: how much it says (every turn, only the rooms, or landmarks first), verbs,
turn phrases, room synonyms, stop phrases, sentence joins and capitalisation. The wording
pools are written from the phrasing of real R2R instructions ("walk past the ...", "turn left
into the kitchen", "stop in the doorway", "wait by the ...").
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

# Room names as instructions say them, per Matterport region code.
ROOM_WORDS = {
    "a": ["bathroom", "restroom"],
    "b": ["bedroom", "bed room"],
    "c": ["closet"],
    "d": ["dining room", "dining area"],
    "e": ["entryway", "foyer", "entrance"],
    "f": ["family room", "den"],
    "g": ["garage"],
    "h": ["hallway", "hall", "corridor"],
    "j": ["laundry room"],
    "k": ["kitchen"],
    "l": ["living room", "lounge"],
    "o": ["office", "study"],
    "p": ["porch", "deck"],
    "t": ["toilet", "half bath"],
    "n": ["lounge", "sitting area"],
    "w": ["gym", "workout room"],
}

WALK = ["walk", "go", "head", "move", "continue"]
ENTER = [
    "enter the {r}",
    "go into the {r}",
    "walk into the {r}",
    "step into the {r}",
    "head into the {r}",
    "go through the doorway into the {r}",
]
PASS = [
    "walk past the {o}",
    "go past the {o}",
    "pass the {o}",
    "walk by the {o}",
    "keep the {o} on your {side}",
]
STOP = [
    "stop next to the {o}",
    "wait by the {o}",
    "stop in front of the {o}",
    "stop when you reach the {o}",
    "stand near the {o}",
]
STOP_ROOM = [
    "stop in the {r}",
    "wait in the {r}",
    "stop once you are in the {r}",
    "stop just inside the {r}",
]
STOP_PLAIN = ["stop there", "and stop", "wait there", "stop"]
JOIN = [". ", ", then ", " and ", ". Then ", ", "]


def turn_phrase(delta: float, rng: np.random.Generator) -> str:
    """Words for a change of heading (radians, positive = clockwise = right)."""
    deg = math.degrees(delta)
    if abs(deg) < 35:
        return str(
            rng.choice(
                ["go straight", "walk forward", "continue straight ahead", "keep going forward"]
            )
        )
    side = "right" if deg > 0 else "left"
    if abs(deg) > 145:
        return str(rng.choice(["turn around", "turn around", "make a u-turn"]))
    if abs(deg) > 100:
        return str(
            rng.choice([f"turn sharply {side}", f"make a sharp {side}", f"turn hard {side}"])
        )
    if abs(deg) < 60:
        return str(rng.choice([f"bear {side}", f"veer slightly {side}", f"go slightly {side}"]))
    return str(
        rng.choice(
            [
                f"turn {side}",
                f"make a {side}",
                f"take a {side}",
                f"turn to your {side}",
                f"go {side}",
            ]
        )
    )


def _wrap(a: float) -> float:
    return (a + math.pi) % (2 * math.pi) - math.pi


@dataclass
class Step:
    turn: float  # heading change before this move (radians)
    new_room: str | None  # room code entered by this move, if it changes room
    passed: str | None  # an object near the move's end, in the room being walked through
    passed_side: str


def describe(pos, path, heading, room_of, objects_near) -> tuple[list[Step], str, str | None]:
    """The facts of a path: one Step per move, the goal's room code and the object closest to
    the goal (or None). `room_of(node)` gives a room code; `objects_near(node)` gives
    [(name, xyz)] within reach of that node."""
    steps, h_prev = [], heading
    for a, b in zip(path, path[1:]):
        dx, dy = pos[b][0] - pos[a][0], pos[b][1] - pos[a][1]
        h = math.atan2(dx, dy)
        near = objects_near(b)
        passed, side = None, "left"
        if near:
            name, xyz = min(near, key=lambda o: math.dist(o[1][:2], pos[b][:2]))
            passed = name
            cross = dx * (xyz[1] - pos[a][1]) - dy * (xyz[0] - pos[a][0])
            side = "left" if cross > 0 else "right"
        new_room = room_of(b) if room_of(b) != room_of(a) else None
        steps.append(Step(_wrap(h - h_prev), new_room, passed, side))
        h_prev = h
    goal = path[-1]
    near = objects_near(goal)
    goal_obj = min(near, key=lambda o: math.dist(o[1][:2], pos[goal][:2]))[0] if near else None
    return steps, room_of(goal), goal_obj


def render(
    steps: list[Step], goal_room: str, goal_obj: str | None, rng: np.random.Generator, style: int
) -> str:
    """One instruction. style 0: every turn and room; 1: rooms and the goal only;
    2: landmarks first, turns where they are large."""
    room = {
        code: str(rng.choice(ROOM_WORDS.get(code, ["room"])))
        # sorted: a set of strings iterates in a per-process order (hash randomisation), and
        # each room's word draw would move with it (issue 63: the engines disagreed)
        for code in sorted({s.new_room for s in steps if s.new_room} | {goal_room})
    }
    clauses = []
    for k, s in enumerate(steps):
        big_turn = abs(math.degrees(s.turn)) >= 60
        if style == 0 and (k == 0 or abs(math.degrees(s.turn)) >= 35):
            clauses.append(turn_phrase(s.turn, rng))
        elif style == 2 and big_turn:
            clauses.append(turn_phrase(s.turn, rng))
        elif style == 1 and k == 0 and big_turn:
            clauses.append(turn_phrase(s.turn, rng))
        if s.new_room:
            clauses.append(str(rng.choice(ENTER)).format(r=room[s.new_room]))
        elif s.passed and style != 1 and rng.random() < (0.7 if style == 2 else 0.35):
            clauses.append(str(rng.choice(PASS)).format(o=s.passed, side=s.passed_side))
    if not clauses or (style == 1 and len(clauses) < 2):
        clauses.insert(0, f"{rng.choice(WALK)} forward")
    clauses = _dedupe(clauses)
    if goal_obj and rng.random() < 0.8:
        end = str(rng.choice(STOP)).format(o=goal_obj)
    elif rng.random() < 0.6:
        end = str(rng.choice(STOP_ROOM)).format(r=room[goal_room])
    else:
        end = str(rng.choice(STOP_PLAIN))
    text = ""
    for k, c in enumerate(clauses + [end]):
        if k == 0:
            text = c[0].upper() + c[1:]
        elif c.startswith("and "):
            text += " " + c
        else:
            sep = str(rng.choice(JOIN))
            text += sep + (c[0].upper() + c[1:] if sep.endswith(". ") else c)
    return text + "." + (" " if rng.random() < 0.5 else "")


def _dedupe(clauses: list[str]) -> list[str]:
    return [c for k, c in enumerate(clauses) if k == 0 or c != clauses[k - 1]]


def instructions_for(pos, path, heading, room_of, objects_near, rng, n: int = 3) -> list[str]:
    """n instructions for one path, each in a different style where n <= 3."""
    steps, goal_room, goal_obj = describe(pos, path, heading, room_of, objects_near)
    styles = rng.permutation(3)
    return [render(steps, goal_room, goal_obj, rng, int(styles[k % 3])) for k in range(n)]
