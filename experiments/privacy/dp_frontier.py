"""Privacy-utility frontier of FedAvg (or CDL) on the embedded driving silos: RMSE against epsilon.

    python -m experiments.privacy.dp_frontier [--seeds 0 1 2 --rounds 5 --num-clients 10 --clip 2]
    python -m experiments.privacy.dp_frontier --method cdl   # CDL on its peer topology
    python -m experiments.privacy.dp_frontier --method cdl --batchnorm local   # C = 0.25
    python -m experiments.privacy.dp_frontier --calibrate    # the update norms that set C
    python -m experiments.privacy.dp_frontier --clipping adaptive   # central rows, C adapted

With `--method cdl` the rows are CDL with no DP and with party-side DP (each silo's LocalDpMod
noises the backbone it sends its neighbours; a peer topology has no aggregate for central DP),
scored as each silo's own model on the pooled test set (`rmse`), beside the same floors;
written as dp_frontier_cdl*.

With `--batchnorm local` every row, floors included, keeps BatchNorm running statistics on the
silo (run config `driving.batchnorm-statistics = "local"`, models/state.py): they are neither
released, clipped nor noised, and every model is scored on a silo's test split with statistics
re-estimated on that silo's training images; written as <name>_bnlocal*. The no-DP row is then
FedAvg/CDL with statistics kept local (FedBN's rule for the statistics; the affine parameters
still travel), the fair ceiling for the DP rows beside it.

Same silos, rounds, seeds and local training for every row; only what the parties' updates
carry changes (config/dp.py): central DP (the parties clip to C, Flower's wrapper adds
N(0, (zC/m)^2) to the mean) over noise multipliers z, and local DP (Flower's LocalDpMod on each
party) over per-release epsilons. Epsilon is at delta 1e-5 after all rounds: the server's
accountant (central) or the parties' own ledgers (local), as the run recorded it in
rounds.csv. A run whose noise wrecks the model (NaN updates, refused until
`max-empty-rounds` stops it) is scored at its last recorded round and counted in `stopped`.
Floors beside them, scored on the same pooled test set: FedAvg with no DP (the ceiling of
this study), each silo trained alone for as many epochs as the run trains
(local-only, no release at all: epsilon 0), and the constant predictor.

With `--clipping adaptive` the central rows adapt C each round toward the median update norm
(run config `dp.clipping = "adaptive"`, Andrew et al. 2021; strategies/dp.py), starting from
the calibrated C below, and there are no local rows (LocalDpMod's C is fixed); written as
<name>_adaptive*, beside the same no-DP runs and floors. A z at or above 2 sigma_b = m / 10
cannot be split between the update and the clip bits' count, and is left out, saying so.

The clip C: about the median norm of a silo's round-2 update (FedAvg: trained from the mean
of the round-1 models), the usual choice (Andrew et al. 2021 adapt C towards the median). What
is released decides it: `--calibrate` measures both and writes dp_frontier_clip.csv. With
statistics shared the norm is ~2 (round 1's ~15 is almost all the statistics leaving their
initial values): C = 2. With statistics local only the weights travel, ~0.25: C = 0.25 (a
C of 2 there would never bind and would only scale the noise up 8x).

Writes experiments/results/dp_frontier.csv (one row per setting, mean and sd over seeds),
dp_frontier_runs.csv (one row per run) and dp_frontier.png.
"""

from __future__ import annotations

import argparse
import subprocess

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402

from experiments import figures  # noqa: E402
from experiments.simulate import RESULTS, ROOT, command_line, simulate  # noqa: E402
from experiments.tables import redraw  # noqa: E402
from strategies.floors import headline_rmse  # noqa: E402

CENTRAL_Z = (0.003, 0.01, 0.03, 0.1, 0.3, 1.0)
LOCAL_EPS = (100.0, 1000.0, 10000.0)
NAME = "dp_frontier"
LABEL = {"fedavg": "FedAvg", "cdl": "CDL"}
FAILED = "stopped.txt"  # a run the noise stopped (every update NaN): its last round is scored


CLIP = {"shared": 2.0, "local": 0.25}  # C by what is released (module docstring, --calibrate)
CLIP_LR = 0.2  # adaptive clipping's eta_C: Andrew et al.'s and the run config's default


