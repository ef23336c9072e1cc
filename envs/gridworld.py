"""Grid-World of the FedRL paper: two agents, alpha and beta, must meet on an obstacle map.

Maps come from the paper's own files (`gridworld_o_{8,16,32}.mat`, read by `load_mat`) or from
`generate_maps` (random obstacles inside a wall border, BFS shortest paths), the embedded default.
Either way a `Maps` object holds, per map index, the n x n grid (1 free, 0 obstacle) and a list of
shortest paths whose first cell is alpha's start and last cell is beta's start. The paper's files
store the paths 1-based (MATLAB) as uint8; read that way every stored path is free, 4-adjacent and
BFS-shortest on its map (tests/test_gridworld.py checks a sample at every size).

`GridWorld` runs many episodes side by side (B environments, numpy-vectorised). Two rule sets,
`rules="paper" | "reference"` (run config `fedrl.rules`), apply to every method alike:

| | `paper` (Sec. 5.1 text) | `reference` (FRL2019/FRL @5dd503d, gridworld/environment.py) |
|---|---|---|
| distance md | Manhattan abs(dr) + abs(dc) | abs(dr + dc) (`abs(sum(b_xy - a_xy))`, l. 122) |
| met | md <= 1 | md <= 1 (l. 127, 132; agent.py l. 122 scores the last step) |
| r_g | N_g / md (md 0 only on meeting: max(md, 1)) | N_g / (md + 1) (l. 125) |
| r_l | the acting party's own: +50 on meeting, else -10 on a wall, else -1 (alpha's reward uses alpha's) | both agents' -1 / -10 summed (l. 107-121), + 50 when met (l. 128) |
| episode starts | stored paths whose ends are not already met | every stored path (only ends on the border are refused, l. 46-49, 89); episodes that start met are kept |

Under `reference` rules alpha moves both agents (16 joint actions, `divmod(action, 4)`, l. 103)
in every method: that is the reference's action mode (`fedrl.action-mode` follows the rules
unless set). Not reproduced from the reference, on purpose: it adds its padding to the 1-based
stored coordinates (l. 83-84), so its agents start one row and one column off the stored path
(sometimes on an obstacle); we start on the stored path. Its training walks the maps in order
and always takes a map's first valid path; ours draws a map and a path at random.

Other choices where the paper is silent, and why:
- Observations: alpha sees a w_alpha x w_alpha window centred on itself (paper: 3), beta a
  w_beta window (paper: 5); cells off the map read 0 (obstacle). The reference code swaps the
  sizes; `windows=(5, 3)` reproduces it. Each observation is the last H windows (history).
- A party that does not move (STAY, the "alpha only" random floor) has r_l = 0.
- Episode ends on meeting or after T_m steps (paper: 38/86/178 for 8/16/32; other sizes 2 x the
  longest optimal path bound, n*n/2 capped at 4n); every episode takes at least one step.
- Which map/path an episode uses is a pure function of (seed, env slot, episode count), so two
  replicas of the world built from the same config stay identical without exchanging state.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

import networkx as nx
import numpy as np

from envs import prepared
from envs.errors import DataError, missing

# east, south, west, north in (row, col) steps (the paper's action order)
MOVES = np.array([[0, 1], [1, 0], [0, -1], [-1, 0]], dtype=np.int64)
STAY = -1
PAPER_MAX_STEPS = {8: 38, 16: 86, 32: 178}
REFERENCE_HISTORY = {8: 2, 16: 4, 32: 8}  # the reference code's hist_len per size (autolen)
# our default H: 8 at 8x8 from Figure 4 measured here (experiments/fedrl/sweep.py --knob history);
# 16 at 16x16 and 32x32 from the paper's text (Sec. 5.1: success converges past H = 16)
DEFAULT_HISTORY = {8: 8, 16: 16, 32: 16}


def max_steps_for(size: int, max_steps: int = 0) -> int:
    """T_m: `max_steps` if set, else the paper's for its sizes (2 x the longest optimal path)."""
    return int(max_steps) or PAPER_MAX_STEPS.get(size, min(size * size // 2, 4 * size))


def parse_range(text: str, key: str = "range") -> range:
    """'0-6399' -> range(0, 6400); '' -> empty range."""
    text = str(text).strip()
    if not text:
        return range(0)
    try:
        lo, hi = (int(x) for x in text.split("-"))
    except ValueError:
        raise ValueError(f"{key}: expected 'FIRST-LAST' map indices, got {text!r}") from None
    if lo < 0 or hi < lo:
        raise ValueError(f"{key}: bad map index range {text!r}")
    return range(lo, hi + 1)


def paper_split(count: int) -> dict[str, str]:
    """The paper's split of what a map set holds: 6400/800/800 of 8000 maps (Sec. 5.1); a
    set of fewer (the paper's .mat files as shipped hold 7,200) keeps 0-6399 for training and
    halves the rest, 6400-6799 to select and 6800-(count-1) to score. What `auto` ranges mean."""
    if count >= 8000:
        return {"train": "0-6399", "valid": "6400-7199", "test": "7200-7999"}
    if count <= 6400:
        raise ValueError(f"{count} maps leave none to select or score beside maps 0-6399")
    mid = 6400 + (count - 6400) // 2
    return {"train": "0-6399", "valid": f"6400-{mid - 1}", "test": f"{mid}-{count - 1}"}


RULES = ("paper", "reference")


def distance(a: np.ndarray, b: np.ndarray, rules: str) -> np.ndarray:
    """md between cells a and b (..., 2): Manhattan (`paper`) or abs(dr + dc) (`reference`)."""
    d = np.asarray(b) - np.asarray(a)
    return np.abs(d).sum(-1) if rules == "paper" else np.abs(d.sum(-1))


def starts_ok(path: np.ndarray, rules: str) -> bool:
    """Can an episode start from this stored path? `paper`: not if its ends already meet."""
    return rules == "reference" or bool(distance(path[0], path[-1], rules) > 1)


@dataclass
class Maps:
    """Grid maps by index: `grid(i)` (n x n uint8) and `paths(i)` (list of k x 2 (row, col))."""

    size: int
    count: int
    _grid: callable
    _paths: callable
    source: str
    identity: tuple = ()  # what the maps are a pure function of; () = not kept on disk

    def __post_init__(self):
        self._usable: dict = {}

    def grid(self, i: int) -> np.ndarray:
        return self._grid(i)

    def paths(self, i: int) -> list[np.ndarray]:
        return self._paths(i)

    def starts(self, i: int, rules: str) -> list[np.ndarray]:
        """The stored paths of map i an episode may start from under `rules`."""
        return [p for p in self.paths(i) if starts_ok(p, rules)]

    def usable(self, r: range, rules: str) -> list[int]:
        """Maps of range r with at least one start under `rules`. Finding them builds every
        map of the range, so the answer is memoised, and kept on the node's disk
        (envs/prepared.py) when the maps say what they are a function of: replicas rebuild their
        world at every message, and in deployment every message is a fresh process."""
        key = (r.start, r.stop, rules)
        if key not in self._usable:

            def find():
                return {"maps": np.array([i for i in r if self.starts(i, rules)], np.int64)}

            found = (
                prepared.kept("gridworld-usable", (self.identity, *key), find)
                if self.identity
                else find()
            )
            self._usable[key] = [int(i) for i in found["maps"]]
        return self._usable[key]

    def report(self, r: range, rules: str) -> dict:
        """How many maps of range r a run uses, and why the others are skipped."""
        used = self.usable(r, rules)
        no_path = sum(1 for i in r if not self.paths(i))
        return {
            "maps": len(r),
            "used": len(used),
            "skipped-no-stored-path": no_path,
            "skipped-every-start-already-met": len(r) - len(used) - no_path,
        }

    def check_range(self, r: range, key: str) -> None:
        if len(r) and r[-1] >= self.count:
            raise DataError(
                f"{key} {r[0]}-{r[-1]} goes past the {self.count} maps in "
                f"{self.source} (indices 0-{self.count - 1})"
            )


def load_mat(path: str | Path) -> Maps:
    """The FedRL paper's maps: MATLAB v5 `all_images` (N x 1 cells of n x n uint8, 1 free) and
    `all_states_xy_by_domain` (N x 1 cells of up to 8 shortest paths, each k x 2 (row, col),
    1-based and uint8: cast to int64, then subtract 1). Empty stored paths are dropped; a stored
    path that is not free and 4-adjacent on its map is a DataError naming the map (none is, in
    the paper's files). Parsed once per node: the parsed maps are kept on the node's disk under
    the file's SHA-256 (envs/prepared.py), since a deployed party is a fresh process per message."""
    path = Path(path)
    if not path.is_file():
        raise missing(path, "map file")
    f = prepared.read_file(path)
    a = prepared.kept("gridworld-mat", (f.digest,), lambda: _parse_mat(f))
    grids, points = a["grids"], a["points"]
    ends = np.cumsum(a["path_len"])
    first = np.concatenate([[0], np.cumsum(a["paths_per_map"])])

    def grid(i):
        return grids[i]

    def path_list(i):
        return [points[ends[k] - a["path_len"][k] : ends[k]] for k in range(first[i], first[i + 1])]

    return Maps(grids.shape[1], len(grids), grid, path_list, str(path), ("mat", f.digest))


def _parse_mat(f: prepared.FileBytes) -> dict[str, np.ndarray]:
    """The checked content of a map file as flat arrays (see load_mat)."""
    import scipy.io as sio

    path = f.path
    try:
        data = sio.loadmat(f.stream)
    except Exception as e:  # scipy raises several types for a corrupt file
        raise DataError(f"{path}: not a readable MATLAB file ({e})") from None
    for field in ("all_images", "all_states_xy_by_domain"):
        if field not in data:
            raise DataError(f"{path}: missing field {field!r}")
    images, paths = data["all_images"], data["all_states_xy_by_domain"]
    for field, cells in (("all_images", images), ("all_states_xy_by_domain", paths)):
        if cells.dtype != object or cells.ndim != 2 or cells.shape[1] != 1 or not cells.size:
            raise DataError(
                f"{path}: field {field!r} must be an N x 1 cell array, got "
                f"{cells.dtype} {cells.shape}"
            )
    if len(images) != len(paths):
        raise DataError(
            f"{path}: all_images ({len(images)}) and all_states_xy_by_domain "
            f"({len(paths)}) must be equally long"
        )
    grids = [_read_grid(path, i, images[i, 0]) for i in range(len(images))]
    size = grids[0].shape[0]
    for i, g in enumerate(grids):
        if g.shape != (size, size):
            raise DataError(f"{path}: map {i} is {g.shape[0]}x{g.shape[1]}, map 0 is {size}x{size}")
    stored = [_read_paths(path, i, paths[i, 0], grids[i]) for i in range(len(paths))]
    flat = [q for per_map in stored for q in per_map]
    return {
        "grids": np.stack(grids).astype(np.uint8),
        "points": np.concatenate(flat).astype(np.int64) if flat else np.zeros((0, 2), np.int64),
        "path_len": np.array([len(q) for q in flat], np.int64),
        "paths_per_map": np.array([len(per_map) for per_map in stored], np.int64),
    }


def _read_grid(path: Path, i: int, cell) -> np.ndarray:
    g = np.asarray(cell)
    if g.dtype.kind not in "uif" or g.ndim != 2 or g.shape[0] != g.shape[1] or g.shape[0] < 5:
        raise DataError(
            f"{path}: all_images map {i} must be a square numeric n x n grid "
            f"(n >= 5), got {g.dtype} {g.shape}"
        )
    if not np.isin(g, (0, 1)).all():
        raise DataError(
            f"{path}: all_images map {i} holds {sorted(set(np.unique(g)) - {0, 1})[:3]}"
            f"; cells must be 1 (free) or 0 (obstacle)"
        )
    return g.astype(np.uint8)


def _read_paths(path: Path, i: int, cell, grid: np.ndarray) -> list[np.ndarray]:
    """Map i's stored paths, 0-based; each must be a free 4-adjacent walk when read 1-based."""
    items = np.asarray(cell)
    if items.dtype != object:  # the paper's files hold a cell array of k x 2 paths per map
        raise DataError(
            f"{path}: all_states_xy_by_domain map {i} must be a cell array of "
            f"k x 2 paths, got {items.dtype} {items.shape}"
        )
    out = []
    for p in items.ravel():
        p = np.asarray(p)
        if p.size == 0:
            continue
        if p.dtype.kind not in "uif" or p.ndim != 2 or p.shape[1] != 2 or not np.isfinite(p).all():
            raise DataError(
                f"{path}: all_states_xy_by_domain map {i}: a path must be a finite "
                f"k x 2 (row, col) array, got {p.dtype} {p.shape}"
            )
        p = p.astype(np.int64) - 1
        if not is_free_walk(grid, p):
            raise DataError(
                f"{path}: stored path of map {i} is not a free 4-adjacent walk when read 1-based"
            )
        out.append(p)
    return out


def is_free_walk(grid: np.ndarray, p: np.ndarray) -> bool:
    """Every cell of p on the map and free, every step to a 4-neighbour."""
    n = grid.shape[0]
    return bool(
        ((p >= 0) & (p < n)).all()
        and grid[p[:, 0], p[:, 1]].all()
        and (np.abs(np.diff(p, axis=0)).sum(1) == 1).all()
    )


def free_graph(grid: np.ndarray) -> nx.Graph:
    """The 4-connected graph of a map's free cells (BFS shortest paths run on it)."""
    g = nx.grid_2d_graph(*grid.shape)
    g.remove_nodes_from([c for c in list(g.nodes) if grid[c] == 0])
    return g


def _shortest_paths(grid: np.ndarray, rng: np.random.Generator, n_paths: int) -> list:
    free = [tuple(map(int, c)) for c in np.argwhere(grid == 1)]
    g = free_graph(grid)
    out = []
    for _ in range(20 * n_paths):
        if len(out) == n_paths:
            break
        a, b = (free[k] for k in rng.choice(len(free), 2, replace=False))
        try:
            p = nx.shortest_path(g, a, b)  # BFS: the graph is unweighted
        except nx.NetworkXNoPath:
            continue
        if len(p) >= 3:  # start at least 2 steps apart, otherwise they meet at once
            out.append(np.array(p, dtype=np.int64))
    return out


# interior obstacle share measured on the paper's files (maps 0-199): 16%, 26%, 13%
PAPER_OBSTACLE_DENSITY = {8: 0.16, 16: 0.26, 32: 0.13}


def generate_maps(
    size: int,
    count: int = 8000,
    seed: int = 0,
    obstacle_density: float | None = None,
    n_paths: int = 8,
) -> Maps:
    """Random-obstacle maps with a wall border, built lazily and deterministically per index.

    Each interior cell is an obstacle with probability `obstacle_density` (default: the share
    measured on the paper's maps of that size, else 15%); only the largest 4-connected free region is kept free, so
    every path endpoint is reachable. Paths are BFS shortest paths between random free cells.
    """
    if size < 5:
        raise ValueError(f"grid size must be at least 5, got {size}")
    if obstacle_density is None:
        obstacle_density = PAPER_OBSTACLE_DENSITY.get(size, 0.15)

    @lru_cache(maxsize=4096)
    def build(i: int):
        rng = np.random.default_rng([seed, size, i])
        grid = np.zeros((size, size), np.uint8)
        grid[1:-1, 1:-1] = rng.random((size - 2, size - 2)) >= obstacle_density
        g = free_graph(grid)
        biggest = max(nx.connected_components(g), key=len)
        keep = np.zeros_like(grid)
        for c in biggest:
            keep[c] = 1
        return keep, _shortest_paths(keep, rng, n_paths)

    return Maps(
        size,
        count,
        lambda i: build(i)[0],
        lambda i: build(i)[1],
        f"generated maps (size {size}, seed {seed})",
        ("generated", size, count, seed, obstacle_density, n_paths),
    )


def windows_at(padded: np.ndarray, pos: np.ndarray, w: int, pad: int) -> np.ndarray:
    """(B, w, w) crops of the padded grids (B, n+2p, n+2p) centred on pos (B, 2)."""
    off = np.arange(w) - w // 2
    rows = pos[:, 0, None] + pad + off[None]  # (B, w)
    cols = pos[:, 1, None] + pad + off[None]
    b = np.arange(len(pos))[:, None, None]
    return padded[b, rows[:, :, None], cols[:, None, :]]


class GridWorld:
    """B Grid-World episodes stepped together. Training: finished slots reset to a map and start
    drawn from the usable maps of `map_range` by (seed, slot, episode count). Evaluation: one
    episode on each of the first B usable maps of `map_range`, from its first usable start (as
    the reference's `restart`). Usable: `Maps.usable` under `rules`."""

    def __init__(
        self,
        maps: Maps,
        map_range: range,
        n_envs: int,
        *,
        windows=(3, 5),
        history: int = 2,
        max_steps: int = 0,
        rules: str = "paper",
        seed: int = 0,
        evaluation: bool = False,
        reset: bool = True,
    ):
        if rules not in RULES:
            raise ValueError(f"rules must be one of {RULES}, got {rules!r}")
        self.rules = rules
        self.usable = maps.usable(map_range, rules)
        if not self.usable:
            raise DataError(
                f"no usable map in {maps.source} range "
                f"{map_range.start}-{map_range.stop - 1} under {rules} rules"
            )
        if evaluation:  # one episode per usable map, the first n_envs of them
            self.eval_maps = self.usable[:n_envs]
            n_envs = len(self.eval_maps)
        self.maps, self.map_range, self.B = maps, map_range, n_envs
        self.w_alpha, self.w_beta = (int(w) for w in windows)
        self.H, self.n = int(history), maps.size
        self.T = max_steps_for(maps.size, max_steps)
        self.seed, self.evaluation = seed, evaluation
        self.pad = max(self.w_alpha, self.w_beta) // 2
        n2 = self.n + 2 * self.pad
        self.padded = np.zeros((n_envs, n2, n2), np.uint8)
        self.pos = np.zeros((n_envs, 2, 2), np.int64)  # slot, agent (0 alpha, 1 beta), (row, col)
        self.t = np.zeros(n_envs, np.int64)
        self.episode = np.zeros(n_envs, np.int64)
        self.map_index = np.zeros(n_envs, np.int64)
        self.active = np.ones(n_envs, bool)  # evaluation: False once a slot's episode ended
        self.obs_alpha = np.zeros((n_envs, self.H, self.w_alpha, self.w_alpha), np.uint8)
        self.obs_beta = np.zeros((n_envs, self.H, self.w_beta, self.w_beta), np.uint8)
        for b in range(n_envs if reset else 0):  # reset=False: load_state() follows
            self._reset(b)

    # -- episodes ---------------------------------------------------------------------------
    def _choose(self, b: int) -> tuple[int, np.ndarray]:
        if self.evaluation:
            i = self.eval_maps[b]
            return i, self.maps.starts(i, self.rules)[0]
        rng = np.random.default_rng([self.seed, b, int(self.episode[b])])
        i = self.usable[int(rng.integers(len(self.usable)))]
        starts = self.maps.starts(i, self.rules)
        return i, starts[int(rng.integers(len(starts)))]

    def _reset(self, b: int) -> None:
        i, path = self._choose(b)
        p = self.pad
        self.map_index[b] = i
        self.padded[b] = 0
        self.padded[b, p : p + self.n, p : p + self.n] = self.maps.grid(i)
        self.pos[b, 0], self.pos[b, 1] = path[0], path[-1]
        self.t[b] = 0
        self.obs_alpha[b] = 0
        self.obs_beta[b] = 0
        self._observe(np.array([b]))

    def _observe(self, slots: np.ndarray) -> None:
        for obs, agent, w in ((self.obs_alpha, 0, self.w_alpha), (self.obs_beta, 1, self.w_beta)):
            obs[slots, :-1] = obs[slots, 1:]
            obs[slots, -1] = windows_at(self.padded[slots], self.pos[slots, agent], w, self.pad)

    def shortest_action(self, agent: int) -> np.ndarray:
        """Per slot, a first move of a shortest path from `agent` to the other agent's cell
        (the FCN baselines' label); STAY when already adjacent."""
        out = np.full(self.B, STAY, np.int64)
        for b in range(self.B):
            grid = self.padded[b, self.pad : self.pad + self.n, self.pad : self.pad + self.n]
            out[b] = _first_move(
                grid.tobytes(), self.n, tuple(self.pos[b, agent]), tuple(self.pos[b, 1 - agent])
            )
        return out

    # -- stepping ---------------------------------------------------------------------------
    def step(self, a_alpha: np.ndarray, a_beta: np.ndarray):
        """Move both agents (a_beta may be STAY). Returns (reward, done, met, next_alpha,
        next_beta): the observations after the move, before any reset. Finished slots are
        then reset (training) or frozen (evaluation)."""
        rewards = np.zeros(self.B, np.float32)
        a_alpha = np.where(self.active, a_alpha, STAY)
        a_beta = np.where(self.active, a_beta, STAY)
        rl = []
        for agent, a in ((0, np.asarray(a_alpha)), (1, np.asarray(a_beta))):
            move = np.where(a[:, None] >= 0, MOVES[np.clip(a, 0, 3)], 0)
            target = self.pos[:, agent] + move
            free = (
                self.padded[np.arange(self.B), target[:, 0] + self.pad, target[:, 1] + self.pad]
                == 1
            )
            ok = free | (a < 0)
            self.pos[:, agent] = np.where(ok[:, None], target, self.pos[:, agent])
            rl.append(np.where(ok, -1.0, -10.0) * (a >= 0))
        md = distance(self.pos[:, 0], self.pos[:, 1], self.rules)
        met = md <= 1
        if self.rules == "paper":  # alpha's own r_l (+50 replaces it on meeting), N_g / md
            rewards += np.where(met, 50.0, rl[0]) + self.n / np.maximum(md, 1)
        else:  # both agents' r_l, N_g / (md + 1), +50 when met
            rewards += rl[0] + rl[1] + self.n / (md + 1.0) + 50.0 * met
        self.t += self.active
        done = met | (self.t >= self.T)
        live = np.flatnonzero(self.active)
        self._observe(live)
        rewards[~self.active] = 0.0
        done_out, met_out = done & self.active, met & self.active
        next_alpha, next_beta = self.obs_alpha.copy(), self.obs_beta.copy()
        for b in np.flatnonzero(done_out):
            if self.evaluation:
                self.active[b] = False
            else:
                self.episode[b] += 1
                self._reset(b)
        return rewards, done_out, met_out, next_alpha, next_beta

    @property
    def longest(self) -> int:
        """Most steps an evaluation play of this world takes: every episode ends by T_m."""
        return int(self.T)

    def report(self, reward_sum: np.ndarray, met: np.ndarray) -> dict[str, float]:
        """An evaluation's scores: SuccRate and the mean episode reward (paper Sec. 5.1)."""
        return {"succ-rate": float(np.mean(met)), "avg-reward": float(np.mean(reward_sum))}

    # -- state for replicas that live in Flower's context.state -----------------------------
    STATE = ("padded", "pos", "t", "episode", "map_index", "active", "obs_alpha", "obs_beta")

    def state(self) -> dict[str, np.ndarray]:
        return {k: getattr(self, k).copy() for k in self.STATE}

    def load_state(self, arrays: dict[str, np.ndarray]) -> None:
        for k in self.STATE:
            setattr(self, k, np.array(arrays[k]))


def _distances(grid: np.ndarray, dst: tuple, src: tuple) -> np.ndarray:
    """BFS step counts from dst over free cells, wave by wave (numpy), until src is reached
    (-1: not reached). Cells nearer dst than src all carry their true distance."""
    free = grid.astype(bool)
    dist = np.full(grid.shape, -1, np.int64)
    dist[dst] = 0
    front = np.zeros(grid.shape, bool)
    front[dst] = True
    d = 0
    while front.any() and dist[src] < 0:
        d += 1
        grown = np.zeros_like(front)
        grown[1:] |= front[:-1]
        grown[:-1] |= front[1:]
        grown[:, 1:] |= front[:, :-1]
        grown[:, :-1] |= front[:, 1:]
        front = grown & free & (dist < 0)
        dist[front] = d
    return dist


@lru_cache(maxsize=65536)
def _first_move(grid_bytes: bytes, n: int, src: tuple, dst: tuple) -> int:
    """The first move (in the paper's east, south, west, north order) of a shortest path."""
    if abs(src[0] - dst[0]) + abs(src[1] - dst[1]) <= 1:
        return STAY
    dist = _distances(np.frombuffer(grid_bytes, np.uint8).reshape(n, n), dst, src)
    if dist[src] <= 0:
        return STAY  # unreachable
    for k, (dr, dc) in enumerate(MOVES):
        r, c = src[0] + dr, src[1] + dc
        if 0 <= r < n and 0 <= c < n and dist[r, c] == dist[src] - 1:
            return k
    return STAY
