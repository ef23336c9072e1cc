"""VLN data: the real R2R/Matterport files, the embedded houses written in the same formats,
features, tokenizer, environment and metrics."""

from __future__ import annotations

import json
import math
from collections import Counter

import numpy as np
import pytest

from envs.errors import DataError
from envs.vln_data import VLNData, connectivity_entries, parse_connectivity
from envs.vln_env import NavBatch, World, candidates
from envs.vln_features import (
    ANGLE_DIM,
    ROOM_CODES,
    ROOM_DIM,
    angle_feature,
    object_vector,
    read_tsv,
    semantic_features,
    write_tsv,
)
from envs.vln_houses import HouseSpec, embedded_dataset
from envs.vln_metrics import episode_metrics, summarize
from envs.vln_routes import sample_routes
from envs.vln_vocab import Vocab, split_sentence
from tests.conftest import SHARED_DATA


@pytest.fixture(scope="module")
def real() -> VLNData:
    if not (SHARED_DATA / "r2r" / "R2R_train.json").is_file():
        pytest.skip(f"real R2R data not found under {SHARED_DATA}")
    return VLNData(SHARED_DATA)


@pytest.fixture(scope="module")
def houses(tmp_path_factory) -> VLNData:
    spec = HouseSpec(
        train_houses=4,
        unseen_houses=2,
        train_paths=12,
        val_seen_paths=4,
        val_unseen_paths=8,
        seed=3,
    )
    return VLNData(embedded_dataset(spec, tmp_path_factory.mktemp("cache")))


def test_real_r2r_splits_load_with_their_official_sizes(real):
    train, unseen = real.episodes("train"), real.episodes("val_unseen")
    assert len(train) == 14039 and len({e.scan for e in train}) == 61
    assert len(unseen) == 2349 and len({e.scan for e in unseen}) == 11
    assert not {e.scan for e in train} & {e.scan for e in unseen}


def test_real_paths_are_graph_walks_whose_distance_is_the_geodesic(real):
    items = json.loads((SHARED_DATA / "r2r" / "R2R_val_unseen.json").read_text())
    real.check_episodes(real.episodes("val_unseen"))
    for it in items[::20]:
        scan = real.scan(it["scan"])
        a, b = scan.index[it["path"][0]], scan.index[it["path"][-1]]
        assert scan.dist[a, b] == pytest.approx(it["distance"], abs=0.01)


def test_connectivity_keeps_only_included_viewpoints_and_mutual_edges(real):
    raw = json.loads((SHARED_DATA / "connectivity" / "17DRP5sb8fy_connectivity.json").read_text())
    scan = real.scan("17DRP5sb8fy")
    assert len(scan.ids) == sum(it["included"] for it in raw)
    a = next(i for i in range(len(scan.ids)) if scan.neighbors[i])
    j = scan.neighbors[a][0]
    assert scan.graph.edges[a, j]["weight"] == pytest.approx(
        np.linalg.norm(scan.pos[a] - scan.pos[j])
    )


def test_bad_connectivity_and_r2r_files_name_the_file_and_field(tmp_path):
    (tmp_path / "connectivity").mkdir()
    (tmp_path / "r2r").mkdir()
    entries = connectivity_entries(["a", "b"], np.zeros((2, 3)), [(0, 1)])
    del entries[1]["pose"]
    (tmp_path / "connectivity" / "x_connectivity.json").write_text(json.dumps(entries))
    (tmp_path / "r2r" / "R2R_train.json").write_text(json.dumps([{"scan": "x", "path": []}]))
    data = VLNData(tmp_path)
    with pytest.raises(DataError, match=r"x_connectivity\.json.*'pose'"):
        data.scan("x")
    with pytest.raises(DataError, match=r"R2R_train\.json: path #0.*'instructions'"):
        data.episodes("train")
    with pytest.raises(DataError, match="R2R_val_seen.json: file not found"):
        data.episodes("val_seen")