def name_of(
    method: str,
    batchnorm: str = "shared",
    clip: float | None = None,
    clipping: str = "fixed",
    clip_lr: float = CLIP_LR,
) -> str:
    """Results name: dp_frontier[_cdl][_bnlocal], plus _clip<C> when C is not the calibrated
    one (a control, never written over the study), plus _adaptive[_lr<eta>] for adaptive C."""
    name = NAME if method == "fedavg" else f"{NAME}_{method}"
    name = name if batchnorm == "shared" else f"{name}_bnlocal"
    name = name if clip in (None, CLIP[batchnorm]) else f"{name}_clip{clip:g}"
    if clipping == "adaptive":
        name += "_adaptive" + ("" if clip_lr == CLIP_LR else f"_lr{clip_lr:g}")
    return name


def settings(args) -> list[tuple[str, float, str]]:
    """(mode, knob, run config) of every row: z for central, per-release epsilon for local
    (CDL: local only, the party-side DP of a peer topology)."""
    bn = 'driving.batchnorm-statistics="local"' if args.batchnorm == "local" else ""
    base = f"dp.clip={args.clip} {bn}".strip()
    rows = [("none", 0.0, bn)]
    zs = args.z if args.method == "fedavg" else []
    adaptive = getattr(args, "clipping", "fixed") == "adaptive"
    if adaptive:
        base += f' dp.clipping="adaptive" dp.clip-lr={args.clip_lr}'
        zs = [z for z in zs if z < args.num_clients / 10]  # below 2 sigma_b (module docstring)
    rows += [("central", z, f'dp.mode="central" dp.noise-multiplier={z} {base}') for z in zs]
    eps = [] if adaptive else args.local_eps  # LocalDpMod's C is fixed
    rows += [("local", e, f'dp.mode="local" dp.local-epsilon={e} {base}') for e in eps]
    return rows


def pooled_rmse(model, silos, batchnorm: str = "shared") -> float:
    """A model's RMSE on the union of the silos' test splits; with statistics kept local, each
    silo scores it with statistics re-estimated on its own training images (as the run's
    evaluate handler does: clients/driving_client.scored)."""
    from training.steering import estimate_statistics, evaluate_steering

    if batchnorm == "shared":
        xt = np.concatenate([s.x_test for s in silos])
        yt = np.concatenate([s.y_test for s in silos])
        return float(np.sqrt(evaluate_steering(model, xt, yt)[0]))
    mse = [evaluate_steering(estimate_statistics(model, s.x_train), s.x_test, s.y_test)[0]
           for s in silos]  # fmt: skip
    n = [len(s.y_test) for s in silos]
    return float(np.sqrt(np.average(mse, weights=n)))


def update_norms(args, seed: int) -> list[dict]:
    """Each silo's L2 update norm with and without BatchNorm statistics, in round 1 (from the
    initial model) and round 2 (from the mean of the round-1 models): what sets C."""
    import torch

    from config import parse
    from envs.driving_silos import make_silo
    from models.resnet8 import ResNet8
    from models.state import STATISTICS, initial_state, shared_state
    from training.steering import LocalOptimizer, train_steering

    d = parse({}).driving
    torch.set_num_threads(2)
    silos = [
        make_silo(i, seed, d.train_per_silo, d.test_per_silo, d.image_size, d.channels)
        for i in range(args.num_clients)
    ]
    start = {k: v.clone() for k, v in initial_state(d.image_size, d.channels, seed).items()}
    rows = []
    for rnd in (1, 2):
        ends = []
        for i, s in enumerate(silos):
            model = ResNet8(d.image_size, d.channels)
            model.load_state_dict(start, strict=False)
            train_steering(model, s.x_train, s.y_train, epochs=d.local_epochs,
                           optim=LocalOptimizer(lr=d.lr), batch_size=d.batch_size,
                           seed=seed * 1000 + 100 * rnd + i)  # fmt: skip
            end = shared_state(model)
            sq = {k: float(((end[k] - start[k]).double() ** 2).sum()) for k in end}
            weights = sum(v for k, v in sq.items() if not k.endswith(STATISTICS))
            rows.append({"seed": seed, "round": rnd, "silo": i,
                         "norm_with_statistics": sum(sq.values()) ** 0.5,
                         "norm_weights_only": weights**0.5})  # fmt: skip
            ends.append(end)
        start = {k: sum(e[k] for e in ends) / len(ends) for k in ends[0]}
    return rows


