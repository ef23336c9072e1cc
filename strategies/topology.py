"""Peer topologies and their mixing matrices for decentralized accumulation.

Silo i replaces its backbone with sum_j A[i, j] * theta_j, so A is row-stochastic and A[i, j] > 0
only for j = i and i's in-neighbours. Names (run config `topology`):

* `ring`: directed ring 0 -> 1 -> ... -> N-1 -> 0 with A = 0.5 * (A_ring + I), as the CDL/FADNet
  reference code builds it: each silo averages itself with its predecessor.
* `complete`: every silo averages all silos uniformly (A = 1/N): decentralized FedAvg.
* `<graph>-ring`: a directed ring overlay over a GML network (gaia, amazon_us, exodus, ... in
  `topology-dir`, or a path to a .gml file), ordered by a travelling-salesman tour of the
  network's `distance` (latency) weights, as the reference does; A = 0.5 * (A_ring + I).
* `<graph>-mst`: the minimum spanning tree of the network (by `distance`) as an undirected
  overlay, with Metropolis-Hastings weights A[i, j] = 1 / (1 + max(deg i, deg j)), which are
  symmetric and doubly stochastic.
The number of silos of a GML topology is its number of nodes. No flwr here: pure networkx.
"""

from __future__ import annotations

import difflib
from dataclasses import dataclass
from pathlib import Path

import networkx as nx
import numpy as np

DEFAULT_TOPOLOGY_DIR = Path(__file__).resolve().parents[2] / "shared" / "data" / "topologies"


class TopologyError(ValueError):
    """Unknown topology name, missing or unreadable GML file; the message names it."""


@dataclass(frozen=True)
class Topology:
    name: str
    mixing: np.ndarray  # N x N, row-stochastic
    labels: tuple[str, ...]  # silo i's place in the network (GML label) or its index

    @property
    def num_silos(self) -> int:
        return len(self.mixing)

    def in_neighbours(self, i: int) -> list[int]:
        return [j for j in np.nonzero(self.mixing[i])[0].tolist() if j != i]


def ring_mixing(n: int) -> np.ndarray:
    a = np.eye(n) * 0.5
    for i in range(n):
        a[i, (i - 1) % n] += 0.5  # silo i receives from its predecessor
    return a if n > 1 else np.ones((1, 1))


def metropolis_hastings(graph: nx.Graph) -> np.ndarray:
    nodes = sorted(graph.nodes)
    idx = {v: k for k, v in enumerate(nodes)}
    a = np.zeros((len(nodes), len(nodes)))
    for u, v in graph.edges:
        w = 1.0 / (1 + max(graph.degree[u], graph.degree[v]))
        a[idx[u], idx[v]] = a[idx[v], idx[u]] = w
    a[np.diag_indices_from(a)] = 1.0 - a.sum(axis=1)
    return a


# The largest network we ship (sprint.gml) has 315 nodes in 77 KB. Mixing weights are a dense
# n x n matrix and the ring's tour is cubic in n: a 50,000-node graph hung a run (20 GB of
# weights), so a graph is refused by its file size and node count before either is built.
MAX_GML_BYTES = 8 << 20
MAX_GML_NODES = 2000


def load_gml(name: str, topology_dir: Path | str | None) -> nx.Graph:
    path = Path(name)
    if path.suffix != ".gml":
        path = Path(topology_dir or DEFAULT_TOPOLOGY_DIR) / f"{name}.gml"
    if not path.is_file():
        names = sorted(p.stem for p in path.parent.glob("*.gml")) if path.parent.is_dir() else []
        close = difflib.get_close_matches(path.stem, names, n=1, cutoff=0.6)
        hint = (
            f" (did you mean {close[0]!r}?)"
            if close
            else (f" (graphs there: {', '.join(names)})" if names else "")
        )
        raise TopologyError(f"topology graph {path} not found{hint}")
    if path.stat().st_size > MAX_GML_BYTES:
        raise TopologyError(
            f"{path}: {path.stat().st_size} bytes, over the {MAX_GML_BYTES} a topology may have"
        )
    try:
        graph = nx.read_gml(path, label="id")
    except Exception as e:  # networkx raises several types on bad GML
        raise TopologyError(f"{path}: not a readable GML graph ({e})") from None
    if graph.number_of_nodes() > MAX_GML_NODES:
        raise TopologyError(
            f"{path}: {graph.number_of_nodes()} nodes, over the {MAX_GML_NODES} silos a "
            "topology may have"
        )
    loops = list(nx.selfloop_edges(graph))
    if loops:
        raise TopologyError(
            f"{path}: edge {loops[0][0]}-{loops[0][1]} joins a silo to itself (a self-loop); "
            "a topology's edges join two silos"
        )
    if graph.is_multigraph():
        twice = [(u, v) for u, v, k in graph.edges(keys=True) if k]
        if twice:
            raise TopologyError(
                f"{path}: edge {twice[0][0]}-{twice[0][1]} is given more than once; "
                "give each edge once (its distance would be ambiguous)"
            )
    graph = nx.Graph(graph)  # undirected, simple
    if graph.number_of_nodes() < 2 or not nx.is_connected(graph):
        raise TopologyError(f"{path}: needs a connected graph of at least 2 nodes")
    edges = list(graph.edges(data=True))
    if any("distance" in d for *_, d in edges):  # the tour's weights: all or none
        for u, v, d in edges:
            w = d.get("distance")
            if (
                isinstance(w, bool)
                or not isinstance(w, (int, float))
                or not w >= 0
                or w == float("inf")
            ):
                raise TopologyError(
                    f"{path}: edge {u}-{v}: field 'distance' must be a finite "
                    f"number >= 0 on every edge, got {w!r}"
                )
    return nx.convert_node_labels_to_integers(graph, ordering="sorted", label_attribute="gml_id")


