"""How many messages a FedRL run sends, counted on the protocol itself (issue 63 item 1).

    python -m experiments.bench.fedrl_messages --map-dir ../shared/data/gridworld [--rounds 200]
           [--eval-every 10] [--size 8] [--force]

Runs Table 1's recipe (paper rules, the shipped defaults, study mode, seed 0) twice in one
process through the protocol's own `send`, counting every message per round: `chained`, the
shipped evaluation (the independent plays of an evaluation step together, one chain of 2
messages a step for all: `Protocol.play` in training/fedrl_protocol.py), and `one_by_one`, every play
in its own chain, as each play was sent before issue 63 (a chain of one play sends exactly the
messages a play sent then). Both runs compute the same numbers (tests/test_fedrl.py), so the
ratio is the messages saved, nothing else. Deployed, each message is a ClientApp process and a
chain of round trips (docs/performance.md): the wall time of a deployed study scales with it.
Writes experiments/results/fedrl_messages.csv.
"""

from __future__ import annotations

import argparse
import sys
import time

import pandas as pd

from experiments.fedrl.table1 import settings_of, splits_for
from experiments.simulate import RESULTS, command_line
from experiments.tables import refuse_overwrite
from training.fedrl_protocol import DirectTransport, Protocol, Selection, checkpoints


class OneByOne(Protocol):
    """Every play of an evaluation in its own chain of messages (the protocol before issue 63)."""

    def evaluate(self, split, weights="last"):
        self.flush()
        out = {}
        for w in checkpoints(weights):
            for noise in (True, False):
                out.update(self.play([(split, w, noise)]))
        return out


def count(s, rounds: int, eval_every: int, one_by_one: bool) -> pd.DataFrame:
    """Messages per round of one run; each round's kind (train | evaluate | last)."""
    run = DirectTransport(s)
    sent = [0]
    send = run.send

    def counted(*a, **k):
        sent[0] += 1
        return send(*a, **k)

    run.proto = (OneByOne if one_by_one else Protocol)(s, counted)
    select, rows, t0 = Selection(s.select_key()), [], time.perf_counter()
    for rnd in range(1, rounds + 1):
        last, before = rnd == rounds, sent[0]
        evaluating = last or rnd % eval_every == 0
        row = run.proto.train_round(evaluating)
        if evaluating:
            row.update(select(run, rnd, last, bool(len(s.test))))
        kind = "last" if last else "evaluate" if evaluating else "train"
        rows.append({"round": rnd, "kind": kind, "messages": sent[0] - before, **row})
    print(f"  {'one by one' if one_by_one else 'chained'}: {time.perf_counter() - t0:.0f} s")
    return pd.DataFrame(rows)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--map-dir", required=True, help="folder of gridworld_o_<n>.mat")
    ap.add_argument("--size", type=int, default=8, choices=(8, 16, 32))
    ap.add_argument("--rounds", type=int, default=200)
    ap.add_argument("--eval-every", type=int, default=10)
    ap.add_argument("--force", action="store_true", help="overwrite the result file")
    a = ap.parse_args(argv)
    if a.rounds < 1 or a.eval_every < 1:
        ap.error("--rounds and --eval-every must be >= 1")
    out = RESULTS / "fedrl_messages.csv"
    refuse_overwrite([out], a.force)
    map_file = f"{a.map_dir}/gridworld_o_{a.size}.mat"
    job = {"seed": 0, "size": a.size, "rules": "paper", "map_file": map_file, "extra": {}}
    job["ranges"] = splits_for(
        map_file, argparse.Namespace(train_maps="", valid_maps="", test_maps="")
    )
    s = settings_of(job)
    s.check_maps()
    runs = {
        k: count(s, a.rounds, a.eval_every, k == "one_by_one") for k in ("one_by_one", "chained")
    }
    # the same numbers both ways (NaN equal to NaN): the count is the only difference
    same = (
        runs["chained"].drop(columns="messages").equals(runs["one_by_one"].drop(columns="messages"))
    )
    rows = []
    for kind in ("train", "evaluate", "last", "run"):
        pick = (lambda d: d) if kind == "run" else (lambda d, k=kind: d[d.kind == k])
        before, after = (int(pick(runs[k]).messages.sum()) for k in ("one_by_one", "chained"))
        n = len(pick(runs["chained"]))
        rows.append(
            {
                "rounds": kind,
                "count": n,
                "messages_one_by_one": before if kind == "run" else before // max(n, 1),
                "messages_chained": after if kind == "run" else after // max(n, 1),
                "ratio": round(after / before, 3),
                "same_numbers": same,
                "size": a.size,
                "run_rounds": a.rounds,
                "eval_every": a.eval_every,
                "command": command_line(__file__, argv),
            }
        )
    table = pd.DataFrame(rows)
    table.to_csv(out, index=False)
    print(table.drop(columns="command").to_string(index=False))
    print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
