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

from envs.errors import DataError, missing

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
    pos: np.ndarray  # (n, 3) metres, z up
    graph: nx.Graph  # node = index into ids, edge weight = metres
    visible: np.ndarray | None = None  # (n, n) bool line of sight, from the file's `visible`
    index: dict[str, int] = field(init=False)
    dist: np.ndarray = field(init=False)  # (n, n) geodesic metres, inf if unreachable
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
        return json.loads(path.read_text(encoding="utf-8"))
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        raise DataError(f"{path}: not valid JSON ({e})") from None
    except RecursionError:
        raise DataError(f"{path}: JSON nested too deeply to be a VLN data file") from None


def parse_connectivity(name: str, items, source: str = "") -> Scan:
    """A Scan from the entries of `<scan>_connectivity.json` (only `included` viewpoints)."""
    where = source or f"{name}_connectivity.json"
    if not isinstance(items, list) or not items:
        raise DataError(f"{where}: expected a non-empty list of viewpoints")
    for k, it in enumerate(items):
        _check_viewpoint(where, k, it, len(items))
    keep = [k for k, it in enumerate(items) if it["included"]]
    ids = [items[k]["image_id"] for k in keep]
    pos = np.array(
        [[items[k]["pose"][3], items[k]["pose"][7], items[k]["pose"][11]] for k in keep],
        dtype=np.float64,
    ).reshape(len(keep), 3)
    g = nx.Graph()
    g.add_nodes_from(range(len(keep)))
    visible = np.array(
        [
            [bool(items[k].get("visible", items[k]["unobstructed"])[k2]) for k2 in keep]
            for k in keep
        ],
        dtype=bool,
    ).reshape(len(keep), -1)
    for a, k in enumerate(keep):
        for b, k2 in enumerate(keep):
            if b > a and items[k]["unobstructed"][k2] and items[k2]["unobstructed"][k]:
                g.add_edge(a, b, weight=float(np.linalg.norm(pos[a] - pos[b])))
    return Scan(name, ids, pos, g, visible)


def _check_viewpoint(where: str, k: int, it, n: int) -> None:
    """One connectivity entry has the Matterport simulator's fields and types."""
    if not isinstance(it, dict):
        raise DataError(f"{where}: entry {k} is not an object")
    vp = it.get("image_id")
    if not isinstance(vp, str) or not vp:
        raise DataError(f"{where}: entry {k}: field 'image_id' must be a viewpoint id string")
    if not isinstance(it.get("included"), bool):
        raise DataError(f"{where}: viewpoint {vp}: field 'included' must be true or false")
    pose = it.get("pose")
    if not (
        isinstance(pose, list)
        and len(pose) == 16
        and all(
            isinstance(x, (int, float)) and not isinstance(x, bool) and np.isfinite(x) for x in pose
        )
    ):
        raise DataError(f"{where}: viewpoint {vp}: field 'pose' must be 16 finite numbers")
    h = it.get("height", 0.0)  # the camera's height; absent in some releases
    if isinstance(h, bool) or not isinstance(h, (int, float)) or not np.isfinite(h):
        raise DataError(f"{where}: viewpoint {vp}: field 'height' must be a finite number")
    for key in ("unobstructed", "visible"):
        if key == "visible" and key not in it:
            continue
        v = it.get(key)
        if not (isinstance(v, list) and len(v) == n and all(isinstance(x, bool) for x in v)):
            raise DataError(
                f"{where}: viewpoint {vp}: field {key!r} must be {n} booleans (one per viewpoint)"
            )


def parse_r2r(items, source: str) -> list[Episode]:
    """Episodes (one per instruction) from an R2R task file's list of paths."""
    if not isinstance(items, list):
        raise DataError(f"{source}: expected a list of R2R paths")
    out, ids = [], {}
    for n, it in enumerate(items):
        where = f"{source}: path #{n}"
        if not isinstance(it, dict):
            raise DataError(f"{where}: not an object")
        texts, path = it.get("instructions"), it.get("path")
        if not (
            isinstance(texts, list)
            and texts
            and all(isinstance(t, str) and t.strip() for t in texts)
        ):
            raise DataError(
                f"{where}: field 'instructions' must be a non-empty list of non-empty strings"
            )
        if not (isinstance(path, list) and path and all(isinstance(v, str) for v in path)):
            raise DataError(f"{where}: field 'path' must be a non-empty list of viewpoint ids")
        if not isinstance(it.get("scan"), str):
            raise DataError(f"{where}: field 'scan' must be a scan id string")
        try:
            heading, path_id = float(it["heading"]), int(it["path_id"])
        except (KeyError, TypeError, ValueError) as e:
            raise DataError(f"{where}: missing or malformed field {e}") from None
        if not np.isfinite(heading):
            raise DataError(f"{where}: field 'heading' is not finite")
        if path_id in ids:  # its instructions would be scored against the other path's
            raise DataError(
                f"{where}: field 'path_id' {path_id} is also path #{ids[path_id]}'s; "
                "path ids must be unique"
            )
        ids[path_id] = n
        for k, text in enumerate(texts):
            out.append(Episode(f"{path_id}_{k}", it["scan"], tuple(path), heading, text, path_id))
    return out


