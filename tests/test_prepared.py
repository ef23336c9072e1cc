"""envs/prepared.py: what a node prepares once is read back from its disk by the next process
(a deployed ClientApp is a fresh process per message), never served stale, and rebuilt when
its copy is torn."""

import numpy as np
import pytest

from envs import gridworld, prepared
from tests.conftest import ROOT

MAPS = ROOT.parent / "shared/data/gridworld/gridworld_o_8.mat"


@pytest.fixture
def cache(tmp_path, monkeypatch):
    monkeypatch.setenv("FEDEMBODIED_CACHE", str(tmp_path / "cache"))
    return tmp_path / "cache"


def test_kept_arrays_are_computed_once_and_a_torn_copy_is_rebuilt(cache):
    calls = []

    def compute():
        calls.append(1)
        return {"x": np.arange(5)}

    first = prepared.kept("demo", ("a", 1), compute)
    again = prepared.kept("demo", ("a", 1), compute)
    other = prepared.kept("demo", ("a", 2), compute)  # another key, another file
    assert len(calls) == 2 and (again["x"] == first["x"]).all() and (other["x"] == first["x"]).all()
    for p in (cache / "demo").iterdir():  # torn copies (a crash mid-write of an old version)
        p.write_bytes(p.read_bytes()[:20])
    assert (prepared.kept("demo", ("a", 1), compute)["x"] == np.arange(5)).all()
    assert len(calls) == 3


def test_off_computes_every_time(monkeypatch, tmp_path):
    monkeypatch.setenv("FEDEMBODIED_CACHE", "off")
    calls = []
    for _ in range(2):
        prepared.kept("demo", (), lambda: calls.append(1) or {"x": np.zeros(1)})
    assert len(calls) == 2


@pytest.mark.skipif(not MAPS.is_file(), reason="needs ../shared/data/gridworld")
def test_a_map_file_is_parsed_once_per_node_and_a_changed_file_is_parsed_again(
    cache, tmp_path, monkeypatch
):
    parsed = []
    real = gridworld._parse_mat
    monkeypatch.setattr(gridworld, "_parse_mat", lambda p: parsed.append(p) or real(p))
    copy = tmp_path / "maps.mat"
    copy.write_bytes(MAPS.read_bytes())
    a, b = gridworld.load_mat(copy), gridworld.load_mat(copy)
    assert len(parsed) == 1 and a.count == b.count == 7200 and a.identity == b.identity
    for i in (0, 17, 7199):
        assert (a.grid(i) == b.grid(i)).all()
        assert [p.tolist() for p in a.paths(i)] == [p.tolist() for p in b.paths(i)]
    assert b.usable(range(0, 200), "paper") == a.usable(range(0, 200), "paper")
    # the same bytes under another name are the same maps; other bytes are other maps
    moved = tmp_path / "moved.mat"
    moved.write_bytes(copy.read_bytes())
    assert gridworld.load_mat(moved).identity == a.identity and len(parsed) == 1
    import scipy.io as sio

    data = sio.loadmat(str(copy))
    data["all_images"][0, 0] = np.ones_like(data["all_images"][0, 0])
    sio.savemat(str(moved), {k: v for k, v in data.items() if not k.startswith("__")})
    changed = gridworld.load_mat(moved)
    assert len(parsed) == 2 and changed.identity != a.identity
    assert changed.grid(0).all() and not a.grid(0).all()


def test_usable_maps_are_found_once_per_node(cache, monkeypatch):
    first = gridworld.generate_maps(8, count=300, seed=3)
    used = first.usable(range(0, 300), "paper")
    fresh = gridworld.generate_maps(8, count=300, seed=3)  # a new process's maps
    monkeypatch.setattr(fresh, "starts", lambda *a: pytest.fail("rebuilt the maps"))
    assert fresh.usable(range(0, 300), "paper") == used
    other = gridworld.generate_maps(8, count=300, seed=4)  # another seed is not served
    monkeypatch.setattr(other, "starts", lambda *a: [])
    assert other.usable(range(0, 300), "paper") == []


T2A = ROOT.parent / "shared/data/text2action"


