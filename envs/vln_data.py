"""The R2R/Matterport data formats, read and written by one loader (no flwr).

A VLN data folder has the layout of `../shared/data` (the real release) and of the embedded
houses that `envs.vln_houses` writes, so one `VLNData(folder)` reads both:

    r2r/R2R_<split>.json                  [{distance, scan, path_id, path, heading, instructions}]
    r2r/train_vocab.txt                   optional, one word per line
    connectivity/<scan>_connectivity.json [{image_id, pose (4x4 row-major), included,
                                            visible, unobstructed, height}]
    regions/vp2room_label.json            {label_info, pano_info[scan][viewpoint]{region_label}}
    objects/viewpoint_objects.json        {scan: {viewpoint: [[name, [view indices]], ...]}}

Graph distances are geodesic: networkx Dijkstra over the navigable edges weighted by the
Euclidean distance between the viewpoints' positions, as the R2R evaluation computes them.
"""
from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from pathlib import Path

import networkx as nx
import numpy as np

from envs.errors import DataError

SPLITS = ("train", "val_seen", "val_unseen", "test")


@dataclass(frozen=True)
class Episode:
    """One instruction of one R2R path (R2R's instr_id is `<path_id>_<k>`)."""

    instr_id: str
    scan: str
    path: tuple[str, ...]
    heading: float
    instruction: str
    path_id: int


@dataclass
class Scan:
    """A house's navigation graph over its included viewpoints."""

    name: str
    ids: list[str]
    pos: np.ndarray                      # (n, 3) metres, z up
    graph: nx.Graph                      # node = index into ids, edge weight = metres
    visible: np.ndarray | None = None    # (n, n) bool line of sight, from the file's `visible`
    index: dict[str, int] = field(init=False)
    dist: np.ndarray = field(init=False)      # (n, n) geodesic metres, inf if unreachable
    next_hop: np.ndarray = field(init=False)  # (n, n) next node from i towards j (j if i == j)
    neighbors: list[list[int]] = field(init=False)

    def __post_init__(self):
        n = len(self.ids)
        self.index = {v: i for i, v in enumerate(self.ids)}
        self.dist = np.full((n, n), np.inf)
        self.next_hop = np.tile(np.arange(n), (n, 1))
        for i, (lengths, paths) in nx.all_pairs_dijkstra(self.graph, weight="weight"):
            for j, d in lengths.items():
                self.dist[i, j] = d
                if len(paths[j]) > 1:
                    self.next_hop[i, j] = paths[j][1]
        self.neighbors = [sorted(self.graph.neighbors(i)) for i in range(n)]

    def heading_elevation(self, i: int, j: int) -> tuple[float, float]:
        """Matterport's heading (clockwise from +y, radians) and elevation from i towards j."""
        dx, dy, dz = self.pos[j] - self.pos[i]
        return math.atan2(dx, dy), math.atan2(dz, math.hypot(dx, dy))

    def path_length(self, nodes) -> float:
        """Euclidean length of a walk along consecutive viewpoints (R2R's trajectory length)."""
        p = self.pos[list(nodes)]
        return float(np.linalg.norm(np.diff(p, axis=0), axis=1).sum()) if len(p) > 1 else 0.0


def _load_json(path: Path):
    if not path.is_file():
        raise DataError(f"{path}: file not found")
    try:
        return json.loads(path.read_text())
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        raise DataError(f"{path}: not valid JSON ({e})") from None


def parse_connectivity(name: str, items, source: str = "") -> Scan:
    """A Scan from the entries of `<scan>_connectivity.json` (only `included` viewpoints)."""
    where = source or f"{name}_connectivity.json"
    if not isinstance(items, list) or not items:
        raise DataError(f"{where}: expected a non-empty list of viewpoints")
    try:
        keep = [k for k, it in enumerate(items) if it["included"]]
        ids = [items[k]["image_id"] for k in keep]
        pos = np.array([[items[k]["pose"][3], items[k]["pose"][7], items[k]["pose"][11]]
                        for k in keep], dtype=np.float64)
        g = nx.Graph()
        g.add_nodes_from(range(len(keep)))
        visible = np.array([[bool(items[k].get("visible", items[k]["unobstructed"])[k2])
                             for k2 in keep] for k in keep], dtype=bool).reshape(len(keep), -1)
        for a, k in enumerate(keep):
            unobstructed = items[k]["unobstructed"]
            if len(unobstructed) != len(items):
                raise DataError(f"{where}: viewpoint {ids[a]}: 'unobstructed' has "
                                f"{len(unobstructed)} entries for {len(items)} viewpoints")
            for b, k2 in enumerate(keep):
                if b > a and unobstructed[k2] and items[k2]["unobstructed"][k]:
                    g.add_edge(a, b, weight=float(np.linalg.norm(pos[a] - pos[b])))
    except (KeyError, IndexError, TypeError) as e:
        raise DataError(f"{where}: missing or malformed field {e}") from None
    return Scan(name, ids, pos, g, visible)


