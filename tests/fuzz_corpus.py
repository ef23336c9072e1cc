"""A corpus of malformed inputs at every entry point of `simulation.py`: flags, run-config
values, and each data format a run reads (driving CSV / data.txt / npz, Grid-World .mat, GML
topologies, R2R / connectivity / regions / objects JSON, vocab, feature TSV, checkpoints).

Every case must end in `simulation.BadInput` (one line, exit code 2) whose message names the
culprit, before anything is written. `python -m tests.fuzz_corpus` prints the tally (tried /
clean errors / tracebacks / silently accepted); `tests/test_fuzz_inputs.py` asserts it case by
case.
"""

from __future__ import annotations

import io
import json
import os
import shutil
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
SHARED = ROOT.parent / "shared" / "data"


@dataclass
class Case:
    name: str
    make: Callable[[Path], tuple[list[str], str]]  # tmp dir -> (argv, culprit in the message)


CASES: list[Case] = []


def case(name: str, argv: list[str] | None = None, culprit: str = "", make=None) -> None:
    CASES.append(Case(name, make or (lambda tmp, a=argv, c=culprit: (a, c))))


# --- flags ------------------------------------------------------------------------------------
for flag, values in {
    "--rounds": ["0", "-3", "x", "1.5", "nan"],
    "--num-clients": ["0", "-1", "two", "1e9"],
    "--fraction": ["0", "1.5", "-0.1", "nan", "inf", "x"],
    "--seed": ["x", "-1", "1e40"],
    "--num-cpus": ["0", "-2", "x"],
    "--num-gpus": ["-1", "nan", "x"],
    "--timeout": ["0", "-5", "nan", "inf"],
}.items():
    for v in values:
        case(f"flag {flag}={v}", ["fedavg", flag, v], flag)
case("unknown method", ["fedsgd"], "unknown method")
case("unknown flag", ["fedavg", "--roundz", "3"], "--roundz")
case("missing method", [], "method")
case("topology unknown", ["cdl", "--topology", "torus"], "--topology")
case("topology graph missing", ["gossip", "--topology", "nowhere-ring"], "nowhere")
case("stage on fedavg", ["fedavg", "--stage", "agent"], "--stage")
case("fedvln stage", ["fedvln", "--stage", "pretrain"], "fedvln.stage")
case(
    "fedvln variant", ["fedvln", "--stage", "preexplore", "--variant", "fed-most"], "fedvln.variant"
)
case("fedrl three parties", ["fedrl", "--num-clients", "3"], "--num-clients")
for out in ("/proc/x", "/sys/fedembodied", "/dev/null/x", "/"):
    case(f"--out {out}", ["fedavg", "--out", out], "--out")
case("--out is a file", make=lambda tmp: (["fedavg", "--out", str(_touch(tmp / "afile"))], "--out"))
if os.geteuid() != 0:  # root writes anywhere: nothing to refuse
    case(
        "--out not writable",
        make=lambda tmp: (["fedavg", "--out", str(_readonly(tmp / "ro") / "run")], "--out"),
    )
case("--resume no folder", ["fedavg", "--resume", "/no/such/run"], "--resume")
case("--resume cannot resume method", ["fedvln", "--resume", "/no/such/run"], "--resume")


def _touch(p: Path) -> Path:
    p.write_text("x")
    return p


def _loop(p: Path) -> Path:
    p.symlink_to(p)
    return p


def _finished_run(tmp: Path, rounds: str, config: str = "") -> Path:
    d = tmp / "done"
    d.mkdir()
    (d / "config.json").write_text(config or '{"method": "fedavg", "num-server-rounds": 5}')
    (d / "rounds.csv").write_text(rounds)
    return d


case("--resume symlink loop", make=lambda tmp: (["--resume", str(_loop(tmp / "l"))], "--resume"))
case(
    "--resume config names a data folder that is gone",
    make=lambda tmp: (
        [
            "--resume",
            str(
                _finished_run(
                    tmp,
                    "round\n1\n",
                    '{"method": "fedavg", "num-server-rounds": 5, "driving.data-dir": "/no/data"}',
                )
            ),
        ],
        "driving.data-dir",
    ),
)
for text, name in (("round,x\nx,1\n", "round x"), ("a,b\n1,2\n", "no round column")):
    case(
        f"--resume rounds.csv {name}",
        make=lambda tmp, t=text: (["--resume", str(_finished_run(tmp, t))], "rounds.csv"),
    )


def _readonly(p: Path) -> Path:
    p.mkdir()
    p.chmod(0o555)
    return p


