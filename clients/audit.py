"""A party's own log of everything it sent: append-only, hash-chained, verifiable offline.

Why: a data owner must be able to show, after the fact, which arrays left its house, silo or
party, with what noise, in which round, without trusting the server's records (issue 28).
Anchor: NVIDIA FLARE keeps site-side audit logs; ours can be verified offline by anyone: every
record carries its own SHA-256 (`hash`, over all its other fields) and the one of the record
before it (`prev`), so a changed, removed or reordered byte breaks the chain at the first
record it touches. What a chain alone cannot show: records cut off the end, or a whole chain
rewritten by someone holding the file; `summary` prints the head hash and count, to be kept
elsewhere (e.g. beside the server's results) as the anchor.

One JSON line per reply the ClientApp sends (clients/app.py), in
`<state-dir>/audit/partition-<k>.jsonl` on the node's own disk (clients/policy.py says where):

    seq, hash, prev (the previous record's hash; 64 zeros for the first), time, run, node,
    partition, method, round, kind (train | evaluate | query), step, status (sent | refused |
    failed),
    arrays [{record, name, shape, dtype, bytes}], bytes (the message's, as the server's
    clients.csv counts them), payload_sha256 (over every array's name, dtype, shape and bytes),
    metrics, sigma and clip (FedRL: the noise and bound its releases carry), epsilon (FedRL:
    privacy spent so far), policy (the file that bound this reply) and policy_sha256 (the
    SHA-256 of its bytes as read for this reply), reason (refused, failed).

`fedembodied-audit verify PATH` and `fedembodied-audit summary PATH` (`main` below).
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import sys
import time
from pathlib import Path

from flwr.app import Message

from contracts.messages import SERVER_ROUND
from contracts.safe_files import open_append, write_atomic

GENESIS = "0" * 64


def record_hash(record: dict) -> str:
    """SHA-256 of a record's canonical JSON, its own `hash` left out."""
    body = {k: v for k, v in record.items() if k != "hash"}
    return hashlib.sha256(json.dumps(body, sort_keys=True).encode()).hexdigest()


def describe(content) -> tuple[list[dict], str, dict]:
    """(every array's record, name, shape, dtype and bytes; the payload digest; the metrics)
    of a reply's RecordDict, in record then array order. An array's `bytes` is its serialized
    data; a message's total (`bytes` of the record) is Flower's `count_bytes`, which adds each
    array's name and header, as the server's clients.csv counts it (strategies/screening.py)."""
    arrays, digest = [], hashlib.sha256()
    for rname in sorted(content.array_records):
        for name, arr in content.array_records[rname].items():
            data = bytes(arr.data)
            arrays.append(
                {
                    "record": rname,
                    "name": name,
                    "shape": list(arr.shape),
                    "dtype": str(arr.dtype),
                    "bytes": len(data),
                }
            )
            for part in (rname, name, str(arr.dtype), repr(tuple(arr.shape))):
                digest.update(part.encode() + b"\0")
            digest.update(data)
    metrics = {}
    for rname in sorted(content.metric_records):
        for k, v in content.metric_records[rname].items():
            metrics[k] = v
    return arrays, digest.hexdigest(), metrics


