"""Embedded houses: procedural homes written in the real R2R/Matterport formats (no flwr).

A house is a grid of typed rooms (kitchen, bedrooms, bathrooms, hallway, ...) of 3.5-6.5 m,
joined by doors along a random spanning tree plus a few extra doors. Viewpoints sit on a
jittered ~2.2 m grid inside each room (R2R's graphs average 2.25 m per edge); neighbours within
a room and the two viewpoints closest to each door are navigable. Each room holds objects
typical of its type, named in the house's style (a "rustic" house has a "wooden table" where a
"modern" one has a "glass table"), so unseen houses look different, not just laid out
differently. Episodes are R2R-like: shortest paths of 4-7 edges and at least 5 m, a random
start heading, three instructions from `envs.vln_instructions`.

`write_dataset` writes `r2r/`, `connectivity/`, `regions/` and `objects/` exactly as the real
release lays them out, and `embedded_dataset` caches that folder so every client of a run reads
the same files through `envs.vln_data.VLNData`.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path

import networkx as nx
import numpy as np

from envs.vln_data import Scan, connectivity_entries, r2r_entry
from envs.vln_features import view_index
from envs.vln_instructions import instructions_for
from envs.vln_routes import sample_path

CAMERA_Z = 1.5
SPACING = 2.2
# Object kinds per room code: (name, height in metres: floor furniture ~0.5, wall ~1.6,
# ceiling ~2.6). Style words are prefixed to some of them per house.
ROOM_OBJECTS = {
    "k": [
        ("refrigerator", 0.9),
        ("stove", 0.5),
        ("sink", 0.9),
        ("counter", 0.9),
        ("oven", 0.5),
        ("microwave", 1.3),
        ("kitchen island", 0.9),
        ("cabinet", 1.6),
    ],
    "b": [
        ("bed", 0.5),
        ("dresser", 0.8),
        ("nightstand", 0.5),
        ("lamp", 1.0),
        ("wardrobe", 1.2),
        ("mirror", 1.6),
        ("painting", 1.7),
    ],
    "a": [
        ("toilet", 0.4),
        ("sink", 0.9),
        ("bathtub", 0.5),
        ("shower", 1.2),
        ("mirror", 1.6),
        ("towel", 1.2),
    ],
    "l": [
        ("sofa", 0.5),
        ("tv", 1.4),
        ("coffee table", 0.4),
        ("fireplace", 0.8),
        ("armchair", 0.5),
        ("rug", 0.0),
        ("plant", 0.6),
        ("bookshelf", 1.2),
    ],
    "d": [
        ("dining table", 0.7),
        ("chairs", 0.5),
        ("chandelier", 2.6),
        ("sideboard", 0.8),
        ("vase", 1.0),
    ],
    "o": [
        ("desk", 0.7),
        ("office chair", 0.5),
        ("bookshelf", 1.2),
        ("computer", 1.0),
        ("lamp", 1.0),
    ],
    "h": [("picture", 1.7), ("rug", 0.0), ("plant", 0.6), ("bench", 0.4), ("door", 1.0)],
    "e": [
        ("front door", 1.0),
        ("coat rack", 1.3),
        ("bench", 0.4),
        ("mirror", 1.6),
        ("shoe rack", 0.3),
    ],
    "f": [("sofa", 0.5), ("tv", 1.4), ("ottoman", 0.4), ("rug", 0.0), ("pool table", 0.8)],
    "j": [("washing machine", 0.5), ("dryer", 0.5), ("sink", 0.9), ("shelf", 1.4)],
    "c": [("shelves", 1.2), ("clothes", 1.2), ("boxes", 0.3)],
}
STYLES = {
    "modern": {"table": "glass", "sofa": "white", "chair": "black", "lamp": "floor"},
    "rustic": {"table": "wooden", "sofa": "brown", "chair": "wooden", "bench": "wooden"},
    "classic": {"table": "marble", "sofa": "leather", "lamp": "brass", "painting": "framed"},
    "cozy": {"sofa": "blue", "rug": "round", "chair": "red", "bed": "large"},
}
OPTIONAL_ROOMS = ["d", "o", "h", "e", "f", "j", "c", "b", "a"]


@dataclass
class House:
    scan: Scan
    room_of: list[str]  # room code per viewpoint
    room_id: list[int]  # room index per viewpoint
    objects: list[tuple[str, np.ndarray, int]]  # (name, xyz, room index)
    visible: np.ndarray  # (n, n) bool, same room or joined by a door

    def objects_near(self, node: int, reach: float = 3.0):
        p = self.scan.pos[node]
        return [
            (name, xyz)
            for name, xyz, r in self.objects
            if r == self.room_id[node] and math.dist(xyz[:2], p[:2]) <= reach
        ]

    def object_views(self, node: int) -> list:
        """viewpoint_objects.json entry: objects within 3 m and the 36-view indices
        (elevation row -30/0/+30 deg x 12 headings of 30 deg) they appear in."""
        out = []
        p = self.scan.pos[node]
        for name, xyz in self.objects_near(node):
            d = xyz - p
            h = math.atan2(d[0], d[1])
            e = math.atan2(d[2], max(math.hypot(d[0], d[1]), 1e-6))
            out.append([name, [view_index(h, e)]])
        return out


def _style_name(name: str, style: dict) -> str:
    for key, adj in style.items():
        if name.endswith(key):
            return f"{adj} {name}"
    return name


def generate_house(name: str, rng: np.random.Generator) -> House:
    rows, cols = int(rng.integers(2, 4)), int(rng.integers(3, 5))
    widths = rng.uniform(3.5, 6.5, cols)
    heights = rng.uniform(3.5, 6.5, rows)
    x0 = np.concatenate([[0], np.cumsum(widths)])
    y0 = np.concatenate([[0], np.cumsum(heights)])
    n_rooms = rows * cols
    types = ["k", "l", "b", "a"] + list(rng.choice(OPTIONAL_ROOMS, n_rooms - 4))
    rng.shuffle(types)
    style = STYLES[str(rng.choice(list(STYLES)))]

    # Doors: a random spanning tree of the room grid plus ~30% of the other walls.
    grid = nx.grid_2d_graph(rows, cols)
    for e in grid.edges:
        grid.edges[e]["w"] = rng.random()
    tree = nx.minimum_spanning_tree(grid, weight="w")
    doors = list(tree.edges) + [
        e for e in grid.edges if not tree.has_edge(*e) and rng.random() < 0.3
    ]

    ids, pos, room_of, room_id, objects = [], [], [], [], []
    cell = {}
    for r in range(rows):
        for c in range(cols):
            k = r * cols + c
            cell[(r, c)] = k
            w, h = widths[c], heights[r]
            nx_, ny_ = max(1, round(w / SPACING)), max(1, round(h / SPACING))
            for i in range(nx_):
                for j in range(ny_):
                    x = x0[c] + (i + 0.5) * w / nx_ + rng.uniform(-0.3, 0.3)
                    y = y0[r] + (j + 0.5) * h / ny_ + rng.uniform(-0.3, 0.3)
                    ids.append(hashlib.md5(f"{name}/{len(ids)}".encode()).hexdigest())
                    pos.append([x, y, CAMERA_Z])
                    room_of.append(types[k])
                    room_id.append(k)
            kinds = ROOM_OBJECTS[types[k]]
            for m in rng.choice(
                len(kinds), min(len(kinds), int(rng.integers(3, 6))), replace=False
            ):
                obj, z = kinds[m]
                along_x = rng.random() < 0.5
                x = x0[c] + (rng.uniform(0.4, w - 0.4) if along_x else rng.choice([0.3, w - 0.3]))
                y = y0[r] + (rng.choice([0.3, h - 0.3]) if along_x else rng.uniform(0.4, h - 0.4))
                objects.append((_style_name(obj, style), np.array([x, y, z]), k))
    pos = np.array(pos)
    room_id_arr = np.array(room_id)

    edges = set()
    for a in range(len(ids)):
        for b in range(a + 1, len(ids)):
            if room_id[a] == room_id[b] and np.linalg.norm(pos[a] - pos[b]) < 1.5 * SPACING:
                edges.add((a, b))
    for (r1, c1), (r2, c2) in doors:
        k1, k2 = cell[(r1, c1)], cell[(r2, c2)]
        if r1 == r2:  # vertical wall at x = x0[max(c)]
            door = np.array(
                [x0[max(c1, c2)], y0[r1] + rng.uniform(0.3, 0.7) * heights[r1], CAMERA_Z]
            )
        else:
            door = np.array(
                [x0[c1] + rng.uniform(0.3, 0.7) * widths[c1], y0[max(r1, r2)], CAMERA_Z]
            )
        a = min(np.flatnonzero(room_id_arr == k1), key=lambda i: np.linalg.norm(pos[i] - door))
        b = min(np.flatnonzero(room_id_arr == k2), key=lambda i: np.linalg.norm(pos[i] - door))
        edges.add((min(a, b), max(a, b)))

    g = nx.Graph()
    g.add_nodes_from(range(len(ids)))
    for a, b in edges:
        g.add_edge(a, b, weight=float(np.linalg.norm(pos[a] - pos[b])))
    visible = room_id_arr[:, None] == room_id_arr[None, :]
    for a, b in edges:
        visible[a, b] = visible[b, a] = True
    np.fill_diagonal(visible, False)
    return House(Scan(name, ids, pos, g), room_of, room_id, objects, visible)


# bumped whenever the generated houses or words change, so no machine reads an older cache: 2,
# the room words are drawn in a fixed order (they followed Python's per-process set order, so
# two machines generated other instructions; issue 63)
GENERATOR = 3  # 3: no val_seen path is a train path of its house, either way (issue 64)


@dataclass(frozen=True)
class HouseSpec:
    """How many houses and paths to generate; the seed makes the whole set reproducible."""

    train_houses: int = 12
    unseen_houses: int = 4
    train_paths: int = 40
    val_seen_paths: int = 10
    val_unseen_paths: int = 30
    seed: int = 0

    def key(self) -> str:
        """The cache folder's name: the spec and the generator's version (a cache written by
        another version of the generator is not read back)."""
        named = {**self.__dict__, "generator": GENERATOR}
        return hashlib.md5(json.dumps(named, sort_keys=True).encode()).hexdigest()[:10]


def _generate_houses(spec: HouseSpec, rng: np.random.Generator) -> list[House]:
    return [
        generate_house(f"house{k:03d}", rng) for k in range(spec.train_houses + spec.unseen_houses)
    ]


def houses_of(spec: HouseSpec) -> dict[str, House]:
    """{scan name: House} exactly as `write_dataset(spec)` generated them (the houses are drawn
    first from the spec's seed), with what the data folder does not keep (object positions): the
    house grammar needs them to describe a new route as the dataset's instructions do."""
    houses = _generate_houses(spec, np.random.default_rng(spec.seed))
    return {h.scan.name: h for h in houses}


def grammar_instruction(house: House, path: list[int], heading: float, rng) -> str:
    """One instruction of the houses' own grammar for a route (node indices): what a perfect
    speaker writes."""
    return instructions_for(
        house.scan.pos, path, heading, lambda v: house.room_of[v], house.objects_near, rng, n=1
    )[0]


def _fresh_path(scan, rng, taken: set, tries: int = 50) -> list[int] | None:
    """A sampled path that is not in `taken`. R2R's val_seen shares no path with train (its
    paths are new routes in the same houses); drawn independently, 6 of our 120 val_seen paths
    were a train path and 9 one reversed (issue 64), so val_seen scored memory, not
    navigation."""
    for _ in range(tries):
        path = sample_path(scan, rng)
        if path is None or tuple(path) not in taken:
            return path
    return None


def write_dataset(spec: HouseSpec, root: Path) -> Path:
    """Generate every house and episode of `spec` and write them in the R2R/Matterport layout."""
    rng = np.random.default_rng(spec.seed)
    houses = _generate_houses(spec, rng)
    splits = {"train": [], "val_seen": [], "val_unseen": []}
    path_id = 0
    for k, house in enumerate(houses):
        seen = k < spec.train_houses
        plan = (
            [("train", spec.train_paths), ("val_seen", spec.val_seen_paths)]
            if seen
            else [("val_unseen", spec.val_unseen_paths)]
        )
        trained = set()  # this house's train paths, both ways
        for split, count in plan:
            for _ in range(count):
                path = _fresh_path(house.scan, rng, trained if split == "val_seen" else set())
                if path is None:
                    break
                if split == "train":
                    trained |= {tuple(path), tuple(path[::-1])}
                heading = float(rng.uniform(0, 2 * math.pi))
                instr = instructions_for(
                    house.scan.pos,
                    path,
                    heading,
                    lambda v, h=house: h.room_of[v],
                    house.objects_near,
                    rng,
                )
                splits[split].append(r2r_entry(house.scan, path_id, path, heading, instr))
                path_id += 1
    for sub in ("r2r", "connectivity", "regions", "objects"):
        (root / sub).mkdir(parents=True, exist_ok=True)
    for split, items in splits.items():
        (root / "r2r" / f"R2R_{split}.json").write_text(json.dumps(items))
    pano, objs = {}, {}
    for house in houses:
        s = house.scan
        edges = list(s.graph.edges)
        entries = connectivity_entries(s.ids, s.pos, edges, house.visible)
        (root / "connectivity" / f"{s.name}_connectivity.json").write_text(json.dumps(entries))
        pano[s.name] = {
            v: {"region_label": house.room_of[i], "position": [str(x) for x in s.pos[i]]}
            for i, v in enumerate(s.ids)
        }
        objs[s.name] = {v: house.object_views(i) for i, v in enumerate(s.ids)}
    (root / "regions" / "vp2room_label.json").write_text(json.dumps({"pano_info": pano}))
    (root / "objects" / "viewpoint_objects.json").write_text(json.dumps(objs))
    (root / "connectivity" / "scans.txt").write_text("\n".join(h.scan.name for h in houses))
    return root


def embedded_dataset(spec: HouseSpec = HouseSpec(), cache: str | Path | None = None) -> Path:
    """The folder of `spec`'s houses, generated once and then reused. Several clients may ask
    at the same time: each writes a private temporary folder and renames it into place."""
    base = Path(
        cache or os.environ.get("FEDEMBODIED_CACHE", Path.home() / ".cache" / "fedembodied")
    )
    root = base / f"vln-houses-{spec.key()}"
    if (root / "r2r" / "R2R_val_unseen.json").is_file():
        return root
    base.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(dir=base, prefix=".tmp-"))
    write_dataset(spec, tmp)
    try:
        tmp.rename(root)
    except OSError:  # another process got there first
        shutil.rmtree(tmp, ignore_errors=True)
    return root