# --- run-config values: every key, wrong type / non-finite / out of range ----------------------
def _run_config_cases() -> None:
    sys.path.insert(0, str(ROOT))
    from config import bounds
    from config.schema import defaults

    method_of = {
        "driving": "fedavg",
        "fedprox": "fedprox",
        "cdl": "cdl",
        "faults": "fedavg",
        "fedrl": "fedrl",
        "fedvln": "fedvln",
    }
    for key, default in defaults().items():
        if key in ("method", "out-dir", "resume"):
            continue
        method = method_of.get(key.split(".")[0] if "." in key else "", "fedavg")
        quoted = f"'{key}'"
        if isinstance(default, bool):
            bad = ["1", '"yes"']
        elif isinstance(default, (int, float)):
            bad = ['"x"', "true", "nan", "inf", "-inf"]
            lo, hi, lo_open = bounds()[key]
            bad += [repr(hi * 10 + 1), repr(lo - 1) if lo > -1 or True else None]
            if lo_open:
                bad.append(repr(lo))
        else:
            bad = ["5", "true"]
        for v in bad:
            case(f"run-config {key}={v}", [method, "--run-config", f"{key}={v}"], quoted)
    for text, culprit in [
        ("driving.lr 0.1", "driving.lr"),
        ("lr=0.1", "'lr'"),
        ('driving.optimizer="sgd', "--run-config"),
        ("driving.lr==0.1", "driving.lr"),
        ("=3", "--run-config"),
        ("driving.lr=0.1 driving.lr", "driving.lr"),
        ('driving.optimizer="lbfgs"', "driving.optimizer"),
        ('driving.lr-decay="cos"', "driving.lr-decay"),
        ('driving.optimizer-state="forever"', "driving.optimizer-state"),
        ('cdl.variant="official"', "cdl.variant"),
        ('aggregator="mode"', "aggregator"),
        ('topology="torus"', "topology"),
        ('faults.fraction-kind="melt"', "faults.fraction-kind"),
        ('faults.raise-partitions="x"', "faults.raise-partitions"),
        ('faults.rounds="3-"', "faults.rounds"),
        # ranges are bounded before they are expanded (this one took 42 s and 2.5 GB)
        ('faults.rounds="1-30000000"', "faults.rounds"),
        ('faults.raise-partitions="0-99999999"', "faults.raise-partitions"),
        ('fedrl.train-maps="0-999999999"', "fedrl.train-maps"),
        ('faults.nan-partitions="99"', "faults.nan-partitions"),
        ("fedrl.sigma=0.0", "fedrl.insecure-no-noise"),
        ('fedrl.windows="4,5"', "fedrl.windows"),
        ('fedrl.windows="3"', "fedrl.windows"),
        ('fedrl.rules="mine"', "fedrl.rules"),
        ('fedrl.action-mode="both"', "fedrl.action-mode"),
        ('fedrl.train-maps="9-1"', "fedrl.train-maps"),
        ('fedrl.train-maps="a-b"', "fedrl.train-maps"),
        ("fedrl.eps-start=0.1 fedrl.eps-end=0.5", "fedrl.eps"),
        ('fedvln.recipe="gpu"', "fedvln.recipe"),
        ('fedvln.optimizer="sgd"', "fedvln.optimizer"),
        ('fedvln.feedback="sample"', "fedvln.feedback"),
        ('fedvln.optimizer-state="forever"', "fedvln.optimizer-state"),
    ]:
        method = {"fedrl": "fedrl", "fedvln": "fedvln", "cdl": "cdl"}.get(
            text.split(".")[0], "fedavg"
        )
        case(f"run-config text {text!r}", [method, "--run-config", text], culprit)
    # repeated keys and megabytes of text: refused in linear time (140,000 repeats once took
    # ~15 min in a quadratic parse), naming the key or the size
    for key in ("round-timeout", "node-wait-timeout", "timeout-floor"):
        case(f"run-config {key} 1e-300", ["fedavg", "--run-config", f"{key}=1e-300"], key)
    case(
        "run-config text with a key given twice",
        ["fedavg", "--run-config", "driving.lr=0.1 driving.lr=0.2"],
        "driving.lr",
    )
    case(
        "run-config text of 2 MB (one key repeated 140,000 times)",
        ["fedavg", "--run-config", " ".join(["driving.lr=0.1"] * 140_000)],
        "--run-config",
    )


_run_config_cases()


# --- driving data: CSV, data.txt, npz ----------------------------------------------------------
def _driving(files: dict[str, bytes | Callable[[Path], None]], culprit: str, clients=2):
    def make(tmp: Path):
        d = tmp / "drive"
        d.mkdir()
        _image(d / "a.jpg")
        for name, content in files.items():
            p = d / name
            p.parent.mkdir(parents=True, exist_ok=True)
            content(p) if callable(content) else p.write_bytes(content)
        return (
            ["fedavg", "--num-clients", str(clients), "--run-config", f'driving.data-dir="{d}"'],
            culprit,
        )

    return make


def _image(path: Path, size=(32, 32)) -> None:
    from PIL import Image

    Image.new("L", size, 128).save(path)