@pytest.mark.skipif(not T2A.is_dir(), reason="needs ../shared/data/text2action")
def test_a_text2action_domain_is_parsed_once_per_node_as_it_was_and_a_changed_file_again(
    cache, tmp_path, monkeypatch
):
    """A deployed Text2Action party is a fresh process per message: its corpora are read back
    from the node's disk (equal to a parse, field by field), the word vectors too, and gensim
    is not imported for them; a changed file is parsed again."""
    import pickle
    import shutil
    import sys

    from envs import text2action_data as t2a
    from envs.word_vectors import word_vectors

    data = tmp_path / "t2a"
    shutil.copytree(T2A, data)
    parsed, real = [], t2a._parse_domain
    monkeypatch.setattr(t2a, "_parse_domain", lambda *p: parsed.append(p) or real(*p))
    first, again = t2a.load_domain(data, "win2k"), t2a.load_domain(data, "win2k")
    assert len(parsed) == 1 and len(first) == len(again) == 154
    for a, b in zip(first, again):
        assert (a.words, a.pos, a.related) == (b.words, b.pos, b.related)
        assert a.tags.dtype == b.tags.dtype and (a.tags == b.tags).all()
    assert any(t.related and any(t.related.values()) for t in again)  # exclusions survive
    vectors = word_vectors(data)
    monkeypatch.setitem(sys.modules, "gensim", None)  # a second process: no training
    monkeypatch.setitem(sys.modules, "gensim.models", None)
    back = word_vectors(data)
    assert list(back) == list(vectors) and all((back[w] == vectors[w]).all() for w in vectors)
    n = len(parsed)
    texts = t2a.safe_load(data / "win2k_labeled_text_data.pkl")
    texts[0]["words"][0] = "CHANGED"
    (data / "win2k_labeled_text_data.pkl").write_bytes(pickle.dumps(texts, protocol=2))
    assert t2a.load_domain(data, "win2k")[0].words[0] == "CHANGED" and len(parsed) == n + 1


def test_a_copy_others_could_write_is_never_read_nor_stored(cache, capsys):
    """A kept copy decides what a party computes: one in a folder another local user can
    write (or own) is not served, whatever it holds; nothing is stored there; the node says so."""
    cache.mkdir(mode=0o700)
    calls = []

    def compute():
        calls.append(1)
        return {"x": np.arange(3)}

    prepared.kept("demo", ("k",), compute)
    (stored,) = (cache / "demo").iterdir()
    np.savez(stored.with_suffix(""), x=np.full(3, 7))  # a planted copy under the same name
    (cache / "demo").chmod(0o777)  # the kind's folder is open to everyone
    assert (prepared.kept("demo", ("k",), compute)["x"] == np.arange(3)).all() and len(calls) == 2
    assert "not this user's alone" in capsys.readouterr().err
    (cache / "demo").chmod(0o700)
    stored.chmod(0o666)  # the file itself is writable by others
    assert (prepared.kept("demo", ("k",), compute)["x"] == np.arange(3)).all() and len(calls) == 3


def test_a_copy_its_reader_refuses_is_computed_again_and_strings_round_trip(cache):
    """A kept copy of another layout (here: a string array whose lengths disagree) is computed
    again, not a crash; any str survives the trip, NULs and lone surrogates included."""
    words = ["", "a\x00", "\x00", "ok", "\ud800", "é🙂"]

    def read(a):
        got = prepared.unpack_strings(a, "w")
        if len(got) != len(words):
            raise ValueError("another layout")
        return got

    assert prepared.kept("s", (), lambda: prepared.pack_strings("w", words), read) == words
    (stored,) = (cache / "s").iterdir()
    np.savez(stored.with_suffix(""), w_utf8=np.zeros(2, np.uint8), w_len=np.array([5, 9]))
    assert prepared.kept("s", (), lambda: prepared.pack_strings("w", words), read) == words


@pytest.mark.skipif(not T2A.is_dir(), reason="needs ../shared/data/text2action")
def test_what_is_kept_is_parsed_from_the_bytes_that_were_hashed(cache, tmp_path):
    """A file rewritten between reading its digest and parsing it cannot get one version's
    parse kept under the other's key: the parse reads the very bytes that were hashed."""
    import pickle
    import shutil

    from envs import text2action_data as t2a

    data = tmp_path / "t2a"
    shutil.copytree(T2A, data)
    files = [t2a.read_file(p) for p in t2a.domain_files(data, "win2k")]
    texts = t2a.safe_load(files[0])
    texts[0]["words"][0] = "REWRITTEN"
    files[0].path.write_bytes(pickle.dumps(texts, protocol=2))  # after the read, before the parse
    assert t2a.kept_domain(*files)[0].words[0] != "REWRITTEN"
    assert t2a.load_domain(data, "win2k")[0].words[0] == "REWRITTEN"