def parse_r2r(items, source: str) -> list[Episode]:
    """Episodes (one per instruction) from an R2R task file's list of paths."""
    if not isinstance(items, list):
        raise DataError(f"{source}: expected a list of R2R paths")
    out = []
    for n, it in enumerate(items):
        try:
            for k, text in enumerate(it["instructions"]):
                out.append(Episode(f"{it['path_id']}_{k}", it["scan"], tuple(it["path"]),
                                   float(it["heading"]), text, int(it["path_id"])))
        except (KeyError, TypeError, ValueError) as e:
            raise DataError(f"{source}: path #{n}: missing or malformed field {e}") from None
    return out


class VLNData:
    """Lazy reader of one VLN data folder; graphs are parsed once per scan."""

    def __init__(self, root: str | Path):
        self.root = Path(root)
        if not (self.root / "connectivity").is_dir():
            raise DataError(f"{self.root}: no connectivity/ folder (not a VLN data folder)")
        self._scans: dict[str, Scan] = {}
        self._rooms = self._objects = None

    def episodes(self, split: str) -> list[Episode]:
        path = self.root / "r2r" / f"R2R_{split}.json"
        return parse_r2r(_load_json(path), str(path))

    def scan(self, name: str) -> Scan:
        if name not in self._scans:
            path = self.root / "connectivity" / f"{name}_connectivity.json"
            self._scans[name] = parse_connectivity(name, _load_json(path), str(path))
        return self._scans[name]

    def check_episodes(self, episodes: list[Episode]) -> None:
        """Every path's viewpoints exist in its scan and consecutive ones are graph edges."""
        for ep in episodes:
            s = self.scan(ep.scan)
            for v in ep.path:
                if v not in s.index:
                    raise DataError(f"{self.root}: episode {ep.instr_id}: viewpoint {v} is not "
                                    f"an included viewpoint of scan {ep.scan}")
            for a, b in zip(ep.path, ep.path[1:]):
                if not s.graph.has_edge(s.index[a], s.index[b]):
                    raise DataError(f"{self.root}: episode {ep.instr_id}: {a} -> {b} is not a "
                                    f"navigable edge of scan {ep.scan}")

    @property
    def rooms(self) -> dict:
        """pano_info: scan -> viewpoint -> {region_label, ...}; {} when the file is absent."""
        if self._rooms is None:
            path = self.root / "regions" / "vp2room_label.json"
            self._rooms = _load_json(path).get("pano_info", {}) if path.is_file() else {}
        return self._rooms

    @property
    def objects(self) -> dict:
        """scan -> viewpoint -> [[name, [view indices]], ...]; {} when the file is absent."""
        if self._objects is None:
            path = self.root / "objects" / "viewpoint_objects.json"
            self._objects = _load_json(path) if path.is_file() else {}
        return self._objects

    def vocab_file(self) -> Path | None:
        path = self.root / "r2r" / "train_vocab.txt"
        return path if path.is_file() else None


def connectivity_entries(ids, pos, edges, visible=None, height: float = 1.5) -> list[dict]:
    """`<scan>_connectivity.json` entries for viewpoints at `pos` joined by `edges` (index
    pairs); `visible` (n, n) bool defaults to the navigable edges."""
    n = len(ids)
    adj = np.zeros((n, n), dtype=bool)
    for a, b in edges:
        adj[a, b] = adj[b, a] = True
    vis = adj if visible is None else np.asarray(visible, dtype=bool)
    out = []
    for i in range(n):
        pose = [1.0, 0, 0, float(pos[i][0]), 0, 1.0, 0, float(pos[i][1]), 0, 0, 1.0,
                float(pos[i][2]), 0, 0, 0, 1.0]
        out.append({"image_id": ids[i], "pose": pose, "included": True,
                    "visible": vis[i].tolist(), "unobstructed": adj[i].tolist(),
                    "height": height})
    return out


def r2r_entry(scan: Scan, path_id: int, path: list[int], heading: float,
              instructions: list[str]) -> dict:
    """One R2R task-file item; `distance` is the path's geodesic length, as R2R stores it."""
    return {"distance": round(float(scan.dist[path[0], path[-1]]), 2), "scan": scan.name,
            "path_id": path_id, "path": [scan.ids[i] for i in path],
            "heading": round(heading, 3), "instructions": instructions}