ROW = b"a.jpg, a.jpg, a.jpg, 0.1, 0, 0, 1\n"
for name, content, culprit in [
    ("empty csv", b"", "driving_log.csv"),
    ("header only", b"center,left,right,steering,throttle,brake,speed\n", "driving_log.csv"),
    ("utf-16 csv", (ROW * 6).decode().encode("utf-16"), "driving_log.csv"),
    ("binary csv", bytes(range(256)) * 4, "driving_log.csv"),
    ("nul bytes", ROW * 3 + b"\x00\x00\x00\n" + ROW, "driving_log.csv"),
    (
        "oversized field",
        b"a.jpg," + b"x" * 200_000 + b",a.jpg,0.1,0,0,1\n" + ROW * 4,
        "driving_log.csv",
    ),
    ("too few columns", b"a.jpg,0.1\n" * 6, "driving_log.csv:1"),
    ("steering text", ROW * 3 + b"a.jpg,a.jpg,a.jpg,left,0,0,1\n", "driving_log.csv:4"),
    ("steering nan", ROW * 3 + b"a.jpg,a.jpg,a.jpg,nan,0,0,1\n", "driving_log.csv:4"),
    ("steering inf", ROW * 3 + b"a.jpg,a.jpg,a.jpg,inf,0,0,1\n", "driving_log.csv:4"),
    ("steering 1e30", ROW * 3 + b"a.jpg,a.jpg,a.jpg,1e30,0,0,1\n", "driving_log.csv:4"),
    ("steering 7", ROW * 3 + b"a.jpg,a.jpg,a.jpg,7,0,0,1\n", "driving_log.csv:4"),
    ("missing image", ROW * 3 + b"b.jpg,b.jpg,b.jpg,0.1,0,0,1\n", "b.jpg"),
    ("empty image path", ROW * 3 + b",a.jpg,a.jpg,0.1,0,0,1\n", "driving_log.csv"),
    ("too few rows", ROW, "driving_log.csv"),
    ("quote never closed", ROW * 3 + b'"a.jpg,a.jpg,a.jpg,0.1,0,0,1\n' + ROW, "driving_log.csv"),
]:
    case(f"driving csv: {name}", make=_driving({"driving_log.csv": content}, culprit))


def _bad_image(kind: str):
    def write(p: Path):
        if kind == "1x1":
            _image(p, (1, 1))
        elif kind == "text":
            p.write_text("not an image")
        elif kind == "truncated":
            buf = io.BytesIO()
            from PIL import Image

            Image.new("L", (64, 64), 3).save(buf, "JPEG")
            p.write_bytes(buf.getvalue()[:40])
        elif kind == "empty":
            p.write_bytes(b"")

    return write


for kind in ("1x1", "text", "truncated", "empty"):
    case(
        f"driving image {kind}",
        make=_driving(
            {
                "b.jpg": _bad_image(kind),
                "driving_log.csv": ROW * 3 + b"b.jpg,b.jpg,b.jpg,0.1,0,0,1\n",
            },
            "b.jpg",
        ),
    )

SULLY = b"a.jpg 3.5\n"
for name, content, culprit in [
    ("one field", b"a.jpg\n" + SULLY * 4, "data.txt:1"),
    ("angle text", SULLY * 4 + b"a.jpg left\n", "data.txt:5"),
    ("angle nan", SULLY * 4 + b"a.jpg nan\n", "data.txt:5"),
    ("angle 1e30", SULLY * 4 + b"a.jpg 1e30\n", "data.txt:5"),
    ("binary", bytes(range(256)), "data.txt"),
    ("utf-16", (SULLY * 5).decode().encode("utf-16"), "data.txt"),
    ("empty", b"", "data.txt"),
]:
    case(f"sullychen data.txt: {name}", make=_driving({"data.txt": content}, culprit))


def _npz(**arrays):
    def write(p: Path):
        with open(p, "wb") as f:
            np.savez(f, **arrays)

    return write


ok_imgs = np.random.default_rng(0).random((4, 16, 16)).astype(np.float32)
ok_y = np.zeros(4, np.float32)
for name, writer, culprit in [
    ("not a zip", lambda p: p.write_bytes(b"PK\x03\x04 junk"), "train.npz"),
    ("text", lambda p: p.write_text("imgs,ground_truths"), "train.npz"),
    ("no labels", _npz(imgs=ok_imgs), "train.npz"),
    ("no images", _npz(ground_truths=ok_y), "train.npz"),
    (
        "object array",
        _npz(imgs=ok_imgs, ground_truths=np.array([{"a": 1}] * 4, dtype=object)),
        "train.npz",
    ),
    ("label count", _npz(imgs=ok_imgs, ground_truths=np.zeros(3)), "train.npz"),
    ("label nan", _npz(imgs=ok_imgs, ground_truths=np.array([0, np.nan, 0, 0])), "train.npz"),
    ("label 1e30", _npz(imgs=ok_imgs, ground_truths=np.array([0, 1e30, 0, 0])), "train.npz"),
    ("labels text", _npz(imgs=ok_imgs, ground_truths=np.array(["a"] * 4)), "train.npz"),
    ("images 1x1", _npz(imgs=np.zeros((4, 1, 1)), ground_truths=ok_y), "train.npz"),
    ("images 1-d", _npz(imgs=np.zeros(4), ground_truths=ok_y), "train.npz"),
    ("images 5-d", _npz(imgs=np.zeros((4, 2, 2, 2, 2)), ground_truths=ok_y), "train.npz"),
    ("images nan", _npz(imgs=np.full((4, 16, 16), np.nan), ground_truths=ok_y), "train.npz"),
    ("images text", _npz(imgs=np.array(["x"] * 4), ground_truths=ok_y), "train.npz"),
    (
        "file_names missing image",
        _npz(file_names=np.array(["zz.jpg"] * 4), ground_truths=ok_y),
        "zz.jpg",
    ),
    ("empty", _npz(imgs=np.zeros((0, 16, 16)), ground_truths=np.zeros(0)), "train.npz"),
]:
    case(
        f"driving npz: {name}",
        make=_driving(
            {
                "0/train.npz": writer,
                "0/test.npz": _npz(imgs=ok_imgs, ground_truths=ok_y),
                "1/train.npz": _npz(imgs=ok_imgs, ground_truths=ok_y),
                "1/test.npz": _npz(imgs=ok_imgs, ground_truths=ok_y),
            },
            culprit,
        ),
    )
