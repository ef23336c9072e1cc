"""Privacy-utility frontier of FedAvg (or CDL) on the embedded driving silos: RMSE against epsilon.

    python -m experiments.study experiments/studies/dp_frontier.toml            # FedAvg, C = 2
    python -m experiments.study experiments/studies/dp_frontier_bnlocal.toml    # statistics local
    python -m experiments.study experiments/studies/dp_frontier_adaptive.toml   # C adapted (_lr1)
    python -m experiments.study experiments/studies/dp_frontier_clip.toml       # what sets C
    python -m experiments.study experiments/studies/dp_frontier_cdl.toml        # CDL, local DP
    python -m experiments.study experiments/studies/dp_frontier_cdl_bnlocal.toml   # and _clip2

Each study file is one frontier: its arms are the rows (no DP, central DP over noise
multipliers z, local DP over per-release epsilons), each arm a `simulation.py` launch per seed
(the study kind "simulation"); this module is their analysis.

CDL has no DP and party-side DP only (each silo's LocalDpMod noises the backbone it sends its
neighbours; a peer topology has no aggregate for central DP), scored as each silo's own model
on the pooled test set (`rmse`), beside the same floors; written as dp_frontier_cdl*.

With statistics local (run config `driving.batchnorm-statistics = "local"` in every row, floors
included, models/state.py) BatchNorm running statistics stay on the silo: they are neither
released, clipped nor noised, and every model is scored on a silo's test split with statistics
re-estimated on that silo's training images; written as <name>_bnlocal*. The no-DP row is then
FedAvg/CDL with statistics kept local (FedBN's rule for the statistics; the affine parameters
still travel), the fair ceiling for the DP rows beside it.

Same silos, rounds, seeds and local training for every row; only what the parties' updates
carry changes (config/dp.py): central DP (the parties clip to C, Flower's wrapper adds
N(0, (zC/m)^2) to the mean) over z, and local DP (Flower's LocalDpMod on each party) over
per-release epsilons. Epsilon is at delta 1e-5 after all rounds: the server's accountant
(central) or the parties' own ledgers (local), as the run recorded it in rounds.csv. A run
whose noise wrecks the model (NaN updates, refused until `max-empty-rounds` stops it) is scored
at its last recorded round and counted in `stopped` (the study's `may-stop`). Floors beside
them, scored on the same pooled test set: no DP (the ceiling of this study), each silo trained
alone for as many epochs as the run trains (local-only, no release at all: epsilon 0), and the
constant predictor.

Adaptive clipping (`dp.clipping = "adaptive"`, Andrew et al. 2021; strategies/dp.py) adapts C
each round toward the median update norm, from the calibrated C below; central rows only
(LocalDpMod's C is fixed), beside the fixed-C study's runs (`[report] fixed`), paired by seed.
A z at or above 2 sigma_b = m / 10 cannot be split between the update and the clip bits'
count: such an arm is refused (`check`).

The clip C: about the median norm of a silo's round-2 update (FedAvg: trained from the mean
of the round-1 models), the usual choice (Andrew et al. 2021 adapt C towards the median). What
is released decides it: dp_frontier_clip.toml measures both (`update_norms`). With statistics
shared the norm is ~2 (round 1's ~15 is almost all the statistics leaving their initial
values): C = 2. With statistics local only the weights travel, ~0.25: C = 0.25 (a C of 2
there would never bind and would only scale the noise up 8x; the CDL control at C = 2 is
written as <name>_clip2).

Writes experiments/results/<name>.csv (one row per setting, mean and sd over seeds),
<name>_runs.csv (one row per run) and <name>.png.
"""

from __future__ import annotations

import sys
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pandas as pd

from experiments import figures
from experiments.simulate import RESULTS
from experiments.tables import paired_interval, pipe_table, redraw, study_files
from strategies.floors import headline_rmse

LABEL = {"fedavg": "FedAvg", "cdl": "CDL"}
KNOB = {"central": "dp.noise-multiplier", "local": "dp.local-epsilon"}
FLOORS = (("local-only (no release)", "local_only_rmse"),
          ("constant (pooled train mean)", "constant_rmse"))  # fmt: skip


def check(cell: dict, where) -> None:
    """A frontier row's launch (ValueError naming the study file and field): a DP mode with its
    knob and C, the silos given, stopped runs kept, adaptive C central and below 2 sigma_b."""
    rc = cell["run-config"]
    mode = rc.get("dp.mode", "none")
    if mode not in ("none", *KNOB):
        raise ValueError(
            f"{where}: grid.run-config: dp.mode {mode!r} is not none, central or local"
        )
    if mode != "none" and not (KNOB[mode] in rc and "dp.clip" in rc):
        raise ValueError(f"{where}: grid.run-config: a {mode} DP row sets {KNOB[mode]} and dp.clip")
    if not cell.get("may-stop") or not isinstance(cell.get("num-clients"), int):
        raise ValueError(
            f"{where}: grid.may-stop = true (noise that wrecks a model stops its run, scored at "
            "its last round) and grid.num-clients (the silos): required"
        )
    if rc.get("dp.clipping") == "adaptive":
        sigma_b2 = cell["num-clients"] / 10
        if mode != "central" or rc[KNOB["central"]] >= sigma_b2:
            raise ValueError(
                f"{where}: adaptive clipping is central DP's, at z below 2 sigma_b = {sigma_b2:g} "
                f"with {cell['num-clients']} silos (module docstring): {rc}"
            )


