import numpy as np
import pytest

from strategies.topology import (
    TopologyError,
    build,
    consensus_distance,
    metropolis_hastings,
    mix,
    parameter_names,
    ring_mixing,
)
from tests.conftest import SHARED_DATA

TOPOLOGIES = SHARED_DATA / "topologies"


def test_ring_is_the_reference_half_self_half_predecessor():
    a = ring_mixing(4)
    assert np.allclose(a.sum(axis=1), 1)
    assert a[2, 2] == 0.5 and a[2, 1] == 0.5 and a[2, 3] == 0
    assert build("complete", 3).mixing.tolist() == [[1 / 3] * 3] * 3


def test_metropolis_hastings_is_doubly_stochastic():
    import networkx as nx

    a = metropolis_hastings(nx.star_graph(4))
    assert np.allclose(a, a.T) and np.allclose(a.sum(axis=0), 1) and np.allclose(a.sum(1), 1)
    assert np.all(a >= 0)


@pytest.mark.parametrize(
    "name, n", [("gaia-ring", 11), ("gaia-mst", 11), ("amazon_us-ring", 22), ("exodus-mst", 79)]
)
def test_gml_topologies_fix_the_number_of_silos(name, n):
    if not TOPOLOGIES.is_dir():
        pytest.skip("no shared topologies")
    t = build(name, topology_dir=TOPOLOGIES)
    assert t.num_silos == n and np.allclose(t.mixing.sum(axis=1), 1)
    if name.endswith("ring"):  # one predecessor each, every silo reached once: a single cycle
        preds = [t.in_neighbours(i) for i in range(n)]
        assert all(len(p) == 1 for p in preds)
        seen, i = set(), 0
        while i not in seen:
            seen.add(i)
            i = preds[i][0]
        assert len(seen) == n
    else:
        edges = sum(len(t.in_neighbours(i)) for i in range(n)) // 2
        assert edges == n - 1  # a spanning tree
    assert "Virginia" in t.labels if name.startswith("gaia") else True


def test_ring_tour_follows_latencies():
    if not TOPOLOGIES.is_dir():
        pytest.skip("no shared topologies")
    import networkx as nx

    g = nx.read_gml(TOPOLOGIES / "gaia.gml", label="id")
    t = build("gaia-ring", topology_dir=TOPOLOGIES)
    tour = sum(g.edges[i, t.in_neighbours(i)[0]]["distance"] for i in range(11))
    order = list(range(11))  # the tour by id order is a worse ring
    naive = sum(g.edges[order[k], order[k - 1]]["distance"] for k in range(11))
    assert tour < naive


def test_bad_topologies_are_named(tmp_path):
    with pytest.raises(TopologyError, match="unknown topology 'star'"):
        build("star", 4)
    with pytest.raises(TopologyError, match="nowhere.gml not found"):
        build("nowhere-ring", topology_dir=tmp_path)
    (tmp_path / "bad.gml").write_text("graph [ node [ id 0 ")
    with pytest.raises(TopologyError, match="bad.gml: not a readable GML"):
        build("bad-mst", topology_dir=tmp_path)
    if TOPOLOGIES.is_dir():
        with pytest.raises(TopologyError, match="has 11 silos"):
            build("gaia-ring", 5, TOPOLOGIES)


def test_mix_and_consensus_distance():
    a = [{"w": np.array([0.0, 0.0], np.float32)}, {"w": np.array([2.0, 4.0], np.float32)}]
    assert np.allclose(mix(a, np.array([0.5, 0.5]))["w"], [1, 2])
    assert mix(a, np.array([0.5, 0.5]))["w"].dtype == np.float32
    # the official definition: a mean over silos and entries ((1 + 4 + 1 + 4) / (2 * 2))
    assert np.isclose(consensus_distance(a), 2.5)
    assert consensus_distance([a[0], a[0]]) == 0
    # parameters only: BatchNorm buffers and a sub-network do not count
    b = [
        dict(x, **{"bn.running_var": np.full(3, 9.0 * i), "sub.w": x["w"] * 7})
        for i, x in enumerate(a)
    ]
    assert parameter_names(b[0]) == ["w"]
    assert np.isclose(consensus_distance(b, parameter_names(b[0])), 2.5)