def test_embedded_houses_are_r2r_like_and_read_back_by_the_same_loader(houses):
    train, seen, unseen = (houses.episodes(s) for s in ("train", "val_seen", "val_unseen"))
    houses.check_episodes(train + seen + unseen)
    assert {e.scan for e in seen} <= {e.scan for e in train}
    assert not {e.scan for e in unseen} & {e.scan for e in train}
    by_path = {}
    for e in train + unseen:
        by_path.setdefault(e.path_id, []).append(e)
    for eps in by_path.values():
        e = eps[0]
        scan = houses.scan(e.scan)
        nodes = [scan.index[v] for v in e.path]
        assert 4 <= len(nodes) - 1 <= 7
        assert scan.dist[nodes[0], nodes[-1]] >= 5.0
        assert scan.path_length(nodes) == pytest.approx(scan.dist[nodes[0], nodes[-1]])
        assert len(eps) == 3 and len({x.instruction for x in eps}) == 3
    edge = [
        houses.scan(s).graph.edges[e]["weight"]
        for s in {e.scan for e in train}
        for e in houses.scan(s).graph.edges
    ]
    assert 1.5 < np.mean(edge) < 3.0  # R2R averages 2.25 m per edge


def test_instructions_vary_in_wording_and_mention_rooms_and_objects(houses):
    texts = [e.instruction for e in houses.episodes("train")]
    openers = Counter(" ".join(split_sentence(t)[:2]) for t in texts)
    assert len(openers) >= 15
    words = Counter(w for t in texts for w in split_sentence(t))
    for w in ("left", "right", "kitchen", "bedroom", "stop", "past"):
        assert words[w] > 0, w
    assert 8 < np.mean([len(split_sentence(t)) for t in texts]) < 60


def test_houses_differ_in_layout_and_style(houses):
    scans = sorted(
        {e.scan for e in houses.episodes("train")} | {e.scan for e in houses.episodes("val_unseen")}
    )
    sizes = {len(houses.scan(s).ids) for s in scans}
    assert len(sizes) >= 3
    names = [{n for vp in houses.objects[s].values() for n, _ in vp} for s in scans]
    assert len({frozenset(n) for n in names}) == len(scans)


def test_semantic_features_encode_room_and_visible_objects(real):
    scan = real.scan("17DRP5sb8fy")
    feats = semantic_features(real, "17DRP5sb8fy")
    assert feats.shape == (len(scan.ids), 36, 2 * ROOM_DIM + 64)
    objs = real.objects["17DRP5sb8fy"]
    i, vp = next((i, v) for i, v in enumerate(scan.ids) if any(vs for _, vs in objs.get(v, [])))
    label = real.rooms["17DRP5sb8fy"][vp]["region_label"]
    assert feats[i, 0, ROOM_CODES.index(label)] == 1.0 and feats[i, 0, :ROOM_DIM].sum() == 1
    name, views = next((n, vs) for n, vs in objs[vp] if vs)
    seen = [k for k in range(36) if any(name == n and k in vs for n, vs in objs[vp])]
    assert np.any(feats[i, views[0], 2 * ROOM_DIM :] != 0)
    empty = [k for k in range(36) if all(k not in vs for _, vs in objs[vp])]
    assert empty and np.all(feats[i, empty, 2 * ROOM_DIM :] == 0)
    assert seen


def test_object_embedding_shares_words_and_angle_feature_is_envdrops():
    def cos(a, b):
        u, v = object_vector(a), object_vector(b)
        return u @ v / np.linalg.norm(u) / np.linalg.norm(v)

    assert cos("wooden table", "table") > 0.5 and abs(cos("sofa", "table")) < 0.4
    f = angle_feature(0.5, -0.2)
    assert f.shape == (ANGLE_DIM,)
    assert np.allclose(f[:4], [math.sin(0.5), math.cos(0.5), math.sin(-0.2), math.cos(-0.2)])
    assert np.allclose(f[4:8], f[:4])


