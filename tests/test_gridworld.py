"""Grid-World: the paper's map files, the generator, and the dynamics and rewards of Sec. 5.1."""

import networkx as nx
import numpy as np
import pytest

from config import parse
from envs.errors import DataError
from envs.gridworld import (
    STAY,
    GridWorld,
    Maps,
    distance,
    generate_maps,
    load_mat,
    max_steps_for,
    parse_range,
)
from tests.conftest import SHARED_DATA

MAT = SHARED_DATA / "gridworld" / "gridworld_o_8.mat"


def _is_shortest(grid, path):
    g = nx.grid_2d_graph(*grid.shape)
    g.remove_nodes_from([c for c in g.nodes if grid[c] == 0])
    steps = np.abs(np.diff(path, axis=0)).sum(1)
    return (
        (steps == 1).all()
        and all(grid[tuple(c)] == 1 for c in path)
        and nx.shortest_path_length(g, tuple(path[0]), tuple(path[-1])) == len(path) - 1
    )


@pytest.mark.parametrize("size", [8, 16, 32])
@pytest.mark.slow
def test_paper_maps_read_one_based_give_free_adjacent_shortest_paths(size):
    mat = SHARED_DATA / "gridworld" / f"gridworld_o_{size}.mat"
    if not mat.is_file():
        pytest.skip(f"{mat} not found")
    maps = load_mat(mat)
    assert maps.size == size and maps.count == 7200  # maps 0-7199 only
    checked = 0
    for i in range(0, 7200, 61):  # every stored path of ~118 maps
        grid = maps.grid(i)
        assert grid.shape == (size, size) and set(np.unique(grid)) <= {0, 1}
        assert (grid[0] == 0).all() and (grid[:, -1] == 0).all()  # wall border
        for p in maps.paths(i):
            assert _is_shortest(grid, p), f"map {i}: stored path not free/adjacent/shortest"
            checked += 1
    assert checked > 600
    with pytest.raises(DataError, match="fedrl.test-maps 7200-7999 goes past the 7200 maps"):
        maps.check_range(parse_range("7200-7999"), "fedrl.test-maps")


@pytest.mark.slow
def test_split_report_counts_used_and_skipped_maps():
    if not MAT.is_file():
        pytest.skip(f"{MAT} not found")
    maps = load_mat(MAT)
    paper, ref = (
        maps.report(range(6400, 7200), "paper"),
        maps.report(range(6400, 7200), "reference"),
    )
    assert paper["maps"] == ref["maps"] == 800
    assert (
        paper["used"] + paper["skipped-no-stored-path"] + paper["skipped-every-start-already-met"]
        == 800
    )
    assert ref["skipped-every-start-already-met"] == 0  # the reference keeps met starts
    assert ref["used"] >= paper["used"] > 750
    # a split with no usable map is refused, naming the key (paper rules: every start met)
    adjacent = _corridor(2, path=np.array([[1, 1], [1, 2]]))
    with pytest.raises(DataError, match="no usable map"):
        GridWorld(adjacent, range(1), 1, rules="paper")
    assert GridWorld(adjacent, range(1), 1, rules="reference").B == 1
    from config.schema import ConfigError, merged
    from server import fedrl_run as fedrl_server
    from training.fedrl_setup import Settings

    with pytest.raises(ConfigError, match="fedrl.valid-maps: no usable map"):
        fedrl_server.check_config(
            parse(
                merged(
                    {
                        "method": "fedrl",
                        "fedrl.map-file": str(MAT),
                        "fedrl.valid-maps": _no_path_range(maps),
                        "fedrl.test-maps": "",
                    }
                )
            )
        )
    s = Settings.of(parse(merged({"fedrl.map-file": str(MAT), "fedrl.test-maps": ""})))
    assert set(s.map_report()) == {"train", "valid"}


def _no_path_range(maps) -> str:
    i = next(i for i in range(7200) if not maps.paths(i))
    return f"{i}-{i}"