case(
    "driving npz: test split missing",
    make=_driving(
        {
            "0/train.npz": _npz(imgs=ok_imgs, ground_truths=ok_y),
            "1/train.npz": _npz(imgs=ok_imgs, ground_truths=ok_y),
            "1/test.npz": _npz(imgs=ok_imgs, ground_truths=ok_y),
        },
        "test.npz",
    ),
)
case(
    "driving: empty folder",
    make=lambda tmp: (
        ["fedavg", "--run-config", f'driving.data-dir="{_mkdir(tmp / "empty")}"'],
        "empty",
    ),
)
case(
    "driving: data-dir is a file",
    make=lambda tmp: (
        ["fedavg", "--run-config", f'driving.data-dir="{_touch(tmp / "f")}"'],
        "driving.data-dir",
    ),
)


def _mkdir(p: Path) -> Path:
    p.mkdir()
    return p


# --- Grid-World .mat ---------------------------------------------------------------------------
def _mat(fields: dict | bytes, culprit="maps.mat", extra=""):
    def make(tmp: Path):
        p = tmp / "maps.mat"
        if isinstance(fields, bytes):
            p.write_bytes(fields)
        else:
            from scipy.io import savemat

            savemat(p, fields)
        return (
            [
                "fedrl",
                "--run-config",
                f'fedrl.map-file="{p}" fedrl.train-maps="0-1" '
                f'fedrl.valid-maps="2-2" fedrl.test-maps="" {extra}',
            ],
            culprit,
        )

    return make


def _cells(items) -> np.ndarray:
    out = np.empty((len(items), 1), dtype=object)
    for i, it in enumerate(items):
        out[i, 0] = it
    return out


def _grid(n=8, value=1):
    g = np.ones((n, n), np.uint8) * value
    g[0, :] = g[-1, :] = g[:, 0] = g[:, -1] = 0
    return g


def _paths(*paths) -> np.ndarray:
    """One map's cell: a 1 x k cell array of k x 2 paths (1-based), as the paper's files."""
    cell = np.empty((1, len(paths)), dtype=object)
    for j, q in enumerate(paths):
        cell[0, j] = q
    return _cells([cell] * 3)


good_imgs = _cells([_grid() for _ in range(3)])
good_paths = _paths(np.array([[2, 2], [2, 3], [2, 4]], np.uint8))
for name, fields in [
    ("not a mat file", b"MATLAB junk"),
    ("empty file", b""),
    ("no images", {"all_states_xy_by_domain": good_paths}),
    ("no paths", {"all_images": good_imgs}),
    ("images numeric", {"all_images": np.ones((3, 8)), "all_states_xy_by_domain": good_paths}),
    ("images scalar", {"all_images": 5, "all_states_xy_by_domain": good_paths}),
    ("paths numeric", {"all_images": good_imgs, "all_states_xy_by_domain": np.ones((3, 2))}),
    ("paths scalar", {"all_images": good_imgs, "all_states_xy_by_domain": 1}),
    ("count mismatch", {"all_images": good_imgs, "all_states_xy_by_domain": good_paths[:2]}),
    (
        "grid value 7",
        {"all_images": _cells([_grid(value=7)] * 3), "all_states_xy_by_domain": good_paths},
    ),
    (
        "grid not square",
        {
            "all_images": _cells([np.ones((8, 5), np.uint8)] * 3),
            "all_states_xy_by_domain": good_paths,
        },
    ),
    (
        "grid wrong size",
        {"all_images": _cells([_grid(16)] * 3), "all_states_xy_by_domain": good_paths},
    ),
    ("grid text", {"all_images": _cells(["abc"] * 3), "all_states_xy_by_domain": good_paths}),
    (
        "path off the map",
        {"all_images": good_imgs, "all_states_xy_by_domain": _paths(np.array([[9, 9], [9, 10]]))},
    ),
    (
        "path through a wall",
        {"all_images": good_imgs, "all_states_xy_by_domain": _paths(np.array([[1, 1], [1, 2]]))},
    ),
    (
        "path 0-based",
        {"all_images": good_imgs, "all_states_xy_by_domain": _paths(np.array([[0, 0], [0, 1]]))},
    ),
    (
        "path not a walk",
        {"all_images": good_imgs, "all_states_xy_by_domain": _paths(np.array([[2, 2], [4, 4]]))},
    ),
    (
        "path 3 columns",
        {"all_images": good_imgs, "all_states_xy_by_domain": _paths(np.ones((3, 3)))},
    ),
    ("path text", {"all_images": good_imgs, "all_states_xy_by_domain": _paths(np.array(["ab"]))}),
    (
        "path nan",
        {"all_images": good_imgs, "all_states_xy_by_domain": _paths(np.array([[2.0, np.nan]]))},
    ),
]:
    case(f"gridworld .mat: {name}", make=_mat(fields))
