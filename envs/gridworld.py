"""Grid-World of the FedRL paper: two agents, alpha and beta, must meet on an obstacle map.

Maps come from the paper's own files (`gridworld_o_{8,16,32}.mat`, read by `load_mat`) or from
`generate_maps` (random obstacles inside a wall border, BFS shortest paths), the embedded default.
Either way a `Maps` object holds, per map index, the n x n grid (1 free, 0 obstacle) and a list of
shortest paths whose first cell is alpha's start and last cell is beta's start.

`GridWorld` runs many episodes side by side (B environments, numpy-vectorised). Choices where the
paper is silent or ambiguous, and why:
- Observations: alpha sees a w_alpha x w_alpha window centred on itself (paper: 3), beta a
  w_beta window (paper: 5); cells off the map read 0 (obstacle). The reference code swaps the
  sizes; `windows=(5, 3)` reproduces it. Each observation is the last H windows (history).
- Rewards (paper Sec. 5.1): r = r_l + r_g, r_l = -10 when the move hits an obstacle (the agent
  stays), +50 when the agents meet, -1 otherwise; r_g = N_g / md(alpha, beta). md can be 0 when
  both step onto one cell, so r_g uses max(md, 1). In `paper` action mode alpha owns the reward
  and r_l is alpha's own move; in `joint-action` mode (the reference code: one controller moves
  both) r_l of both moves is summed, as the reference does.
- Meeting: the agents meet when md <= 1, as in the reference code (moving simultaneously they
  can swap cells and never share one).
- Episode ends on meeting or after T_m steps (paper: 38/86/178 for 8/16/32; other sizes 2 x the
  longest optimal path bound, n*n/2 capped at 4n).
- Which map/path an episode uses is a pure function of (seed, env slot, episode count), so two
  replicas of the world built from the same config stay identical without exchanging state.
"""
from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

import networkx as nx
import numpy as np

from envs.errors import DataError

# east, south, west, north in (row, col) steps (the paper's action order)
MOVES = np.array([[0, 1], [1, 0], [0, -1], [-1, 0]], dtype=np.int64)
STAY = -1
PAPER_MAX_STEPS = {8: 38, 16: 86, 32: 178}
REFERENCE_HISTORY = {8: 2, 16: 4, 32: 8}  # the reference code's hist_len per size (autolen)