def tsp_ring_order(graph: nx.Graph) -> list[int]:
    """Silo order along an approximate shortest tour of the network's latencies."""
    weight = "distance" if all("distance" in d for *_, d in graph.edges(data=True)) else None
    tour = nx.approximation.traveling_salesman_problem(graph, weight=weight, cycle=True)
    seen, order = set(), []
    for v in tour:  # the tour may pass a node twice on a sparse graph; keep first visits
        if v not in seen:
            seen.add(v)
            order.append(v)
    return order


def build(
    name: str, num_silos: int | None = None, topology_dir: Path | str | None = None
) -> Topology:
    """The topology called `name`; `num_silos` is required for ring/complete."""
    if name in ("ring", "complete"):
        if not num_silos or num_silos < 1:
            raise TopologyError(f"topology {name!r} needs the number of silos")
        mixing = (
            ring_mixing(num_silos) if name == "ring" else np.full((num_silos,) * 2, 1.0 / num_silos)
        )
        return Topology(name, mixing, tuple(str(i) for i in range(num_silos)))
    base, _, overlay = name.rpartition("-")
    if overlay not in ("ring", "mst") or not base:
        close = difflib.get_close_matches(name, ["ring", "complete"], n=1, cutoff=0.6)
        hint = f"did you mean {close[0]!r}? Else " if close else ""
        raise TopologyError(
            f"unknown topology {name!r}: {hint}use ring, complete, <graph>-ring or "
            "<graph>-mst (graph: a GML name in topology-dir or a .gml path)"
        )
    graph = load_gml(base, topology_dir)
    n = graph.number_of_nodes()
    if num_silos is not None and num_silos != n:
        raise TopologyError(f"topology {name!r} has {n} silos, but {num_silos} were asked for")
    labels = tuple(str(graph.nodes[v].get("label", v)) for v in range(n))
    if overlay == "ring":
        order = tsp_ring_order(graph)
        pos = {v: k for k, v in enumerate(order)}
        ring = ring_mixing(n)  # in tour positions
        mixing = np.array([[ring[pos[i], pos[j]] for j in range(n)] for i in range(n)])
    else:
        mst = nx.minimum_spanning_tree(graph, weight="distance")
        mixing = metropolis_hastings(mst)
    return Topology(name, mixing, labels)


def num_silos_of(name: str, topology_dir: Path | str | None = None) -> int | None:
    """Silos a named GML topology fixes, or None for ring/complete."""
    if name in ("ring", "complete"):
        return None
    return build(name, None, topology_dir).num_silos


def mix(arrays: list[dict[str, np.ndarray]], weights: np.ndarray) -> dict[str, np.ndarray]:
    """sum_j weights[j] * arrays[j], per array name, in float64 then cast back."""
    out = {}
    for k, ref in arrays[0].items():
        acc = np.zeros(ref.shape, np.float64)
        for w, a in zip(weights, arrays):
            if w:
                acc += w * a[k]
        out[k] = acc.astype(ref.dtype)
    return out


BUFFERS = ("running_mean", "running_var", "num_batches_tracked")


def parameter_names(arrays: dict[str, np.ndarray]) -> list[str]:
    """The backbone's trainable parameters among a model's arrays: BatchNorm buffers and a CDL
    reference-variant sub-network (`sub.*`) left out."""
    return [k for k in arrays if not k.endswith(BUFFERS) and not k.startswith("sub.")]


def consensus_distance(
    arrays: list[dict[str, np.ndarray]], names: list[str] | None = None
) -> float:
    """The official CDL code's "Consensus" (`communication.py` l. 122-129): the mean, over silos
    and over every entry of the named arrays (all when None), of the squared deviation from
    the silos' average."""
    names = list(arrays[0]) if names is None else names
    mean = mix([{k: a[k] for k in names} for a in arrays], np.full(len(arrays), 1.0 / len(arrays)))
    total = sum(
        float(np.sum((a[k].astype(np.float64) - mean[k]) ** 2)) for a in arrays for k in names
    )
    return total / (len(arrays) * sum(mean[k].size for k in names))