def setting(runs: pd.DataFrame, where) -> dict:
    """What every row of one frontier shares: method, statistics, C, clipping, rounds, silos
    (ValueError naming the study when its runs differ in one)."""
    rc = list(runs["run-config"])
    central = [c for c in rc if c.get("dp.mode") == "central"]
    values = {
        "method": list(runs["method"]),
        "batchnorm": [c.get("driving.batchnorm-statistics", "shared") for c in rc],
        "clip": [c["dp.clip"] for c in rc if "dp.clip" in c],
        "clipping": [c.get("dp.clipping", "fixed") for c in central] or ["fixed"],
        "rounds": list(runs["rounds"]),
        "silos": list(runs["num-clients"]),
    }
    for key, v in values.items():
        if len(set(v)) != 1:
            raise ValueError(f"{where}: the frontier's rows differ in {key} ({sorted(set(v))})")
    return {k: v[0] for k, v in values.items()}


def scored(run_dir: Path, rc: dict, seed: int, stopped: bool) -> dict:
    """One run's row: its last round's RMSE (CDL's: each silo's model), its best, its epsilon
    as the run recorded it, and the C of its last round (adaptive clipping moves it)."""
    r = pd.read_csv(run_dir / "rounds.csv")
    r = r.rename(columns={headline_rmse(r.columns): "rmse"})
    last = r[r["round"] == r["round"].max()].iloc[0]
    mode = rc.get("dp.mode", "none")
    has_clip = "dp_clip" in r and r["dp_clip"].notna().any()
    return {
        "mode": mode,
        "knob": float(rc.get(KNOB.get(mode), 0.0)),
        "seed": seed,
        "rmse": float(last["rmse"]),
        "best_rmse": float(r["rmse"].min()),
        "epsilon": float(r["dp_epsilon"].max()) if "dp_epsilon" in r and mode != "none" else np.inf,
        "rounds_done": int(r["round"].max()),
        "stopped": stopped,
        "clip_last": float(r["dp_clip"].dropna().iloc[-1]) if has_clip else np.nan,
    }


def outputs(study: dict) -> list[Path]:
    return study_files(RESULTS, study["name"])


def report(runs: pd.DataFrame, study: dict, command: str) -> str:
    """The frontier's table, runs and figure from the study's finished runs; the floors are
    computed once per runs folder and seed (`kept_floor`)."""
    s = setting(runs, study["file"])
    rows = pd.DataFrame(
        [scored(Path(r.run_dir), r.rc, r.seed, r.stopped)
         for r in runs.rename(columns={"run-config": "rc"}).itertuples()]
    )  # fmt: skip
    work = Path(runs["run_dir"].iloc[0]).parent
    seeds = sorted(set(runs["seed"]))
    floors = pd.DataFrame(
        [kept_floor(work, s["rounds"], s["silos"], s["batchnorm"], x) for x in seeds]
    )
    fixed = study.get("report", {}).get("fixed")
    fixed = pd.read_csv(RESULTS / f"{fixed}_runs.csv") if fixed else None
    table = tabulate(rows, floors, s, fixed)
    files = outputs(study)
    files[0].parent.mkdir(parents=True, exist_ok=True)
    table.assign(command=command).to_csv(files[0], index=False, float_format="%.6g")
    seeded = [floors.assign(mode=mode, rmse=floors[col])[["mode", "seed", "rmse"]]
              for mode, col in FLOORS]  # fmt: skip
    pd.concat([rows, *seeded], ignore_index=True).to_csv(files[1], index=False, float_format="%.6g")
    draw(table, command, files[2])
    return markdown(table)


def replot(study: dict) -> int:
    files = outputs(study)
    return redraw(files[0], lambda table, command: draw(table, command, files[2]))


def tabulate(runs: pd.DataFrame, floors: pd.DataFrame, s: dict, fixed=None) -> pd.DataFrame:
    """One row per setting (mean and sd over seeds), the floors below, each row paired by seed
    with each silo alone and with no DP (`versus`), and with the fixed-C runs at the same z."""
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
    for floor, col in FLOORS:
        table.loc[len(table)] = {
            "mode": floor, "knob": np.nan, "epsilon": 0.0 if "local" in floor else np.nan,
            "rmse": floors[col].mean(), "rmse_sd": floors[col].std(),
            "best_rmse": np.nan, "seeds": len(floors), "stopped": 0,
        }  # fmt: skip
    table = table.merge(versus(runs, floors), on=["mode", "knob"], how="left")
    if fixed is not None:
        table = table.merge(versus_fixed(runs, fixed), on=["mode", "knob"], how="left")
    for i, key in enumerate(("clip", "clipping", "rounds", "silos")):
        table.insert(2 + i, key, s[key])  # after mode and knob
    for i, key in enumerate(("method", "batchnorm")):
        table.insert(i, key, s[key])
    return table


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