def kept_floor(args, work, seed: int) -> dict:
    """local_only, computed once per runs folder and seed (floors-s<seed>.json): it does not
    depend on C, so a control reuses its study's."""
    import json

    key = {"rounds": args.rounds, "num_clients": args.num_clients, "batchnorm": args.batchnorm}
    path = work / f"floors-s{seed}.json"
    if path.is_file() and json.loads(path.read_text()).get("key") == key:
        return json.loads(path.read_text())["floor"]
    floor = local_only(args, seed)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({"key": key, "floor": floor}))
    return floor


def local_only(args, seed: int) -> dict:
    """Each silo trains alone (rounds x local epochs on its own data, no release), scored on
    the pooled test set; the mean over silos. And the constant predictor (pooled train mean)."""
    import torch

    from config import parse
    from envs.driving_silos import make_silo
    from models.resnet8 import ResNet8
    from training.steering import LocalOptimizer, train_steering

    d = parse({}).driving
    silos = [
        make_silo(i, seed, d.train_per_silo, d.test_per_silo, d.image_size, d.channels)
        for i in range(args.num_clients)
    ]
    yt = np.concatenate([s.y_test for s in silos])
    torch.set_num_threads(2)
    rmse = []
    for i, s in enumerate(silos):
        torch.manual_seed(seed * 1000 + i)
        model = ResNet8(d.image_size, d.channels)
        train_steering(
            model,
            s.x_train,
            s.y_train,
            epochs=args.rounds * d.local_epochs,
            optim=LocalOptimizer(lr=d.lr),
            batch_size=d.batch_size,
            seed=seed * 1000 + i,
        )
        rmse.append(pooled_rmse(model, silos, args.batchnorm))
    y = np.concatenate([s.y_train for s in silos])
    return {
        "seed": seed,
        "local_only_rmse": float(np.mean(rmse)),
        "constant_rmse": float(np.sqrt(np.mean((yt - y.mean()) ** 2))),
    }


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--method", choices=list(LABEL), default="fedavg")
    p.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--num-clients", type=int, default=10)
    p.add_argument(
        "--clip",
        type=float,
        default=None,
        help="C (default: 2 with statistics shared, 0.25 local; another C is a "
        "control written under its own name)",
    )
    p.add_argument(
        "--batchnorm",
        choices=("shared", "local"),
        default="shared",
        help="local: statistics never leave a silo, in every row (module docstring)",
    )
    p.add_argument(
        "--clipping",
        choices=("fixed", "adaptive"),
        default="fixed",
        help="adaptive: the central rows adapt C toward the median update norm, from --clip "
        "(module docstring)",
    )
    p.add_argument("--clip-lr", type=float, default=CLIP_LR, help="adaptive clipping's eta_C")
    p.add_argument("--z", type=float, nargs="+", default=list(CENTRAL_Z))
    p.add_argument("--local-eps", type=float, nargs="+", default=list(LOCAL_EPS))
    p.add_argument("--work", default="", help="runs folder (default runs/<results name>)")
    p.add_argument("--plot-only", action="store_true", help="redraw the figure from the CSVs")
    p.add_argument(
        "--calibrate",
        action="store_true",
        help="measure the update norms that set C (dp_frontier_clip.csv), then stop",
    )
    args = p.parse_args(argv)
    if args.clipping == "adaptive" and args.method != "fedavg":
        raise SystemExit("dp_frontier: --clipping adaptive is central DP's: --method fedavg")
    if args.clipping == "adaptive":
        dropped = [z for z in args.z if z >= args.num_clients / 10]
        if dropped:
            print(f"dp_frontier: z {dropped} left out: adaptive clipping needs z below "
                  f"2 sigma_b = {args.num_clients / 10:g} with {args.num_clients} silos")  # fmt: skip
    name = name_of(args.method, args.batchnorm, args.clip, args.clipping, args.clip_lr)
    args.clip = CLIP[args.batchnorm] if args.clip is None else args.clip
    # a control shares its study's runs folder: the no-DP runs (no C) are the same runs
    work = args.work or str(ROOT / "runs" / name_of(args.method, args.batchnorm))
    control = args.clip != CLIP[args.batchnorm]
    if args.calibrate:
        norms = pd.DataFrame([r for s in args.seeds for r in update_norms(args, s)])
        RESULTS.mkdir(parents=True, exist_ok=True)
        norms.to_csv(RESULTS / f"{NAME}_clip.csv", index=False, float_format="%.6g")
        print(norms.groupby("round")[["norm_with_statistics", "norm_weights_only"]].median())
        return 0
    if args.plot_only:
        return redraw(RESULTS / f"{name}.csv", lambda table, cmd: draw(table, cmd, name))
    runs = []
    for seed in args.seeds:
        for mode, knob, run_config in settings(args):
            tag = mode if mode == "none" else f"{mode}-{knob:g}"
            tag += f"-clip{args.clip:g}" if control and mode != "none" else ""
            if args.clipping == "adaptive" and mode == "central":
                tag += "-adaptive" + ("" if args.clip_lr == CLIP_LR else f"-lr{args.clip_lr:g}")
            out = ROOT / work / f"{tag}-s{seed}"
            failed = (out / FAILED).is_file()
            if not failed:
                try:
                    simulate(args.method, out, rounds=args.rounds, seed=seed,
                             num_clients=args.num_clients, run_config=run_config)  # fmt: skip
                except subprocess.CalledProcessError:  # the noise wrecked the model: NaN updates
                    failed = True  # are refused until the run stops (max-empty-rounds)
                    (out / FAILED).write_text("the run stopped: see server.log\n")
            r = pd.read_csv(out / "rounds.csv")
            r = r.rename(columns={headline_rmse(r.columns): "rmse"})  # CDL's: each silo's model
            last = r[r["round"] == r["round"].max()].iloc[0]
            eps = float(r["dp_epsilon"].max()) if "dp_epsilon" in r and mode != "none" else np.inf
            runs.append(
                {
                    "mode": mode,
                    "knob": knob,
                    "seed": seed,
                    "rmse": float(last["rmse"]),
                    "best_rmse": float(r["rmse"].min()),
                    "epsilon": eps,
                    "rounds_done": int(r["round"].max()),
                    "stopped": failed,
                    # the C of the last round (adaptive clipping moves it; fixed: --clip)
                    "clip_last": float(r["dp_clip"].dropna().iloc[-1])
                    if "dp_clip" in r and r["dp_clip"].notna().any()
                    else np.nan,
                }  # fmt: skip
            )
            print(runs[-1], flush=True)
    floors = pd.DataFrame([kept_floor(args, ROOT / work, s) for s in args.seeds])
    runs = pd.DataFrame(runs)
    table = (
        runs.groupby(["mode", "knob"], sort=False)
        .agg(
            epsilon=("epsilon", "mean"),
            rmse=("rmse", "mean"),
            rmse_sd=("rmse", "std"),
            best_rmse=("best_rmse", "mean"),
            seeds=("seed", "nunique"),
            stopped=("stopped", "sum"),
            clip_last=("clip_last", "mean"),
        )
        .reset_index()
    )
    for floor, col in (("local-only (no release)", "local_only_rmse"),
                      ("constant (pooled train mean)", "constant_rmse")):  # fmt: skip
        table.loc[len(table)] = {
            "mode": floor, "knob": np.nan, "epsilon": 0.0 if "local" in floor else np.nan,
            "rmse": floors[col].mean(), "rmse_sd": floors[col].std(),
            "best_rmse": np.nan, "seeds": len(floors), "stopped": 0,
        }  # fmt: skip
    table = table.merge(versus(runs, floors), on=["mode", "knob"], how="left")
    fixed = RESULTS / f"{name_of(args.method, args.batchnorm, args.clip)}_runs.csv"
    if args.clipping == "adaptive" and fixed.is_file():  # the same z with C fixed, by seed
        table = table.merge(versus_fixed(runs, pd.read_csv(fixed)), on=["mode", "knob"], how="left")
    table.insert(2, "clip", args.clip)
    table.insert(3, "clipping", args.clipping)
    table.insert(4, "rounds", args.rounds)
    table.insert(5, "silos", args.num_clients)
    table.insert(0, "method", args.method)
    table.insert(1, "batchnorm", args.batchnorm)
    RESULTS.mkdir(parents=True, exist_ok=True)
    cmd = command_line(__file__, argv)
    table.assign(command=cmd).to_csv(RESULTS / f"{name}.csv", index=False, float_format="%.6g")
    seeded = [floors.assign(mode=mode, rmse=floors[col])[["mode", "seed", "rmse"]]
              for mode, col in (("local-only (no release)", "local_only_rmse"),
                                ("constant (pooled train mean)", "constant_rmse"))]  # fmt: skip
    runs = pd.concat([runs, *seeded], ignore_index=True)  # the floors seed by seed too
    runs.to_csv(RESULTS / f"{name}_runs.csv", index=False, float_format="%.6g")
    draw(table, cmd, name)
    print(table.to_string(index=False))
    return 0