def test_feature_tsv_round_trip_and_corrupt_line(tmp_path):
    rng = np.random.default_rng(0)
    rows = [
        ("s1", "v1", rng.standard_normal((36, 8)).astype(np.float32)),
        ("s1", "v2", rng.standard_normal((36, 8)).astype(np.float32)),
    ]
    write_tsv(tmp_path / "f.tsv", rows)
    got = read_tsv(tmp_path / "f.tsv")
    assert np.array_equal(got[("s1", "v2")], rows[1][2])
    lines = (tmp_path / "f.tsv").read_text().splitlines()
    lines[1] = lines[1].rsplit("\t", 1)[0] + "\tAAAA"
    (tmp_path / "g.tsv").write_text("\n".join(lines))
    with pytest.raises(DataError, match=r"g\.tsv: line 2: field 'features'"):
        read_tsv(tmp_path / "g.tsv")


def test_tokenizer_and_vocab_as_r2r(real):
    assert split_sentence("Walk past the sofa, turn LEFT...") == [
        "walk",
        "past",
        "the",
        "sofa",
        ",",
        "turn",
        "left",
        ".",
        ".",
        ".",
    ]
    vocab = Vocab.read(real.vocab_file())
    assert (
        len(vocab) == 992
        and vocab.words[-1] == "<BOS>"
        and vocab.words[:3] == ["<PAD>", "<UNK>", "<EOS>"]
    )
    enc = vocab.encode("Walk to the zzzunknownzzz.", 10)
    assert (
        list(enc[:6])
        == [
            vocab.bos,
            vocab.index["walk"],
            vocab.index["to"],
            vocab.index["the"],
            1,
            vocab.index["."],
        ]
        and enc[6] == 2
    )
    assert vocab.decode(enc) == "walk to the <UNK> ."
    built = Vocab.build(["a b b", "b c"] * 5 + ["d"], min_count=5)
    assert built.words == ["<PAD>", "<UNK>", "<EOS>", "b", "a", "c", "<BOS>"]


def test_teacher_reaches_every_goal_on_real_val_unseen(real):
    world = World(real)
    eps = real.episodes("val_unseen")[::40]
    nb = NavBatch(world, eps)
    while not nb.done.all():
        nb.step(nb.teacher())
    m = summarize([episode_metrics(s, t, r) for s, t, r in zip(nb.scans, nb.trajs, nb.refs)])
    assert m["sr"] == 100 and m["spl"] == 100 and m["ne"] == 0 and m["ndtw"] == 100
    assert all(nb.stopped)


def test_candidates_carry_relative_direction_and_stop_is_candidate_zero(houses):
    world = World(houses)
    e = houses.episodes("train")[0]
    scan = houses.scan(e.scan)
    node = scan.index[e.path[0]]
    nbrs, heads, feat = candidates(world, e.scan, node, e.heading)
    k = nbrs.index(scan.index[e.path[1]])
    rel = math.atan2(*(scan.pos[nbrs[k]] - scan.pos[node])[:2]) - e.heading
    assert feat[k, -ANGLE_DIM] == pytest.approx(math.sin(rel), abs=1e-5)
    nb = NavBatch(world, [e], max_actions=3)
    assert nb.cand_mask[0, 0] and not nb.cand_feat[0, 0].any()
    nb.step([1 + k])
    assert nb.node[0] == nbrs[k] and nb.heading[0] == pytest.approx(heads[k])
    nb.step([0])
    assert nb.done[0] and nb.stopped[0]


def test_route_sampler_draws_distinct_r2r_like_routes(houses):
    scan = houses.scan(houses.episodes("val_unseen")[0].scan)
    routes = sample_routes(scan, 20, np.random.default_rng(0))
    assert len(routes) == len({(p[0], p[-1]) for p, _ in routes}) >= 10
    for path, heading in routes:
        assert 4 <= len(path) - 1 <= 7 and scan.dist[path[0], path[-1]] >= 5
        assert all(scan.graph.has_edge(a, b) for a, b in zip(path, path[1:]))


