"""What carrying a party's state in `context.state` costs against a file on the node's disk.

    python -m experiments.study experiments/studies/state_transfer.toml --jobs 1   # ~1 min

Why (issue 63): Flower hands `context.state` from the SuperNode to each message's ClientApp
process and back. A FedRL party's replay, networks and key are 13-15 MB by round 200 of
Table 1; clients/state_store.put_arrays keeps them in a file instead. Per state size (the study
file's `mb`, float32 arrays) and repeat, this times the two paths in one process: Flower's own
serde out of one process and into the next (RecordDict -> protobuf bytes -> RecordDict, twice:
reply, then next message; the gRPC hops are not counted) and writing and reading the .npz the
way put_arrays/get_arrays do. The ratio is context over file within the same repeat
(experiments.tables.ratio_within_repeat), so a change of load between repeats hits both.
Results: experiments/results/state_transfer{,_runs}.csv and .png. Times: run it alone.
"""

from __future__ import annotations

import io
import tempfile
import time
from pathlib import Path

import numpy as np
import pandas as pd
from flwr.app import RecordDict
from flwr.common.serde import recorddict_from_proto, recorddict_to_proto
from flwr.proto.recorddict_pb2 import RecordDict as ProtoRecordDict  # pylint: disable=E0611

from contracts.records import array_record, arrays_of
from experiments import figures
from experiments.tables import ratio_within_repeat

CONTEXT = "context.state (Flower's serde, both ways)"
FILE = "file on the node's disk (write + read)"


def through_context(arrays: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """The arrays as the next message's ClientApp reads them from its context."""
    record = RecordDict({"party": array_record(arrays)})
    for _ in range(2):  # the ClientApp's reply to the SuperNode, then on to the next process
        proto = ProtoRecordDict()
        proto.ParseFromString(recorddict_to_proto(record).SerializeToString())
        record = recorddict_from_proto(proto)
    return arrays_of(record["party"])


def through_file(arrays: dict[str, np.ndarray], path: Path) -> dict[str, np.ndarray]:
    """The arrays as the next message's ClientApp reads them from the node's disk."""
    buf = io.BytesIO()
    np.savez(buf, **arrays)
    path.write_bytes(buf.getbuffer())
    with np.load(path, allow_pickle=False) as f:
        return {k: f[k] for k in f.files}


def measure(mb: float, repeats: int) -> list[dict]:
    """One row per path and repeat: seconds to carry `mb` of state (ten float32 arrays)."""
    rng = np.random.default_rng(0)
    per = int(mb * 1e6 / 4 / 10)
    arrays = {f"replay.{i}": rng.standard_normal(per).astype(np.float32) for i in range(10)}
    rows = []
    with tempfile.TemporaryDirectory() as d:
        paths = {CONTEXT: lambda: through_context(arrays),
                 FILE: lambda: through_file(arrays, Path(d) / "p.npz")}  # fmt: skip
        for repeat in range(repeats):
            for name, fn in paths.items():
                t = time.perf_counter()
                fn()
                rows.append({"mb": mb, "path": name, "repeat": repeat,
                             "seconds": time.perf_counter() - t})  # fmt: skip
    return rows


def check(cell: dict, where) -> None:
    """What a run of this study accepts (experiments/study.py)."""
    if cell["mb"] <= 0 or cell["repeats"] < 1:
        raise ValueError(f"{where}: grid.mb must be > 0 and grid.repeats >= 1")


def summarize(runs: pd.DataFrame) -> pd.DataFrame:
    """Per size and path: the median milliseconds, and the median ratio to the file's."""
    out = []
    for mb, one in runs.groupby("mb"):
        one = ratio_within_repeat(one, "seconds", one["path"] == FILE)
        for path, r in one.groupby("path", sort=False):
            out.append({"mb": mb, "path": path, "repeats": len(r),
                        "median_ms": round(1000 * r["seconds"].median(), 1),
                        "max_ms": round(1000 * r["seconds"].max(), 1),
                        "ratio_to_file": round(r["ratio"].median(), 2)})  # fmt: skip
    return pd.DataFrame(out)


def plot(runs: pd.DataFrame, png, command: str) -> None:
    """Median milliseconds per state size, each path, the ratio written over the context's."""
    table = summarize(runs)
    fig, ax = figures.subplots(figsize=(6.5, 4))
    for k, (path, t) in enumerate(table.groupby("path", sort=False)):
        ax.plot(t["mb"], t["median_ms"], "o-", color=f"C{k}", label=path)
        if path == CONTEXT:
            for _, r in t.iterrows():
                ax.annotate(f"{r.ratio_to_file:.1f}x", (r.mb, r.median_ms), fontsize=8,
                            textcoords="offset points", xytext=(0, 6), ha="center")  # fmt: skip
    ax.set(xlabel="party state (MB of float32)", ylabel="median ms per message",
           title="carrying a party's state between messages")  # fmt: skip
    ax.legend(fontsize=8)
    fig.tight_layout()
    figures.save(fig, png, command)