def max_steps_for(size: int) -> int:
    return PAPER_MAX_STEPS.get(size, min(size * size // 2, 4 * size))


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


@dataclass
class Maps:
    """Grid maps by index: `grid(i)` (n x n uint8) and `paths(i)` (list of k x 2 (row, col))."""
    size: int
    count: int
    _grid: callable
    _paths: callable
    source: str

    def grid(self, i: int) -> np.ndarray:
        return self._grid(i)

    def paths(self, i: int) -> list[np.ndarray]:
        return self._paths(i)

    def check_range(self, r: range, key: str) -> None:
        if len(r) and r[-1] >= self.count:
            raise DataError(f"{key} {r[0]}-{r[-1]} goes past the {self.count} maps in "
                            f"{self.source} (indices 0-{self.count - 1})")


def load_mat(path: str | Path) -> Maps:
    """The FedRL paper's maps: MATLAB v5 `all_images` (N x 1 cells of n x n uint8, 1 free) and
    `all_states_xy_by_domain` (N x 1 cells of 8 shortest paths, each k x 2 (row, col), 0-based)."""
    import scipy.io as sio

    path = Path(path)
    if not path.is_file():
        raise DataError(f"{path}: no such map file")
    try:
        data = sio.loadmat(str(path))
    except Exception as e:  # scipy raises several types for a corrupt file
        raise DataError(f"{path}: not a readable MATLAB file ({e})") from None
    for field in ("all_images", "all_states_xy_by_domain"):
        if field not in data:
            raise DataError(f"{path}: missing field {field!r}")
    images, paths = data["all_images"], data["all_states_xy_by_domain"]
    if len(images) != len(paths) or len(images) == 0:
        raise DataError(f"{path}: all_images ({len(images)}) and all_states_xy_by_domain "
                        f"({len(paths)}) must be equally long and non-empty")
    size = int(images[0, 0].shape[0])

    def grid(i):
        return np.asarray(images[i, 0], dtype=np.uint8)

    @lru_cache(maxsize=8192)
    def path_list(i):
        return usable_paths(grid(i), [np.asarray(p[0], np.int64).reshape(-1, 2)
                                      for p in paths[i, 0] if np.size(p[0]) >= 2])

    return Maps(size, len(images), grid, path_list, str(path))


def free_graph(grid: np.ndarray) -> nx.Graph:
    """The 4-connected graph of a map's free cells (BFS shortest paths run on it)."""
    g = nx.grid_2d_graph(*grid.shape)
    g.remove_nodes_from([c for c in list(g.nodes) if grid[c] == 0])
    return g


def usable_paths(grid: np.ndarray, paths: list[np.ndarray]) -> list[np.ndarray]:
    """The stored paths an episode can start from, repaired where needed.

    In the paper's files only ~25-29% of the stored paths are consistent with their map (every
    cell free, 4-adjacent steps); the others cross obstacles or the border (no orientation of the
    image fixes that). A consistent path is kept; for any other whose two ends are free interior
    cells, the BFS shortest path between those ends replaces it (an episode needs the two starts;
    the path only serves as the optimal route). Paths whose ends are adjacent (the agents would
    meet at once) or not free are dropped. The reference code only checks that the ends are off
    the border, so its agents can start on obstacles.
    """
    n = grid.shape[0]
    g = None
    out = []
    for p in paths:
        ends = p[[0, -1]]
        if not ((ends >= 1) & (ends <= n - 2)).all() or not all(grid[tuple(c)] for c in ends):
            continue
        if np.abs(ends[0] - ends[1]).sum() <= 1:
            continue
        inside = ((p >= 0) & (p < n)).all()
        if inside and all(grid[tuple(c)] for c in p) and (np.abs(np.diff(p, axis=0)).sum(1) == 1).all():
            out.append(p)
            continue
        if g is None:
            g = free_graph(grid)
        try:
            out.append(np.array(nx.shortest_path(g, tuple(ends[0]), tuple(ends[1])), np.int64))
        except nx.NetworkXNoPath:
            continue
    return out


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


def generate_maps(size: int, count: int = 8000, seed: int = 0,
                  obstacle_density: float | None = None, n_paths: int = 8) -> Maps:
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

    return Maps(size, count, lambda i: build(i)[0], lambda i: build(i)[1],
                f"generated maps (size {size}, seed {seed})")


def split_ranges(count: int) -> tuple[range, range, range]:
    """The paper's 6400/800/800 proportions (80/10/10) of `count` maps."""
    a, b = int(count * 0.8), int(count * 0.9)
    return range(0, a), range(a, b), range(b, count)


def windows_at(padded: np.ndarray, pos: np.ndarray, w: int, pad: int) -> np.ndarray:
    """(B, w, w) crops of the padded grids (B, n+2p, n+2p) centred on pos (B, 2)."""
    off = np.arange(w) - w // 2
    rows = pos[:, 0, None] + pad + off[None]           # (B, w)
    cols = pos[:, 1, None] + pad + off[None]
    b = np.arange(len(pos))[:, None, None]
    return padded[b, rows[:, :, None], cols[:, None, :]]


class GridWorld:
    """B Grid-World episodes stepped together. Training: finished slots reset to a map and path
    drawn from `map_range` by (seed, slot, episode count). Evaluation: one episode on each of the
    first B maps of `map_range` that have a usable path, from its first path."""

    def __init__(self, maps: Maps, map_range: range, n_envs: int, *, windows=(3, 5),
                 history: int = 2, max_steps: int = 0, action_mode: str = "paper",
                 seed: int = 0, evaluation: bool = False, reset: bool = True):
        if not len(map_range):
            raise ValueError("empty map range")
        if evaluation:  # one episode per map that has a usable path, the first n_envs of them
            self.eval_maps = [i for i in map_range if maps.paths(i)][:n_envs]
            n_envs = len(self.eval_maps)
        self.maps, self.map_range, self.B = maps, map_range, n_envs
        self.w_alpha, self.w_beta = (int(w) for w in windows)
        self.H, self.n = int(history), maps.size
        self.T = int(max_steps) or max_steps_for(maps.size)
        self.joint = action_mode == "joint-action"
        self.seed, self.evaluation = seed, evaluation
        self.pad = max(self.w_alpha, self.w_beta) // 2
        n2 = self.n + 2 * self.pad
        self.padded = np.zeros((n_envs, n2, n2), np.uint8)
        self.pos = np.zeros((n_envs, 2, 2), np.int64)  # slot, agent (0 alpha, 1 beta), (row, col)
        self.t = np.zeros(n_envs, np.int64)
        self.episode = np.zeros(n_envs, np.int64)
        self.map_index = np.zeros(n_envs, np.int64)
        self.active = np.ones(n_envs, bool)   # evaluation: False once a slot's episode ended
        self.obs_alpha = np.zeros((n_envs, self.H, self.w_alpha, self.w_alpha), np.uint8)
        self.obs_beta = np.zeros((n_envs, self.H, self.w_beta, self.w_beta), np.uint8)
        for b in range(n_envs if reset else 0):  # reset=False: load_state() follows
            self._reset(b)

    # -- episodes ---------------------------------------------------------------------------
    def _choose(self, b: int) -> tuple[int, np.ndarray]:
        if self.evaluation:
            i = self.eval_maps[b]
            return i, self.maps.paths(i)[0]
        rng = np.random.default_rng([self.seed, b, int(self.episode[b])])
        for _ in range(100):
            i = self.map_range[int(rng.integers(len(self.map_range)))]
            paths = self.maps.paths(i)
            if paths:
                return i, paths[int(rng.integers(len(paths)))]
        raise DataError(f"no map with a path in {self.maps.source} range "
                        f"{self.map_range[0]}-{self.map_range[-1]}")

    def _reset(self, b: int) -> None:
        i, path = self._choose(b)
        p = self.pad
        self.map_index[b] = i
        self.padded[b] = 0
        self.padded[b, p:p + self.n, p:p + self.n] = self.maps.grid(i)
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
            grid = self.padded[b, self.pad:self.pad + self.n, self.pad:self.pad + self.n]
            out[b] = _first_move(grid.tobytes(), self.n, tuple(self.pos[b, agent]),
                                 tuple(self.pos[b, 1 - agent]))
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
            free = self.padded[np.arange(self.B), target[:, 0] + self.pad,
                               target[:, 1] + self.pad] == 1
            ok = free | (a < 0)
            self.pos[:, agent] = np.where(ok[:, None], target, self.pos[:, agent])
            rl.append(np.where(ok, -1.0, -10.0) * (a >= 0))
        md = np.abs(self.pos[:, 0] - self.pos[:, 1]).sum(1)
        met = md <= 1
        rewards += rl[0] + (rl[1] if self.joint else 0.0)
        rewards += self.n / np.maximum(md, 1) + 50.0 * met
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

    # -- state for replicas that live in Flower's context.state -----------------------------
    STATE = ("padded", "pos", "t", "episode", "map_index", "active", "obs_alpha", "obs_beta")

    def state(self) -> dict[str, np.ndarray]:
        return {k: getattr(self, k).copy() for k in self.STATE}

    def load_state(self, arrays: dict[str, np.ndarray]) -> None:
        for k in self.STATE:
            setattr(self, k, np.array(arrays[k]))


@lru_cache(maxsize=65536)
def _first_move(grid_bytes: bytes, n: int, src: tuple, dst: tuple) -> int:
    if abs(src[0] - dst[0]) + abs(src[1] - dst[1]) <= 1:
        return STAY
    grid = np.frombuffer(grid_bytes, np.uint8).reshape(n, n)
    try:  # agents only ever stand on free cells, so both ends are in the graph
        path = nx.shortest_path(free_graph(grid), src, dst)
    except nx.NetworkXNoPath:
        return STAY
    step = np.array(path[1]) - np.array(src)
    return int(np.flatnonzero((MOVES == step).all(1))[0])