case(
    "gridworld .mat: range past the maps",
    make=_mat(
        {"all_images": good_imgs, "all_states_xy_by_domain": good_paths},
        "fedrl.valid-maps",
        'fedrl.valid-maps="2-9"',
    ),
)


# --- GML topologies ----------------------------------------------------------------------------
def _gml(text: str, culprit="bad.gml"):
    def make(tmp: Path):
        d = tmp / "topo"
        d.mkdir()
        (d / "bad.gml").write_text(text) if isinstance(text, str) else (d / "bad.gml").write_bytes(
            text
        )
        return (["cdl", "--topology", "bad-ring", "--run-config", f'topology-dir="{d}"'], culprit)

    return make


def _graph(edges: str, nodes=3) -> str:
    ns = "".join(f'node [ id {i} label "n{i}" ]\n' for i in range(nodes))
    return f"graph [\n{ns}{edges}]\n"


for name, text in [
    ("not gml", "hello"),
    ("binary", b"\x00\xff\xfe" * 50),
    ("empty", ""),
    ("no nodes", "graph [ ]"),
    ("one node", _graph("", 1)),
    (
        "edge without distance",
        _graph("edge [ source 0 target 1 ]\nedge [ source 1 target 2 distance 1.0 ]\n"),
    ),
    (
        "string distance",
        _graph(
            'edge [ source 0 target 1 distance "far" ]\nedge [ source 1 target 2 distance 1.0 ]\n'
        ),
    ),
    (
        "negative distance",
        _graph(
            "edge [ source 0 target 1 distance -1.0 ]\nedge [ source 1 target 2 distance 1.0 ]\n"
        ),
    ),
    (
        "nan distance",
        _graph(
            "edge [ source 0 target 1 distance NAN ]\nedge [ source 1 target 2 distance 1.0 ]\n"
        ),
    ),
    ("disconnected", _graph("edge [ source 0 target 1 distance 1.0 ]\n")),
    ("unknown node", _graph("edge [ source 0 target 9 distance 1.0 ]\n")),
    ("duplicate node ids", 'graph [ node [ id 0 label "a" ] node [ id 0 label "b" ] ]'),
    (
        "self-loop",
        _graph(
            "edge [ source 0 target 0 ]\nedge [ source 0 target 1 ]\nedge [ source 1 target 2 ]\n"
        ),
    ),
    (
        "duplicate edge",
        "graph [\nmultigraph 1\n"
        + "".join(f'node [ id {i} label "n{i}" ]\n' for i in range(3))
        + "edge [ source 0 target 1 distance 1.0 ]\nedge [ source 0 target 1 distance 9.0 ]\n"
        + "edge [ source 1 target 2 distance 1.0 ]\n]\n",
    ),
    ("unclosed", "graph [ node [ id 0 "),
    # a graph too big for dense mixing weights and the ring's tour (50,000 nodes hung a run)
    (
        "2,500 nodes",
        _graph("".join(f"edge [ source {i} target {i + 1} ]\n" for i in range(2499)), 2500),
    ),
]:
    case(f"GML: {name}", make=_gml(text))


# --- images that decode to more than a camera frame ---------------------------------------------
def _png_header(width: int, height: int) -> bytes:
    """A PNG that declares width x height 8-bit grey pixels (its data need not be there: the
    size is refused from the header, before decoding)."""
    import struct
    import zlib

    def chunk(kind: bytes, data: bytes) -> bytes:
        return (
            struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))
        )

    ihdr = struct.pack(">IIBBBBB", width, height, 8, 0, 0, 0, 0)
    return (
        b"\x89PNG\r\n\x1a\n"
        + chunk(b"IHDR", ihdr)
        + chunk(b"IDAT", zlib.compress(b"\0" * 64))
        + chunk(b"IEND", b"")
    )