def versus(runs: pd.DataFrame, floors: pd.DataFrame) -> pd.DataFrame:
    """Per setting: its last-round RMSE minus each silo alone's, and minus no DP's, paired by
    seed, with 95% t-intervals (experiments.tables.paired_interval; below 0 = better)."""
    from experiments.tables import paired_interval

    alone = floors.set_index("seed")["local_only_rmse"]
    none = runs[runs["mode"] == "none"].set_index("seed")["rmse"]
    rows = []
    for (mode, knob), g in runs.groupby(["mode", "knob"], sort=False):
        g = g.sort_values("seed")
        row = {"mode": mode, "knob": knob}
        for col, other in (("vs_local_only", alone), ("vs_no_dp", none)):
            if mode == "none" and col == "vs_no_dp":
                continue
            both = g[g["seed"].isin(other.index)]
            row[col], row[f"{col}_low"], row[f"{col}_high"] = paired_interval(
                both["rmse"], other.loc[both["seed"]]
            )
        rows.append(row)
    return pd.DataFrame(rows)


def versus_fixed(runs: pd.DataFrame, fixed: pd.DataFrame) -> pd.DataFrame:
    """Adaptive minus fixed C at the same z, paired by seed (the fixed-C study's runs CSV:
    same silos, rounds, seeds and starting C), 95% t-interval; below 0 = adaptive better."""
    from experiments.tables import paired_interval

    rows = []
    for knob, g in runs[runs["mode"] == "central"].groupby("knob"):
        f = fixed[(fixed["mode"] == "central") & np.isclose(fixed["knob"], knob)]
        f = f.set_index("seed")["rmse"]
        both = g[g["seed"].isin(f.index)].sort_values("seed")
        if len(both) < 2:
            continue
        d, lo, hi = paired_interval(both["rmse"], f.loc[both["seed"]])
        rows.append({"mode": "central", "knob": knob, "vs_fixed": d, "vs_fixed_low": lo,
                     "vs_fixed_high": hi})  # fmt: skip
    return pd.DataFrame(rows, columns=["mode", "knob", "vs_fixed", "vs_fixed_low", "vs_fixed_high"])