def update_norms(seed: int, num_clients: int) -> list[dict]:
    """Each silo's L2 update norm with and without BatchNorm statistics, in round 1 (from the
    initial model) and round 2 (from the mean of the round-1 models): what sets C (the study
    dp_frontier_clip.toml, one call per seed)."""
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
        for i in range(num_clients)
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


def kept_floor(work: Path, rounds: int, num_clients: int, batchnorm: str, seed: int) -> dict:
    """local_only, computed once per runs folder and seed (floors-s<seed>.json): it does not
    depend on C, so a control reuses its study's."""
    import json

    key = {"rounds": rounds, "num_clients": num_clients, "batchnorm": batchnorm}
    path = work / f"floors-s{seed}.json"
    if path.is_file() and json.loads(path.read_text()).get("key") == key:
        return json.loads(path.read_text())["floor"]
    floor = local_only(rounds, num_clients, batchnorm, seed)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({"key": key, "floor": floor}))
    return floor


def silo_alone_models(silos, d, rounds: int, seed: int):
    """(silo, model) for each silo's own model, trained alone for rounds x local epochs on its
    own data and never released: the floor "each silo alone" (here and in driving_membership)."""
    import torch

    from models.resnet8 import ResNet8
    from training.steering import LocalOptimizer, train_steering

    for i, s in enumerate(silos):
        torch.manual_seed(seed * 1000 + i)
        model = ResNet8(d.image_size, d.channels)
        train_steering(
            model,
            s.x_train,
            s.y_train,
            epochs=rounds * d.local_epochs,
            optim=LocalOptimizer(lr=d.lr),
            batch_size=d.batch_size,
            seed=seed * 1000 + i,
        )
        yield s, model


def local_only(rounds: int, num_clients: int, batchnorm: str, seed: int) -> dict:
    """Each silo trains alone (`silo_alone_models`), scored on the pooled test set; the mean
    over silos. And the constant predictor (pooled train mean)."""
    import torch

    from config import parse
    from envs.driving_silos import make_silo

    d = parse({}).driving
    silos = [
        make_silo(i, seed, d.train_per_silo, d.test_per_silo, d.image_size, d.channels)
        for i in range(num_clients)
    ]
    yt = np.concatenate([s.y_test for s in silos])
    torch.set_num_threads(2)
    rmse = [pooled_rmse(m, silos, batchnorm) for _, m in silo_alone_models(silos, d, rounds, seed)]
    y = np.concatenate([s.y_train for s in silos])
    return {
        "seed": seed,
        "local_only_rmse": float(np.mean(rmse)),
        "constant_rmse": float(np.sqrt(np.mean((yt - y.mean()) ** 2))),
    }


def versus(runs: pd.DataFrame, floors: pd.DataFrame) -> pd.DataFrame:
    """Per setting: its last-round RMSE minus each silo alone's, and minus no DP's, paired by
    seed, with 95% t-intervals (experiments.tables.paired_interval; below 0 = better)."""
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


def draw(table: pd.DataFrame, command: str, png: Path) -> None:
    """RMSE (last round, mean and sd over seeds) against epsilon on a log axis, central and
    local DP, with no-DP FedAvg, local-only and the constant predictor as lines."""
    label = method_label(table)
    fig, ax = figures.subplots(figsize=(6.4, 4.2))
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
    figures.save(fig, png, command, dpi=120)


def _norms_report(runs: pd.DataFrame, study: dict, command: str) -> str:
    """dp_frontier_clip.csv (one row per seed, round and silo) and its medians by round."""
    out = RESULTS / f"{study['name']}.csv"
    out.parent.mkdir(parents=True, exist_ok=True)
    runs.assign(command=command).to_csv(out, index=False, float_format="%.6g")
    med = runs.groupby("round")[["norm_with_statistics", "norm_weights_only"]].median()
    return pipe_table(
        ["round", "median update norm, statistics released", "weights only"],
        [[r, f"{a:.3g}", f"{b:.3g}"] for r, (a, b) in med.iterrows()],
    )


def _no_figure(study: dict) -> int:
    print(f"{study['name']}: a table only, no figure to draw", file=sys.stderr)
    return 2


# the calibration study (dp_frontier_clip.toml): `update_norms` per seed, a CSV, no figure
NORMS = SimpleNamespace(
    outputs=lambda study: [RESULTS / f"{study['name']}.csv"],
    report=_norms_report,
    replot=_no_figure,
)