def test_reference_rules_distance_rewards_and_meeting():
    """The reference's |dr + dc|, N_g / (md + 1) and both agents' r_l (environment.py l. 103-132)."""
    grid = np.zeros((6, 6), np.uint8)
    grid[1:5, 1:5] = 1
    maps = Maps(6, 1, lambda i: grid, lambda i: [np.array([[1, 1], [1, 2], [2, 2], [3, 2]])], "sq")
    ref = GridWorld(maps, range(1), 1, rules="reference", evaluation=True)
    # alpha (1,1) -> north wall (-10), beta (3,2) -> east (3,3) (-1): |dr + dc| = |2 + 2| = 4
    r, done, *_ = ref.step(np.array([3]), np.array([0]))
    assert r[0] == pytest.approx(-10 - 1 + 6 / 5) and not done[0]
    # alpha east (1,2); beta north (2,3): dr = 1, dc = 1 -> 2; then alpha south (2,2), beta
    # stays: dr = 0, dc = 1 -> met, +50
    ref.step(np.array([0]), np.array([3]))
    r, done, met, *_ = ref.step(np.array([1]), np.array([STAY]))
    assert met[0] and done[0] and r[0] == pytest.approx(-1 + 6 / 2 + 50)
    # diagonal neighbours at (1,1) and (2,2)... and anti-diagonal (1,2)/(2,1): |1 - 1| = 0 met
    assert distance(np.array([1, 2]), np.array([2, 1]), "reference") == 0
    assert distance(np.array([1, 2]), np.array([2, 1]), "paper") == 2


def test_bad_map_files_are_named(tmp_path):
    with pytest.raises(DataError, match="no such map file"):
        load_mat(tmp_path / "none.mat")
    bad = tmp_path / "bad.mat"
    bad.write_bytes(b"not matlab")
    with pytest.raises(DataError, match="bad.mat"):
        load_mat(bad)
    import scipy.io as sio

    sio.savemat(tmp_path / "nofield.mat", {"all_images": np.zeros((2, 1), object)})
    with pytest.raises(DataError, match="all_states_xy_by_domain"):
        load_mat(tmp_path / "nofield.mat")


def test_generated_maps_are_deterministic_walled_and_paths_shortest():
    a, b = generate_maps(16, seed=3), generate_maps(16, seed=3)
    assert a.count == 8000
    for i in (0, 7999):
        assert np.array_equal(a.grid(i), b.grid(i))
        grid = a.grid(i)
        assert (grid[0] == 0).all() and (grid[-1] == 0).all() and (grid[:, 0] == 0).all()
        assert len(a.paths(i)) == 8 and all(_is_shortest(grid, p) for p in a.paths(i))
    assert not np.array_equal(a.grid(0), generate_maps(16, seed=4).grid(0))


def _corridor(length=6, path=None):
    """One free row of `length` cells inside walls; alpha at the left end, beta at the right."""
    n = length + 2
    grid = np.zeros((n, n), np.uint8)
    grid[1, 1:-1] = 1
    path = path if path is not None else np.array([[1, c] for c in range(1, n - 1)])
    return Maps(n, 1, lambda i: grid, lambda i: [path], "corridor")


def test_rewards_collisions_meeting_and_observations():
    maps = _corridor(6)
    w = GridWorld(maps, range(1), 1, windows=(3, 5), history=2, evaluation=True)
    assert w.obs_alpha.shape == (1, 2, 3, 3) and w.obs_beta.shape == (1, 2, 5, 5)
    assert w.obs_alpha[0, -1, 1].tolist() == [0, 1, 1]  # wall west, free east
    # alpha hits the north wall (stays, -10); beta stays; md = 5 -> r_g = 8 / 5
    r, done, met, *_ = w.step(np.array([3]), np.array([STAY]))
    assert w.pos[0, 0].tolist() == [1, 1] and r[0] == pytest.approx(-10 + 8 / 5) and not done[0]
    # alpha east (-1): md 4
    r, *_ = w.step(np.array([0]), np.array([STAY]))
    assert r[0] == pytest.approx(-1 + 8 / 4)
    # both move toward each other: md 2, then meeting: alpha's r_l is +50 (paper rules), done
    r, done, met, *_ = w.step(np.array([0]), np.array([2]))
    assert r[0] == pytest.approx(-1 + 8 / 2) and not done[0]
    r, done, met, *_ = w.step(np.array([0]), np.array([2]))
    assert met[0] and done[0] and r[0] == pytest.approx(50 + 8 / 1)
    assert not w.active[0]  # evaluation: the slot is over, later steps change nothing
    r, done, *_ = w.step(np.array([0]), np.array([0]))
    assert r[0] == 0 and not done[0]