def _interval(r, col: str) -> str:
    """'+0.012 [-0.004, +0.028]' from a table row, '' where the CSV has no such column."""
    v = getattr(r, col, np.nan)
    if pd.isna(v):
        return ""
    return f"{v:+.3f} [{getattr(r, col + '_low'):+.3f}, {getattr(r, col + '_high'):+.3f}]"


def method_label(table: pd.DataFrame) -> str:
    return LABEL[table["method"].iloc[0]] if "method" in table else "FedAvg"  # older CSV: FedAvg


def local_statistics(table: pd.DataFrame) -> bool:
    return "batchnorm" in table and table["batchnorm"].iloc[0] == "local"  # older CSV: shared


def markdown(table: pd.DataFrame) -> str:
    """The frontier as the docs show it (experiments/readme_tables.py)."""
    seeds = int(table["seeds"].max())
    label = method_label(table)
    vs = "vs_local_only" in table  # older CSVs: no paired columns
    extra = " − each silo alone [95%] | − no DP [95%] |" if vs else ""
    vs_fixed = "vs_fixed" in table
    extra += " − fixed C, same z [95%] |" if vs_fixed else ""
    lines = [
        f"| setting | epsilon (delta 1e-5) | RMSE last round ({seeds} seeds) | best round (on test: optimistic) |{extra}",
        "|---|---|---|---|" + ("---|---|" if vs else "") + ("---|" if vs_fixed else ""),
    ]
    for r in table.itertuples():
        if r.mode == "central" and getattr(r, "clipping", "fixed") == "adaptive":
            what = f"central DP, z = {r.knob:g}, adaptive C ({r.clip:g} → {r.clip_last:.3g} by the last round)"
        elif r.mode == "central":
            what = f"central DP, z = {r.knob:g} (noise std {r.knob * r.clip / r.silos:.2g})"
        elif r.mode == "local":
            what = f"local DP, LocalDpMod epsilon = {r.knob:g} per release"
        elif r.mode == "none" and local_statistics(table):
            what = f"{label}, no DP (statistics local)"
        elif r.mode == "none":
            what = f"{label}, no DP (the papers')"
        else:
            what = r.mode
        eps = "inf" if r.epsilon == np.inf else ("" if pd.isna(r.epsilon) else f"{r.epsilon:.3g}")
        best = "" if pd.isna(r.best_rmse) else f"{r.best_rmse:.3g}"
        stop = f" ({int(r.stopped)} of {int(r.seeds)} stopped: NaN model)" if r.stopped else ""
        rmse = (
            f"{r.rmse:.3f} ± {r.rmse_sd:.3f}" if r.rmse < 10 else f"{r.rmse:.3g} ± {r.rmse_sd:.3g}"
        )
        pairs = f" {_interval(r, 'vs_local_only')} | {_interval(r, 'vs_no_dp')} |" if vs else ""
        pairs += f" {_interval(r, 'vs_fixed')} |" if vs_fixed else ""
        lines.append(f"| {what} | {eps} | {rmse}{stop} | {best} |{pairs}")
    return "\n".join(lines)