for name, (w, h) in [("50,000 x 50,000", (50_000, 50_000)), ("5,000 x 5,000", (5_000, 5_000))]:
    case(
        f"driving image bomb {name}",
        make=_driving(
            {
                "b.png": _png_header(w, h),
                "driving_log.csv": ROW * 3 + b"b.png,b.png,b.png,0.1,0,0,1\n",
            },
            "b.png",
        ),
    )


# --- Text2Action pickles ----------------------------------------------------------------------
def _t2a(files: dict[str, bytes], culprit: str):
    def make(tmp: Path):
        d = tmp / "t2a"
        (d / "indices").mkdir(parents=True)
        src = SHARED / "text2action"
        for domain in ("win2k", "cooking", "wikihow"):  # every domain is read (POS tags)
            for kind in ("labeled_text_data", "dependency"):
                shutil.copy(src / f"{domain}_{kind}.pkl", d)
        shutil.copy(src / "indices" / "win2k_act_5_fold_indices.pkl", d / "indices")
        for rel, content in files.items():
            (d / rel).write_bytes(content)
        cfg = f'fedrl.domain="text2action" fedrl.t2a-data="{d}" fedrl.t2a-dataset="win2k"'
        return (["fedrl", "--run-config", cfg], culprit)

    return make


def _nested_pickle(levels: int = 30) -> bytes:
    """~1 KB: each level a list holding the level below twice, so 2^levels items when walked."""
    import pickle

    obj: list = []
    for _ in range(levels):
        obj = [obj, obj]
    return pickle.dumps(obj, protocol=2)


def _folds_pickle(parts) -> bytes:
    import pickle

    return pickle.dumps([list(p) for p in parts], protocol=2)


if (SHARED / "text2action").is_dir():
    for name, files, culprit in [
        ("exponentially nested lists", {"win2k_labeled_text_data.pkl": _nested_pickle()},
         "win2k_labeled_text_data.pkl"),
        ("folds nested", {"indices/win2k_act_5_fold_indices.pkl": _nested_pickle()},
         "win2k_act_5_fold_indices.pkl"),
        ("negative fold indices", {"indices/win2k_act_5_fold_indices.pkl":
         _folds_pickle([[-1, -2, 3]] + [[i] for i in range(4, 8)])}, "negative"),
        ("folds that overlap", {"indices/win2k_act_5_fold_indices.pkl":
         _folds_pickle([[0, 1, 2]] + [[i, 0] for i in range(3, 7)])}, "shares texts"),
    ]:  # fmt: skip
        case(f"Text2Action: {name}", make=_t2a(files, culprit))


# --- VLN folder: R2R / connectivity / regions / objects / vocab / TSV / checkpoints -------------
_VLN_BASE: dict[str, Path] = {}


def _vln_base(tmp: Path) -> Path:
    """A tiny valid R2R/Matterport folder (generated embedded houses), built once per session."""
    if "root" not in _VLN_BASE:
        sys.path.insert(0, str(ROOT))
        from envs.vln_houses import HouseSpec, write_dataset

        root = tmp.parent / "vln-base"
        if not root.exists():
            write_dataset(
                HouseSpec(
                    train_houses=2,
                    unseen_houses=1,
                    train_paths=4,
                    val_seen_paths=2,
                    val_unseen_paths=3,
                    seed=1,
                ),
                root,
            )
        _VLN_BASE["root"] = root
    return _VLN_BASE["root"]


def _vln(mutate: Callable[[Path], str], extra: str = "", argv=("fedvln",)):
    def make(tmp: Path):
        d = tmp / "vln"
        shutil.copytree(_vln_base(tmp), d)
        culprit = mutate(d)
        return ([*argv, "--run-config", f'fedvln.data-dir="{d}" {extra}'.format(d=d)], culprit)

    return make


def _edit_json(rel: str, edit: Callable) -> Callable[[Path], str]:
    def mutate(d: Path) -> str:
        p = d / rel if "*" not in rel else sorted(d.glob(rel))[0]
        data = json.loads(p.read_text())
        new = edit(data)
        p.write_text(new if isinstance(new, str) else json.dumps(new))
        return p.name

    return mutate


def _first(data, **changes):
    data[0].update(changes)
    return data


def _drop(data, key):
    del data[0][key]
    return data


for split in ("train", "val_seen", "val_unseen"):
    rel = f"r2r/R2R_{split}.json"
    for name, edit in [
        ("not json", lambda d: "{[ not json"),
        ("a dict", lambda d: {"paths": d}),
        ("empty list", lambda d: []),
        ("nested 10k deep", lambda d: "[" * 10000 + "]" * 10000),
        ("instructions a string", lambda d: _first(d, instructions="go to the kitchen")),
        ("instructions empty", lambda d: _first(d, instructions=[])),
        ("instruction not text", lambda d: _first(d, instructions=[5, None])),
        ("path empty", lambda d: _first(d, path=[])),
        ("path unknown viewpoint", lambda d: _first(d, path=["nowhere", "nowhere2"])),
        (
            "path not walk",
            lambda d: _first(
                d, path=[d[0]["path"][0], d[0]["path"][-1]] if len(d[0]["path"]) > 2 else ["x"]
            ),
        ),
        ("heading text", lambda d: _first(d, heading="north")),
        ("heading nan", lambda d: _first(d, heading=float("nan"))),
        ("scan unknown", lambda d: _first(d, scan="nohouse")),
        ("no scan", lambda d: _drop(d, "scan")),
        ("path_id text", lambda d: _first(d, path_id="seven")),
        ("path_id duplicated", lambda d: _first(d, path_id=d[1]["path_id"]) if len(d) > 1 else 0),
    ]:
        case(f"R2R {split}: {name}", make=_vln(_edit_json(rel, edit)))