def test_reference_rules_sum_both_moves_and_episodes_end_at_t_max():
    maps = _corridor(6)
    w = GridWorld(maps, range(1), 1, max_steps=2, rules="reference", evaluation=True)
    r, done, *_ = w.step(np.array([3]), np.array([3]))  # both into the north wall
    assert r[0] == pytest.approx(-20 + 8 / 6)  # |dr + dc| = 5 -> N_g / (5 + 1)
    r, done, met, *_ = w.step(np.array([3]), np.array([3]))
    assert done[0] and not met[0]  # T_m reached
    assert max_steps_for(8) == 38 and max_steps_for(16) == 86 and max_steps_for(32) == 178


def test_training_resets_are_replica_deterministic_and_shortest_moves_lead_to_meeting():
    maps = generate_maps(8, seed=0)
    a = GridWorld(maps, range(0, 100), 4, seed=7)
    b = GridWorld(maps, range(0, 100), 4, seed=7)
    rng = np.random.default_rng(0)
    for _ in range(60):  # several episodes end and reset in both replicas the same way
        aa, ab = rng.integers(0, 4, 4), rng.integers(0, 4, 4)
        ra, da, *_ = a.step(aa, ab)
        rb, db, *_ = b.step(aa, ab)
        assert np.array_equal(ra, rb) and np.array_equal(a.obs_beta, b.obs_beta)
    assert a.episode.sum() > 0
    w = GridWorld(maps, range(0, 50), 50, evaluation=True)
    lengths = np.array([len(maps.paths(i)[0]) for i in w.eval_maps])
    while w.active.any():  # alpha follows BFS first moves, beta waits: alpha walks the path
        w.step(w.shortest_action(0), np.full(w.B, STAY))
    assert (w.t == lengths - 2).all()  # a path of k cells is k-1 moves; adjacent = met


def test_auto_map_ranges_follow_the_maps_there_are():
    """The default ranges ("auto") are the paper's split of the maps a run has: 8,000
    generated maps 6400/800/800; the shipped .mat files' 7,200 select on 6400-6799 and score
    6800-7199 (the old fixed 7200-7999 ran past them and the run failed)."""
    from config.schema import merged
    from envs.gridworld import paper_split
    from training.fedrl_setup import Settings

    assert paper_split(8000) == {"train": "0-6399", "valid": "6400-7199", "test": "7200-7999"}
    assert paper_split(7200) == {"train": "0-6399", "valid": "6400-6799", "test": "6800-7199"}
    with pytest.raises(ValueError, match="leave none"):
        paper_split(6000)
    s = Settings.of(parse(merged({})))
    assert (s.train, s.valid, s.test) == (range(6400), range(6400, 7200), range(7200, 8000))
    paper = SHARED_DATA / "gridworld" / "gridworld_o_8.mat"
    if paper.is_file():
        s = Settings.of(parse(merged({"fedrl.map-file": str(paper)})))
        assert (s.valid, s.test) == (range(6400, 6800), range(6800, 7200))
        s.check_maps()  # fits the file
    explicit = Settings.of(parse(merged({"fedrl.test-maps": "7000-7099"})))
    assert explicit.test == range(7000, 7100)