def draw(table: pd.DataFrame, command: str, name: str = NAME) -> None:
    """RMSE (last round, mean and sd over seeds) against epsilon on a log axis, central and
    local DP, with no-DP FedAvg, local-only and the constant predictor as lines."""
    label = method_label(table)
    fig, ax = plt.subplots(figsize=(6.4, 4.2))
    top = 0.8  # a wrecked model's RMSE (up to 10^3) is drawn at the top edge, value written
    for mode, marker, color in (("central", "o", "tab:blue"), ("local", "s", "tab:red")):
        part = table[table["mode"] == mode].sort_values("epsilon")
        if not len(part):
            continue
        shown = part["rmse"].clip(upper=top)
        ax.errorbar(part["epsilon"], shown, yerr=part["rmse_sd"].where(part["rmse"] < top, 0),
                    marker=marker, color=color, capsize=3,
                    label=f"{label} + {mode} DP ({int(part.seeds.max())} seeds)")  # fmt: skip
        for r in part[part["rmse"] >= top].itertuples():
            ax.annotate(f"{r.rmse:.3g}", (r.epsilon, top), textcoords="offset points",
                        xytext=(0, -12), ha="center", fontsize=7, color=color)  # fmt: skip
    ax.set_ylim(0, top * 1.02)
    lines = (("none", f"{label}, no DP (epsilon = inf)", "-", "black"),
             ("local-only (no release)", "each silo alone (no release)", "--", "grey"),
             ("constant (pooled train mean)", "constant predictor", "-.", "grey"))  # fmt: skip
    for mode, text, style, color in lines:
        row = table[table["mode"] == mode]
        if len(row):
            ax.axhline(float(row["rmse"].iloc[0]), ls=style, color=color, label=text)
    ax.set_xscale("log")
    ax.set_xlabel("epsilon after all rounds (delta = 1e-5, log scale); stopped runs: NaN model")
    ax.set_ylabel("steering RMSE on the pooled test set (rad)")
    clip, rounds, silos = (table[c].iloc[0] for c in ("clip", "rounds", "silos"))
    where = ", statistics local" if local_statistics(table) else ""
    adaptive = "clipping" in table and table["clipping"].iloc[0] == "adaptive"
    how = f"adaptive C from {clip:g}" if adaptive else f"C = {clip:g}"
    ax.set_title(f"{label} driving: privacy vs utility ({silos:g} silos, {rounds:g} rounds, "
                 f"{how}{where})", fontsize=10)  # fmt: skip
    ax.legend(fontsize=7)
    fig.tight_layout()
    figures.save(fig, RESULTS / f"{name}.png", command, dpi=120)


if __name__ == "__main__":
    raise SystemExit(main())