def append(path: Path, record: dict) -> dict:
    """Append `record` to the chain in `path` (created with its folder), under an exclusive
    lock: nodes of one machine sharing a folder never interleave a line. Returns it, stamped."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with open_append(path) as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        try:
            _cut_torn_tail(path, f)
            try:
                last = json.loads(_last_line(f) or "null")
            except (UnicodeDecodeError, json.JSONDecodeError):
                raise BrokenLog(
                    f"{path}: its last record is not a JSON line; the node appends nothing "
                    f"to a broken chain (`fedembodied-audit verify {path}` says where)"
                ) from None
            stamped = {
                "seq": last["seq"] + 1 if last else 0,
                "prev": last["hash"] if last else GENESIS,
                **record,
            }
            stamped["hash"] = record_hash(stamped)
            f.seek(0, os.SEEK_END)
            f.write((json.dumps(stamped, sort_keys=True) + "\n").encode())
            f.flush()
            os.fsync(f.fileno())
        finally:
            fcntl.flock(f, fcntl.LOCK_UN)
    return stamped


def _cut_torn_tail(path: Path, f) -> None:
    """A crash mid-append leaves a last line with no newline: never a whole record (a record is
    written and fsynced as one line), so it is moved aside to `<log>.torn-<time>` (nothing is
    lost) and the chain goes on from the last whole record, with one line on stderr saying
    so. Without this every later append of the node failed on a JSONDecodeError."""
    f.seek(0, os.SEEK_END)
    end = f.tell()
    if end == 0:
        return
    f.seek(end - 1)
    if f.read(1) == b"\n":
        return
    pos = end
    while pos > 0:  # back to the last newline
        step = min(4096, pos)
        f.seek(pos - step)
        chunk = f.read(step)
        k = chunk.rfind(b"\n")
        if k >= 0:
            pos = pos - step + k + 1
            break
        pos -= step
    f.seek(pos)
    torn = f.read()
    aside = path.with_name(f"{path.name}.torn-{time.strftime('%Y%m%dT%H%M%S')}")
    write_atomic(aside, torn)
    f.truncate(pos)
    print(
        f"fedembodied audit: {path}: its last line was torn ({len(torn)} bytes, no newline: "
        f"a crash mid-append); moved to {aside}, the chain goes on from record {_count(f)}",
        file=sys.stderr,
    )


def _count(f) -> int:
    f.seek(0)
    return sum(1 for _ in f)


def _last_line(f) -> str:
    f.seek(0, os.SEEK_END)
    end = f.tell()
    if end == 0:
        return ""
    block, data = 4096, b""
    pos = end
    while pos > 0:
        step = min(block, pos)
        pos -= step
        f.seek(pos)
        data = f.read(step) + data
        if data.rstrip(b"\n").count(b"\n") >= 1:
            break
    return data.rstrip(b"\n").split(b"\n")[-1].decode()


def record_reply(
    path: Path,
    msg: Message,
    reply: Message | None,
    *,
    partition: int,
    method: str,
    policy_source: str,
    policy_digest: str = "",
    privacy: dict | None = None,
    reason: str = "",
    status: str = "sent",
    cost: dict | None = None,
) -> dict:
    """Log one reply (or, with `reply` None, a refusal or a failure and its `reason`), with
    what handling it cost on this node (clients/costs.py) when measured."""
    conf = msg.content.config_records.get("config", {})
    arrays, digest, metrics = describe(reply.content) if reply is not None else ([], "", {})
    total = (
        0 if reply is None else sum(r.count_bytes() for r in reply.content.array_records.values())
    )
    eps = [v for k, v in metrics.items() if k.endswith("claimed-epsilon")]
    record = {
        "time": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        "run": int(msg.metadata.run_id),
        "node": int(msg.metadata.dst_node_id),
        "partition": partition,
        "method": method,
        "round": int(conf.get(SERVER_ROUND, 0)),
        "kind": str(msg.metadata.message_type),
        "step": str(conf.get("step", "")),
        "status": status,
        "arrays": arrays,
        "bytes": total,
        "payload_sha256": digest,
        "metrics": metrics,
        "policy": policy_source,
        "policy_sha256": policy_digest,  # the bytes of the policy in force, not only its path
        **({"epsilon": float(eps[0])} if eps else {}),
        **(privacy or {}),  # the party's own account of its privacy (FedRL), when it has one
        **({"reason": reason} if reason else {}),
        **({"cost": cost} if cost else {}),
    }
    return append(path, record)


class BrokenLog(ValueError):
    """The first record where a log stops being what its party wrote."""


def read(path: str | Path) -> list[dict]:
    """The records of a log whose chain holds, or BrokenLog naming the first broken record."""
    records, prev = [], GENESIS
    with open(path, "rb") as f:
        for n, raw in enumerate(f, start=1):
            try:
                line = raw.decode().rstrip("\n")
                rec = json.loads(line)
            except (UnicodeDecodeError, json.JSONDecodeError):
                raise BrokenLog(f"{path}: record {n} is not a JSON line") from None
            if not isinstance(rec, dict) or rec.get("seq") != n - 1:
                raise BrokenLog(
                    f"{path}: record {n} has seq {rec.get('seq') if isinstance(rec, dict) else '?'}"
                    f", expected {n - 1} (a record removed, added or reordered)"
                )
            if rec.get("hash") != record_hash(rec):
                raise BrokenLog(
                    f"{path}: record {n} (seq {n - 1}) was changed after it was written"
                )
            if json.dumps(rec, sort_keys=True) != line:
                raise BrokenLog(
                    f"{path}: record {n} (seq {n - 1}) was reformatted after it was written"
                )
            if rec.get("prev") != prev:
                raise BrokenLog(
                    f"{path}: record {n} (seq {n - 1}) does not chain to the record before it "
                    "(a record removed, added or reordered)"
                )
            records.append(rec)
            prev = rec["hash"]
    return records


def summary(records: list[dict]) -> str:
    """What left this party, one row per run, round, kind and step (with the method and the
    time of the first message): messages sent and refused, arrays, bytes, the noise and bound on
    them and the privacy spent by then ("-" where a release carries no noise figure); then the
    privacy spent per run, in total."""
    import pandas as pd

    if not records:
        return "(empty log)"
    df = pd.DataFrame(records)
    for col in ("sigma", "clip", "epsilon", "method", "time"):
        if col not in df:
            df[col] = float("nan") if col in ("sigma", "clip", "epsilon") else ""
    df["n_arrays"] = df["arrays"].map(len)
    df["sent"] = df["status"].eq("sent")
    df["refused"] = df["status"].eq("refused")
    table = (
        df.groupby(["run", "partition", "method", "round", "kind", "step"], sort=True)
        .agg(
            time=("time", "min"),
            sent=("sent", "sum"),
            refused=("refused", "sum"),
            arrays=("n_arrays", "sum"),
            bytes=("bytes", "sum"),
            sigma=("sigma", "min"),
            clip=("clip", "max"),
            epsilon=("epsilon", "max"),
        )
        .reset_index()
        .sort_values(["run", "partition", "time"], kind="stable")
    )
    for col in ("sigma", "clip", "epsilon"):
        table[col] = table[col].map(lambda v: "-" if v != v else f"{v:.4g}")
    totals = []
    for (run, part), g in df.groupby(["run", "partition"], sort=True):
        eps = g["epsilon"].max()
        totals.append(
            f"run {run} partition {part}: "
            + (f"epsilon {eps:.4g} in total" if eps == eps else "no noised release recorded")
        )
    head = records[-1]
    return (
        table.to_string(index=False)
        + "\n"
        + "\n".join(totals)
        + f"\n{len(records)} records; head hash {head['hash']} (keep it elsewhere: the anchor)"
    )


def main(argv=None) -> int:
    """fedembodied-audit verify PATH | summary PATH"""
    import argparse

    ap = argparse.ArgumentParser(
        prog="fedembodied-audit", description="Check or summarise a party's audit log."
    )
    ap.add_argument("command", choices=["verify", "summary"])
    ap.add_argument("path", nargs="+", help="audit log(s): <state-dir>/audit/partition-K.jsonl")
    args = ap.parse_args(argv)
    status = 0
    for path in args.path:
        try:
            records = read(path)
        except OSError as e:
            print(f"fedembodied-audit: {path}: {e.strerror}", file=sys.stderr)
            return 2
        except BrokenLog as e:
            print(f"fedembodied-audit: BROKEN {e}", file=sys.stderr)
            status = 1
            continue
        if args.command == "verify":
            print(
                f"{path}: OK, {len(records)} records chain from genesis to {records[-1]['hash'] if records else GENESIS}"
            )
        else:
            print(f"== {path}\n{summary(records)}")
    return status


if __name__ == "__main__":
    raise SystemExit(main())
