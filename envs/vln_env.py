"""A batched graph navigation environment over R2R episodes (no flwr).

State per episode: (viewpoint, heading); elevation is 0 after every move, as Matterport's
panoramic action space leaves it. The actions are STOP (always candidate 0, a zero feature, as
Envdrop's "end" candidate) or one of the navigable neighbours (candidates 1..k in a fixed
order), whose relative heading/elevation come from the viewpoints' positions. Moving sets the
heading to the direction of the move. An episode ends at STOP or after `max_actions` moves.

A candidate's feature is the view feature of the absolute view it lies in plus the angle
feature of its relative direction; the panorama is the 36 view features plus each view's angle
feature relative to the agent's heading (Envdrop's `pano` and `candidate` features).
"""

from __future__ import annotations

import math

import numpy as np

from envs.errors import DataError
from envs.vln_appearance import APPEARANCE_DIM, appearance
from envs.vln_data import Episode, Scan, VLNData
from envs.vln_features import (
    ANGLE_DIM,
    VIEW_DIM,
    VIEW_ELEVATION,
    VIEW_HEADING,
    angle_feature,
    read_tsv,
    semantic_features,
    view_index,
    view_rooms,
)


class World:
    """Graphs and per-view features of the scans of one data folder, computed once each."""

    def __init__(self, data: VLNData, features_tsv: str = "", appearance: float = 0.0):
        """`appearance` > 0: each house's own look appended to the semantic view features
        (envs/vln_appearance.py); image features (`features_tsv`) have their own."""
        if appearance and features_tsv:
            raise ValueError(f"{features_tsv}: image features take no added appearance")
        self.data = data
        self.appearance = appearance
        self._tsv = read_tsv(features_tsv) if features_tsv else None
        self._feats: dict[str, np.ndarray] = {}
        self._moves: dict[tuple[str, int], tuple] = {}

    def scan(self, name: str) -> Scan:
        return self.data.scan(name)

    def features(self, name: str) -> np.ndarray:
        """(n_viewpoints, 36, D) view features of a scan, in Scan order."""
        if name not in self._feats:
            scan = self.scan(name)
            if self._tsv is None:
                feats = semantic_features(self.data, name)
                if self.appearance:
                    rooms = view_rooms(self.data, name)
                    look = appearance(name, scan.ids, rooms, self.appearance)
                    feats = np.concatenate([feats, look], axis=-1)
                self._feats[name] = feats
            else:
                missing = [v for v in scan.ids if (name, v) not in self._tsv]
                if missing:
                    raise DataError(
                        f"feature file has no entry for scan {name} viewpoint "
                        f"{missing[0]} ({len(missing)} missing)"
                    )
                self._feats[name] = np.stack([self._tsv[(name, v)] for v in scan.ids])
        return self._feats[name]

    def moves(self, name: str, node: int):
        """(neighbours, absolute headings, elevations, absolute view indices) of a viewpoint."""
        key = (name, node)
        if key not in self._moves:
            scan = self.scan(name)
            nbrs = scan.neighbors[node]
            he = [scan.heading_elevation(node, j) for j in nbrs]
            heads = np.array([h for h, _ in he], dtype=np.float64)
            elevs = np.array([e for _, e in he], dtype=np.float64)
            views = np.array([view_index(h, e) for h, e in he], dtype=np.int64)
            self._moves[key] = (nbrs, heads, elevs, views)
        return self._moves[key]

    @property
    def feature_dim(self) -> int:
        if self._tsv is not None:
            return next(iter(self._tsv.values())).shape[1] + ANGLE_DIM
        return VIEW_DIM + APPEARANCE_DIM * bool(self.appearance) + ANGLE_DIM


def _wrap(a):
    return (np.asarray(a) + math.pi) % (2 * math.pi) - math.pi


def pano_features(world: World, scan: str, node: int, heading: float) -> np.ndarray:
    """(36, D + 128): every view's feature and its direction relative to the heading."""
    feats = world.features(scan)[node]
    return np.concatenate(
        [feats, angle_feature(_wrap(VIEW_HEADING - heading), VIEW_ELEVATION)], axis=1
    )


def candidates(world: World, scan_name: str, node: int, heading: float):
    """(neighbour nodes, their absolute headings, (k, D + 128) candidate features)."""
    nbrs, heads, elevs, views = world.moves(scan_name, node)
    feats = world.features(scan_name)[node][views]
    return nbrs, heads, np.concatenate([feats, angle_feature(_wrap(heads - heading), elevs)], 1)