def _conn_first(d, **changes):
    d[0].update(changes)
    return d


for name, edit in [
    ("not json", lambda d: "nope"),
    ("empty", lambda d: []),
    ("a dict", lambda d: {"a": d}),
    ("pose short", lambda d: _conn_first(d, pose=[0.0] * 5)),
    ("pose text", lambda d: _conn_first(d, pose=["x"] * 16)),
    ("pose nan", lambda d: _conn_first(d, pose=[float("nan")] * 16)),
    ("unobstructed short", lambda d: _conn_first(d, unobstructed=[True])),
    ("unobstructed text", lambda d: _conn_first(d, unobstructed="all")),
    ("no image_id", lambda d: [{k: v for k, v in d[0].items() if k != "image_id"}] + d[1:]),
    ("included text", lambda d: _conn_first(d, included="yes")),
    ("height nan", lambda d: _conn_first(d, height=float("nan"))),
    ("height text", lambda d: _conn_first(d, height="tall")),
]:
    case(f"connectivity: {name}", make=_vln(_edit_json("connectivity/*_connectivity.json", edit)))


def _vln_file(rel: str, content: bytes, culprit: str):
    def mutate(d: Path) -> str:
        p = d / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_bytes(content)
        return culprit

    return mutate


for name, content in [
    ("not json", b"{"),
    ("a list", b"[1, 2]"),
    ("pano_info a list", b'{"pano_info": [1]}'),
    ("room not a dict", b'{"pano_info": {"x": 5}}'),
    ("binary", bytes(range(256))),
]:
    case(
        f"regions: {name}",
        make=_vln(_vln_file("regions/vp2room_label.json", content, "vp2room_label.json")),
    )
for name, content in [
    ("not json", b"[["),
    ("a list", b"[1]"),
    ("scan not a dict", b'{"x": 5}'),
    ("object entry wrong", b'{"x": {"v": [[1, 2, 3]]}}'),
    ("view index 99", b'{"x": {"v": [["chair", [99]]]}}'),
]:
    case(
        f"objects: {name}",
        make=_vln(_vln_file("objects/viewpoint_objects.json", content, "viewpoint_objects.json")),
    )
for name, content in [
    ("binary", bytes(range(256)) * 3),
    ("empty", b""),
    ("no base tokens", b"go\nleft\n"),
    ("utf-16", "<PAD>\n<UNK>\n".encode("utf-16")),
]:
    case(f"vocab: {name}", make=_vln(_vln_file("r2r/train_vocab.txt", content, "train_vocab.txt")))
case(
    "VLN: no connectivity folder",
    make=_vln(lambda d: (shutil.rmtree(d / "connectivity"), "connectivity")[1]),
)
case(
    "VLN: no train split",
    make=_vln(lambda d: ((d / "r2r" / "R2R_train.json").unlink(), "R2R_train.json")[1]),
)
case(
    "VLN: connectivity of a scan missing",
    make=_vln(
        lambda d: (sorted((d / "connectivity").glob("*.json"))[0].unlink(), "_connectivity.json")[1]
    ),
)


def _tsv(content: bytes, culprit="feats.tsv"):
    def make(tmp: Path):
        base = _vln_base(tmp)
        p = tmp / "feats.tsv"
        p.write_bytes(content)
        return (
            ["fedvln", "--run-config", f'fedvln.data-dir="{base}" fedvln.features-tsv="{p}"'],
            culprit,
        )

    return make


for name, content in [
    ("empty", b""),
    ("binary", bytes(range(256)) * 4),
    (
        "bad base64",
        b"scanId\tviewpointId\timage_w\timage_h\tvfov\tfeatures\n"
        b"s\tv\t640\t480\t60\t!!!notbase64\n",
    ),
    (
        "wrong size",
        b"scanId\tviewpointId\timage_w\timage_h\tvfov\tfeatures\ns\tv\t640\t480\t60\tAAAAAA==\n",
    ),
    ("missing columns", b"a\tb\n1\t2\n"),
]:
    case(f"feature TSV: {name}", make=_tsv(content))
case(
    "feature TSV: missing",
    make=lambda tmp: (
        ["fedvln", "--run-config", f'fedvln.features-tsv="{tmp}/none.tsv"'],
        "none.tsv",
    ),
)