class VLNData:
    """Lazy reader of one VLN data folder; graphs are parsed once per scan."""

    def __init__(self, root: str | Path):
        self.root = Path(root)
        if not self.root.is_dir():
            raise missing(self.root, "folder")
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

    def check_episodes(self, episodes: list[Episode], source: str = "") -> None:
        """Every path's viewpoints exist in its scan and consecutive ones are graph edges."""
        where = source or str(self.root)
        for ep in episodes:
            try:
                s = self.scan(ep.scan)
            except DataError as e:
                raise DataError(f"{where}: episode {ep.instr_id}: scan {ep.scan}: {e}") from None
            for v in ep.path:
                if v not in s.index:
                    raise DataError(
                        f"{where}: episode {ep.instr_id}: viewpoint {v} is not "
                        f"an included viewpoint of scan {ep.scan}"
                    )
            for a, b in zip(ep.path, ep.path[1:]):
                if not s.graph.has_edge(s.index[a], s.index[b]):
                    raise DataError(
                        f"{where}: episode {ep.instr_id}: {a} -> {b} is not a "
                        f"navigable edge of scan {ep.scan}"
                    )

    def validate(self) -> None:
        """Read, up front, every file a run on this folder will read: the three splits (none
        empty), the graph of every scan they use with every path a walk on
        it, and the optional regions and objects files (DataError naming the file if not)."""
        for sp in ("train", "val_seen", "val_unseen"):
            path = self.root / "r2r" / f"R2R_{sp}.json"
            eps = self.episodes(sp)
            if not eps:
                raise DataError(f"{path}: no paths")
            self.check_episodes(eps, str(path))
        where = self.root / "regions" / "vp2room_label.json"
        if not isinstance(self.rooms, dict) or not all(
            isinstance(vps, dict) and all(isinstance(r, dict) for r in vps.values())
            for vps in self.rooms.values()
        ):
            raise DataError(f"{where}: 'pano_info' must map scan -> viewpoint -> object")
        where = self.root / "objects" / "viewpoint_objects.json"
        if not isinstance(self.objects, dict):
            raise DataError(f"{where}: must map scan -> viewpoint -> [[name, [views]]]")
        for vps in self.objects.values():
            ok = isinstance(vps, dict) and all(
                isinstance(objs, list)
                and all(
                    isinstance(o, list)
                    and len(o) == 2
                    and isinstance(o[0], str)
                    and isinstance(o[1], list)
                    and all(isinstance(v, int) and 0 <= v < 36 for v in o[1])
                    for o in objs
                )
                for objs in vps.values()
            )
            if not ok:
                raise DataError(f"{where}: must map scan -> viewpoint -> [[name, [views 0-35]]]")

    @property
    def rooms(self) -> dict:
        """pano_info: scan -> viewpoint -> {region_label, ...}; {} when the file is absent."""
        if self._rooms is None:
            path = self.root / "regions" / "vp2room_label.json"
            data = _load_json(path) if path.is_file() else {}
            self._rooms = data.get("pano_info", {}) if isinstance(data, dict) else None
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
        pose = [
            1.0,
            0,
            0,
            float(pos[i][0]),
            0,
            1.0,
            0,
            float(pos[i][1]),
            0,
            0,
            1.0,
            float(pos[i][2]),
            0,
            0,
            0,
            1.0,
        ]
        out.append(
            {
                "image_id": ids[i],
                "pose": pose,
                "included": True,
                "visible": vis[i].tolist(),
                "unobstructed": adj[i].tolist(),
                "height": height,
            }
        )
    return out


def r2r_entry(
    scan: Scan, path_id: int, path: list[int], heading: float, instructions: list[str]
) -> dict:
    """One R2R task-file item; `distance` is the path's geodesic length, as R2R stores it."""
    return {
        "distance": round(float(scan.dist[path[0], path[-1]]), 2),
        "scan": scan.name,
        "path_id": path_id,
        "path": [scan.ids[i] for i in path],
        "heading": round(heading, 3),
        "instructions": instructions,
    }