def path_steps(world: World, scan_name: str, path: list[int], heading: float):
    """What a speaker reads along a path: per viewpoint, the panorama and the feature of the
    action taken there (the move to the next viewpoint; a zero STOP feature at the end)."""
    panos, actions = [], []
    for t, node in enumerate(path):
        panos.append(pano_features(world, scan_name, node, heading))
        if t + 1 < len(path):
            nbrs, heads, cand = candidates(world, scan_name, node, heading)
            k = nbrs.index(path[t + 1])
            actions.append(cand[k])
            heading = heads[k]
        else:
            actions.append(np.zeros(panos[-1].shape[1], dtype=np.float32))
    return np.stack(panos), np.stack(actions)


class NavBatch:
    """B episodes navigated in lock-step."""

    def __init__(self, world: World, episodes: list[Episode], max_actions: int = 35):
        self.world, self.episodes, self.max_actions = world, episodes, max_actions
        self.scans = [world.scan(e.scan) for e in episodes]
        try:
            self.refs = [[s.index[v] for v in e.path] for s, e in zip(self.scans, episodes)]
        except KeyError as err:
            raise DataError(f"episode viewpoint {err} is not in its scan") from None
        self.node = np.array([r[0] for r in self.refs])
        self.heading = np.array([e.heading for e in episodes], dtype=np.float64)
        self.done = np.zeros(len(episodes), dtype=bool)
        self.stopped = np.zeros(len(episodes), dtype=bool)  # ended by STOP, not by the limit
        self.steps = 0
        self.trajs = [[int(n)] for n in self.node]
        self._observe()

    def _observe(self):
        B = len(self.episodes)
        moves = [self.world.moves(e.scan, int(n)) for e, n in zip(self.episodes, self.node)]
        self.cands = [(m[0], m[1]) for m in moves]
        kmax = 1 + max(len(m[0]) for m in moves)
        feats = [self.world.features(e.scan)[int(n)] for e, n in zip(self.episodes, self.node)]
        vdim = feats[0].shape[1]
        self.cand_feat = np.zeros((B, kmax, vdim + ANGLE_DIM), dtype=np.float32)
        self.cand_mask = np.zeros((B, kmax), dtype=bool)
        self.cand_mask[:, 0] = True
        rel_h = np.concatenate([_wrap(m[1] - h) for m, h in zip(moves, self.heading)])
        angles = angle_feature(rel_h, np.concatenate([m[2] for m in moves]))
        k = 0
        for b, (nbrs, _, _, views) in enumerate(moves):
            n = len(nbrs)
            self.cand_feat[b, 1 : 1 + n, :vdim] = feats[b][views]
            self.cand_feat[b, 1 : 1 + n, vdim:] = angles[k : k + n]
            self.cand_mask[b, 1 : 1 + n] = True
            k += n
        pano_angles = angle_feature(
            _wrap(VIEW_HEADING[None] - self.heading[:, None]),
            np.broadcast_to(VIEW_ELEVATION, (B, 36)),
        )
        self.pano = np.concatenate([np.stack(feats), pano_angles], axis=2)

    def teacher(self) -> np.ndarray:
        """The shortest-path action towards each goal: 0 (STOP) at the goal, else the index of
        the next viewpoint on the shortest path; -1 for finished episodes."""
        out = np.full(len(self.episodes), -1, dtype=np.int64)
        for b, (scan, ref) in enumerate(zip(self.scans, self.refs)):
            if self.done[b]:
                continue
            goal, here = ref[-1], int(self.node[b])
            if here == goal:
                out[b] = 0
            else:
                out[b] = 1 + self.cands[b][0].index(int(scan.next_hop[here, goal]))
        return out

    def distance_to_goal(self) -> np.ndarray:
        return np.array(
            [s.dist[int(n), r[-1]] for s, n, r in zip(self.scans, self.node, self.refs)]
        )

    def step(self, actions) -> None:
        """Apply one action per episode (ignored for finished ones); 0 = STOP."""
        actions = np.asarray(actions)
        for b, a in enumerate(actions):
            if self.done[b]:
                continue
            if a == 0:
                self.done[b] = self.stopped[b] = True
                continue
            nbrs, heads = self.cands[b]
            if not 1 <= a <= len(nbrs):
                raise ValueError(f"episode {b}: action {a} is not a candidate (1..{len(nbrs)})")
            self.node[b] = nbrs[a - 1]
            self.heading[b] = heads[a - 1]
            self.trajs[b].append(int(self.node[b]))
        self.steps += 1
        if self.steps >= self.max_actions:
            self.done[:] = True
        if not self.done.all():
            self._observe()