def _ckpt(write: Callable[[Path], None]):
    def make(tmp: Path):
        p = tmp / "agent.pt"
        write(p)
        return (
            [
                "fedvln",
                "--stage",
                "augment",
                "--run-config",
                f'fedvln.agent-init="{p}" fedvln.speaker-init="{p}"',
            ],
            "agent.pt",
        )

    return make


def _torch_save(obj):
    def write(p: Path):
        import torch

        torch.save(obj, p)

    return write


class _Evil:
    def __reduce__(self):
        return (print, ("code ran",))


def _pickle(p: Path):
    import pickle

    import torch

    torch.save({"kind": "Follower", "x": _Evil()}, p, pickle_module=pickle)


for name, write in [
    ("junk", lambda p: p.write_bytes(b"junk")),
    ("empty", lambda p: p.write_bytes(b"")),
    ("code-running pickle", _pickle),
    ("a tensor", _torch_save(__import__("torch").zeros(3))),
    ("no kind", _torch_save({"size": {}, "state": {}})),
    ("kind unknown", _torch_save({"kind": "Robot", "size": {}, "state": {}})),
    (
        "size wrong",
        _torch_save({"kind": "Follower", "size": {"hidden": "x"}, "state": {}, "vocab": None}),
    ),
    (
        "state mismatch",
        _torch_save(
            {
                "kind": "Follower",
                "size": {},
                "state": {"w": __import__("torch").zeros(2)},
                "vocab": None,
            }
        ),
    ),
    ("a directory", lambda p: p.mkdir()),
]:
    case(f"checkpoint: {name}", make=_ckpt(write))


# --- running the corpus ------------------------------------------------------------------------
def outcome(c: Case, tmp: Path) -> tuple[str, str]:
    """('clean' | 'traceback' | 'accepted' | 'unnamed' | 'multiline', detail)."""
    sys.path.insert(0, str(ROOT))
    import simulation

    tmp.mkdir(parents=True, exist_ok=True)
    try:
        argv, culprit = c.make(tmp)
        args = simulation.build_parser().parse_args(
            [*argv] + ([] if "--out" in argv or "--resume" in argv else ["--out", str(tmp / "out")])
        )
        simulation.resolve(args)
    except simulation.BadInput as e:
        msg = str(e)
        if "\n" in msg:
            return "multiline", msg
        if culprit.lower() not in msg.lower():
            return "unnamed", f"{msg}  [expected to name {culprit!r}]"
        if (tmp / "out").exists():
            return "wrote", msg
        return "clean", msg
    except BaseException as e:  # noqa: BLE001 - a traceback is what we are counting
        return "traceback", f"{type(e).__name__}: {str(e)[:200]}"
    return "accepted", "no error"


DOC = ROOT / "docs" / "security.md"
BEGIN, END = (
    "<!-- fuzz-corpus: written by python -m tests.fuzz_corpus --docs -->",
    "<!-- /fuzz-corpus -->",
)


def doc_block(tally: dict[str, int] | None = None) -> str:
    """The paragraph of docs/security.md that states the corpus's size and classes (and, from a
    full run, its tally), so that the doc's counts are printed by the corpus, not typed."""
    groups: dict[str, int] = {}
    for c in CASES:
        head = c.name.split(":")[0].split(" ")[0] if ":" not in c.name else c.name.split(":")[0]
        groups[head] = groups.get(head, 0) + 1
    parts = ", ".join(f"{k} {v}" for k, v in sorted(groups.items(), key=lambda kv: -kv[1]))
    told = (
        f" Last full run: {', '.join(f'{v} {k}' for k, v in sorted(tally.items()))}."
        if tally
        else ""
    )
    return f"{BEGIN}\n`tests/fuzz_corpus.py` holds **{len(CASES)} malformed inputs** ({parts}).{told}\n{END}"


def write_doc(tally: dict[str, int] | None = None) -> None:
    text = DOC.read_text()
    a, b = text.index(BEGIN), text.index(END) + len(END)
    DOC.write_text(text[:a] + doc_block(tally) + text[b:])


def main(argv=None) -> int:
    import argparse
    import tempfile

    ap = argparse.ArgumentParser(description="Every malformed input of the corpus, tried.")
    ap.add_argument("--docs", action="store_true", help=f"write the tally into {DOC.name}")
    args = ap.parse_args(argv)
    tally: dict[str, int] = {}
    with tempfile.TemporaryDirectory() as d:
        for i, c in enumerate(CASES):
            kind, detail = outcome(c, Path(d) / f"c{i}")
            tally[kind] = tally.get(kind, 0) + 1
            if kind != "clean":
                print(f"{kind:10s} {c.name}: {detail}")
    print(f"tried {len(CASES)}: " + ", ".join(f"{k} {v}" for k, v in sorted(tally.items())))
    if args.docs:
        write_doc(tally)
        print(f"wrote the tally into {DOC}")
    return 0 if tally.get("clean", 0) == len(CASES) else 1


if __name__ == "__main__":
    sys.exit(main())