def _line_scan():
    """Five viewpoints on a line, 2 m apart, plus a side branch: 0-1-2-3-4 and 1-5 (5 is 2 m
    off the line at x=2)."""
    pos = np.array([[0, 0, 0], [2, 0, 0], [4, 0, 0], [6, 0, 0], [8, 0, 0], [2, 2, 0]], float)
    edges = [(0, 1), (1, 2), (2, 3), (3, 4), (1, 5)]
    return parse_connectivity("line", connectivity_entries([str(i) for i in range(6)], pos, edges))


def test_metrics_match_hand_computed_values_when_stopping_short():
    scan = _line_scan()
    m = episode_metrics(scan, [0, 1, 2], [0, 1, 2, 3])
    assert m["ne"] == 2 and m["sr"] == 1 and m["osr"] == 1 and m["tl"] == 4
    assert m["spl"] == 1.0  # 6 / max(4, 6)
    assert m["ndtw"] == pytest.approx(math.exp(-2 / 12))  # DTW 2 over |R| * 3
    assert m["sdtw"] == pytest.approx(m["ndtw"])
    pc = (3 + math.exp(-2 / 3)) / 4
    epl = pc * 6
    assert m["cls"] == pytest.approx(pc * epl / (epl + abs(epl - 4)))


def test_metrics_match_hand_computed_values_for_a_detour_that_fails():
    scan = _line_scan()
    m = episode_metrics(scan, [0, 1, 5, 1, 2], [0, 1, 2, 3, 4])
    assert m["ne"] == 4 and m["sr"] == 0 and m["osr"] == 0 and m["spl"] == 0
    assert m["tl"] == 8
    # DTW: 0-0, 1-1, 5-1 (2), 1-1... best alignment: (0,0)(1,1)(5,1)(1,1)(2,2)(2,3)(2,4) = 2+2+4
    assert m["ndtw"] == pytest.approx(math.exp(-8 / 15))
    assert m["sdtw"] == 0
    # PC over ref nodes 0,2,4,6,8 m: distances 0,0,0,2,4 from the trajectory
    pc = (3 + math.exp(-2 / 3) + math.exp(-4 / 3)) / 5
    epl = pc * 8
    assert m["cls"] == pytest.approx(pc * epl / (epl + abs(epl - 8)))


def test_repeated_viewpoints_are_scored_as_the_official_evaluator_scores_them():
    """A turn in place repeats a viewpoint; the official eval.py runs DTW over every step."""
    scan = _line_scan()
    plain = episode_metrics(scan, [0, 1, 2], [0, 1, 2, 3])
    turned = episode_metrics(scan, [0, 1, 1, 2, 2], [0, 1, 2, 3])
    for k in ("ne", "sr", "osr", "tl", "spl", "cls"):
        assert turned[k] == pytest.approx(plain[k]), k
    # repeats on the reference align at no cost: (0,0)(1,1)(1,1)(2,2)(2,3) = 2, as without
    assert turned["ndtw"] == pytest.approx(math.exp(-2 / 12))
    assert episode_metrics(scan, [0, 0, 0, 1, 2, 3], [0, 1, 2, 3])["ndtw"] == pytest.approx(1)
    # a repeat off the reference costs its distance again: 5 twice against 1 is 2 + 2
    off = episode_metrics(scan, [0, 1, 5, 5, 1, 2, 3], [0, 1, 2, 3])
    once = episode_metrics(scan, [0, 1, 5, 1, 2, 3], [0, 1, 2, 3])
    assert off["ndtw"] == pytest.approx(math.exp(-4 / 12)) and once["ndtw"] == pytest.approx(
        math.exp(-2 / 12)
    )
