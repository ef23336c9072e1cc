"""Can pre-exploration gain at all on these houses? Adaptation on routes disjoint from the scored
ones, instructed by a perfect speaker, by ours and by a constant, same budget. The analysis of
three study files (one call of `measure` per seed; its docstring says every field):

    python -m experiments.study experiments/studies/fedvln_oracle.toml             # embedded
    python -m experiments.study experiments/studies/fedvln_oracle_r2r.toml         # real R2R
    python -m experiments.study experiments/studies/fedvln_oracle_appearance.toml  # a look, s = 1

FedVLN's pre-exploration (paper Sec. 4.2) fine-tunes the agent in each unseen house on routes
it samples there, instructed by the speaker. Per seed, from the centralized follower (best
val_unseen SR) and grounded speaker (best val_seen fidelity) of the speaker study the file
names (`speaker-study`; trained there if missing, resumed if there), each unseen house adapts
a copy of the follower on its own (env-based: nothing shared), `steps` RMSprop steps at the
pre-exploration recipe's rate (`lr`, 1e-4), on `routes` routes sampled in the house with *none* of the house's scored routes among them
(no route with the path, or the start and goal, of a val_unseen episode: the official
pre-exploration samples away from the evaluation data too). Arms:

- `none`: no adaptation (the start every arm is compared with);
- `grammar`: the houses' own instruction grammar writes each route's instruction
  (`envs.vln_houses.grammar_instruction`): a perfect speaker, the upper bound of what
  pre-exploration with a speaker can teach here;
- `speaker`: our speaker writes them, batch by batch through the batch's environmental
  dropout (back-translation, what FedVLN's pre-exploration does);
- `constant`: the train instruction with the best train BLEU, for every route (the floor: what
  the routes teach with no language about them);
- `grammar@other`, `speaker@other`: the held-out-house control (issue 64 item 4). The same
  adaptation, but on the routes (and in the rooms) of the next unseen house in name order,
  cyclically; still scored in this house. Its gain is what any adaptation gives (more steps on
  the task, a look of unseen houses in general); the arm's gain over it is what adapting in
  *this* house gives, the claim pre-exploration makes.

Labelled arms (grammar, constant) weigh the imitation loss as back-translated batches are
weighed (mlWeight of the augmented data), so the arms differ only in the words. Each is scored
on the house's val_unseen episodes (SR, SPL), pooled over the unseen houses (episode-weighted).
The earlier version of this script had an `oracle` arm that adapted on the very routes it then
scored (+32.9 SR, mostly memorising); it is gone. Results:
experiments/results/fedvln_oracle{,_runs}.csv (gain over `none`, mean ± sd over seeds, and the
paired 95% interval); each seed's house rows are kept in WORK/seed<S>/oracle.csv and a rerun
with the same settings and models skips them.

On real R2R (`data-dir`) no grammar writes a house's routes; its people do. So each unseen
house's val_unseen paths are split in two, alternately in path-id order (seed-independent): the
house adapts on one half and every arm is scored on the other; an adapt path that shares its
start and goal with a scored one is dropped. The adapt half's paths are the routes of every
arm, so the arms again differ only in the words: `human` (their three R2R instructions, the
perfect speaker), `speaker` (the R2R speaker study's grounded speaker, fedvln_speaker_r2r.toml,
trained beforehand), `constant`. Real paths rather than sampled ones, because only they have
true words; a route count is then what the house has (`routes` does not apply).

With a house's own look (`appearance` S, envs/vln_appearance.py), where the embedded houses
have a seen/unseen gap for adaptation to close (experiments/studies/fedvln_appearance.toml), the
follower and speaker must have been trained with it; `models` names them (fedvln_appearance.toml
trains both: the gap study's follower and the speaker beside it).
"""

from __future__ import annotations

import copy
import dataclasses
import json
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pandas as pd
import torch

from config.fedvln_recipe import CPU
from envs.vln_appearance import LOOK_VERSION
from envs.vln_houses import GENERATOR, HouseSpec, grammar_instruction, houses_of
from experiments.fedvln import speaker as fedvln_speaker
from experiments.function_runs import arguments
from experiments.simulate import RESULTS, ROOT, path_digest
from experiments.tables import gain_text, mean_sd, paired, pipe_table, print_from_runs, study_files
from models import vln_checkpoint
from training import vln_agent, vln_speaker
from training import vln_speaker_quality as quality
from training.vln_house import (
    ROUTE_FILTER,
    house_names,
    is_scored,
    open_house,
    open_setup,
    scored_keys,
    speaker_routes,
)
from training.vln_loop import make_optimizer

OTHER = "@other"  # suffix of an arm adapted in another house (the held-out-house control)
ARMS = ("none", "grammar", "speaker", "constant", "grammar@other", "speaker@other")
R2R_ARMS = ("none", "human", "speaker", "constant", "human@other", "speaker@other")
# what decides a seed's rows: a kept oracle.csv is reused only if these match
KEYED = ("steps", "routes", "batch_size", "lr")


def adapt(follower, house, arm: str, speaker, routes, labelled, a, seed: int) -> dict:
    """One unseen house, one arm: a copy of the follower adapted `steps` steps (on `routes`
    through the speaker, or on `labelled[arm]`, the same routes with the arm's words), scored
    on the house's val_unseen episodes (`house.val`)."""
    model = copy.deepcopy(follower)
    s = vln_agent.AgentSettings(batch_size=a.batch_size)
    world, vocab = house.setup.world, house.setup.vocab
    tokens = vln_agent.Tokens(vocab, s.max_words)
    if arm != "none":
        opt = make_optimizer(CPU["preexplore"].optimizer, model.parameters(), a.lr)
        rng = np.random.default_rng([seed, 7])
        torch.manual_seed(seed)
        if arm == "speaker":
            bt = vln_agent.BackTranslation(
                speaker, vln_speaker.PathInputs(world), vocab, s.max_words
            )
            vln_agent.train_batches(
                model,
                opt,
                world,
                [],
                tokens,
                s,
                iterations=a.steps,
                rng=rng,
                routes=routes,
                back_translate=bt,
            )
        else:
            s_lab = dataclasses.replace(s, ml_weight=s.aug_ml_weight)
            vln_agent.train_batches(
                model, opt, world, labelled[arm], tokens, s_lab, iterations=a.steps, rng=rng
            )
    m, _ = vln_agent.evaluate(model, world, list(house.val), tokens, s)
    return {"n": len(house.val), "sr": m["sr"], "spl": m["spl"]}


def run_seed(a, seed: int) -> pd.DataFrame:
    out = Path(a.work) / f"seed{seed}"
    rows_csv, made_by = out / "oracle.csv", out / "oracle.json"
    ck = _models(a, seed)
    # the follower and the speaker it adapts with are part of what made the rows
    launch = {k: getattr(a, k) for k in KEYED} | {
        f: path_digest(ck / f) for f in ("agent_best.pt", "speaker.pt")
    }
    # and which houses and which routes: rows of an older generator or filter are not reused
    launch |= {"houses": GENERATOR, "route_filter": ROUTE_FILTER}
    if a.data_dir:
        launch["data_dir"] = a.data_dir
    if a.appearance:
        launch["appearance"] = a.appearance
        launch["appearance_look"] = LOOK_VERSION  # envs/vln_appearance.py
    arms, houses = (R2R_ARMS, _r2r_houses) if a.data_dir else (ARMS, _embedded_houses)
    launch["arms"] = list(arms)
    if rows_csv.is_file():
        if made_by.is_file() and json.loads(made_by.read_text()) == launch:
            return pd.read_csv(rows_csv)
        print(f"  seed {seed}: {rows_csv} was made with other settings or models; adapting again")
    follower, _, _ = vln_checkpoint.load(ck / "agent_best.pt")
    speaker, _, _ = vln_checkpoint.load(ck / "speaker.pt")
    setup = open_setup(a.data_dir, "", HouseSpec(), a.appearance)  # vln_centralized's houses
    constant = quality.best_constant(setup.split("train"), seed)
    every = list(houses(setup, a, seed))
    if len(every) < 2:  # the control would adapt in the house it is scored in
        raise ValueError(
            f"the held-out-house control needs 2 or more unseen houses, not {len(every)}"
        )
    rows = []
    for i, (house, routes, labelled) in enumerate(every):
        labelled["constant"] = [dataclasses.replace(r, instruction=constant) for r in routes]
        _, other_routes, other_labelled = every[(i + 1) % len(every)]  # the control's house
        for arm in arms:
            if arm.endswith(OTHER):
                word = arm.removesuffix(OTHER)
                r = adapt(follower, house, word, speaker, other_routes, other_labelled, a, seed)
            else:
                r = adapt(follower, house, arm, speaker, routes, labelled, a, seed)
            rows.append(
                {
                    "seed": seed,
                    "house": house.name,
                    "arm": arm,
                    "steps": a.steps,
                    "routes": len(routes),
                    **r,
                }
            )
            print(f"  seed {seed} {house.name} {arm:14s} SR {r['sr']:.1f}", flush=True)
    df = pd.DataFrame(rows)
    out.mkdir(parents=True, exist_ok=True)
    df.to_csv(rows_csv, index=False)
    made_by.write_text(json.dumps(launch))
    return df


def _models(a, seed: int) -> Path:
    """The seed's follower and grounded speaker: from `models` (used as they are), else from
    the speaker study `speaker-study` (trained there if missing on the embedded houses; on R2R
    its checkpoints are used as they are, never retrained here)."""
    spk = fedvln_speaker.settings(ROOT / a.speaker_study)
    return _given_models(a, seed) or (fedvln_speaker.train(spk, seed) / "grounded" / "checkpoints")


def _given_models(a, seed: int) -> Path | None:
    """The folder of models this study uses as they are (`models`, or on R2R the speaker
    study's), refused if it lacks one; None where the speaker study trains them."""
    if not (a.data_dir or a.models):
        return None
    if a.models:
        ck = ROOT / a.models.format(seed=seed)
        field, how = "grid.models", "the study file's comment says how they are made"
    else:
        spk = fedvln_speaker.settings(ROOT / a.speaker_study)
        ck = Path(spk.work) / f"seed{seed}" / "grounded" / "checkpoints"
        field, how = "grid.speaker-study", f"python -m experiments.study {a.speaker_study}"
    missing = [f for f in ("agent_best.pt", "speaker.pt") if not (ck / f).is_file()]
    if missing:
        raise ValueError(f"{field}: {ck} has no {', '.join(missing)}; train them first ({how})")
    return ck


def needs(cell: dict, where) -> None:
    """The models the cell's seed adapts from, when this study does not train them, before
    anything runs."""
    a = SimpleNamespace(**arguments(cell))
    try:
        _given_models(a, cell["seed"])
    except ValueError as e:
        raise ValueError(f"{where}: {e}") from None


def _embedded_houses(setup, a, seed: int):
    """Per unseen house: (the house, routes sampled away from every scored episode, {"grammar":
    the routes with the grammar's words}, a perfect speaker)."""
    grammar = houses_of(HouseSpec())
    for name in house_names(setup)[1]:
        house = open_house(setup, name)
        routes = speaker_routes(house, a.routes, seed)  # disjoint from the scored ones
        scan, rng = setup.world.scan(name), np.random.default_rng([seed, 11])
        words = [
            grammar_instruction(grammar[name], [scan.index[v] for v in r.path], r.heading, rng)
            for r in routes
        ]
        yield (
            house,
            routes,
            {"grammar": [dataclasses.replace(r, instruction=w) for r, w in zip(routes, words)]},
        )


def _r2r_houses(setup, a, seed: int):
    """Per unseen R2R house: (the house scored on one half of its val_unseen paths, the other
    half's paths as routes, {"human": every R2R instruction of those paths})."""
    for name in house_names(setup)[1]:
        house = open_house(setup, name)
        scored, adapt_on = split_paths(house.val)
        routes = [dataclasses.replace(eps[0], instruction="") for eps in adapt_on.values()]
        human = [e for eps in adapt_on.values() for e in eps]
        yield dataclasses.replace(house, val=scored), routes, {"human": human}


def split_paths(val: list) -> tuple[list, dict]:
    """(scored episodes, {path_id: episodes to adapt on}): paths alternate in path-id order;
    an adapt path that is a scored path or its reverse, or joins a scored path's start and
    goal in either order, is dropped by the rule `speaker_routes` applies to sampled ones
    (`training.vln_house.scored_keys`, issue 64 item 4)."""
    by_path: dict[int, list] = {}
    for e in val:
        by_path.setdefault(e.path_id, []).append(e)
    ids = sorted(by_path)
    scored = [e for pid in ids[0::2] for e in by_path[pid]]
    taken = scored_keys(scored)
    adapt_on = {
        pid: by_path[pid] for pid in ids[1::2] if not is_scored(by_path[pid][0].path, taken)
    }
    return scored, adapt_on


def summarize(runs: pd.DataFrame) -> pd.DataFrame:
    """Per arm: pooled SR over the unseen houses (episode-weighted) per seed, mean ± sd, the
    gain over `none` and over `constant`, each with its paired interval
    (`experiments.tables.paired`: its sd is at least one evaluation's binomial noise, so two
    seeds that agree by chance make no finding).

    Over `constant` is what the words add, routes held equal: the gain over `none` also holds
    what the routes alone teach (on R2R the adapt half's goals are mostly the scored half's:
    the house's likely goals). Over `<arm>@other` is what adapting in this house adds over the
    same adaptation elsewhere (issue 64 item 4): the part of the gain that is the house's."""
    pooled = (
        runs.assign(w=runs.sr * runs.n)
        .groupby(["arm", "seed"])
        .apply(lambda g: pd.Series({"sr": g.w.sum() / g.n.sum(), "n": g.n.sum()}))
    )
    side = {
        arm: {s: (r.sr, r.n) for s, r in pooled.loc[arm].iterrows()}
        for arm in pooled.index.get_level_values("arm").unique()
    }

    def gain(arm: str, over: str) -> str:
        p = paired(side[arm], side[over])
        return gain_text(p["gain"], p["low"], p["high"])

    rows = []
    for arm in [a for a in (R2R_ARMS if "human" in side else ARMS) if a in side]:
        rows.append(
            {
                "arm": arm,
                "seeds": len(side[arm]),
                "val_unseen SR": mean_sd([sr for sr, _ in side[arm].values()]),
                "gain over none": "" if arm == "none" else gain(arm, "none"),
                "within noise": ""
                if arm == "none"
                else paired(side[arm], side["none"])["within_noise"],
                "gain over constant (same routes)": ""
                if arm in ("none", "constant") or arm.endswith(OTHER)
                else gain(arm, "constant"),
                "gain over the same adaptation in another house": gain(arm, arm + OTHER)
                if arm + OTHER in side
                else "",
            }
        )
    return pd.DataFrame(rows)


def markdown(table: pd.DataFrame) -> str:
    return pipe_table(list(table.columns), table.fillna("").values.tolist())


def measure(
    seed: int,
    steps: int,
    lr: float,
    routes: int,
    batch_size: int,
    data_dir: str,
    speaker_study: str,
    models: str,
    appearance: float,
    work: Path,
) -> list[dict]:
    """One cell of an oracle study: every arm in every unseen house of one seed (resumed
    from WORK/seed<S>/oracle.csv when made with the same settings and models). The fields:
    `steps` adaptation steps per house and arm; `lr` the adaptation rate (the pre-exploration
    recipe's, RMSprop); `routes` routes sampled per house (embedded houses); `batch-size`;
    `data-dir` the R2R/Matterport folder ("" = embedded houses); `speaker-study` the study
    file whose follower and grounded speaker adapt; `models` instead, a folder with
    agent_best.pt and speaker.pt, "{seed}" standing for the seed (used as they are);
    `appearance` the houses' fedvln.appearance (the models must have been trained with it)."""
    torch.set_num_threads(1)
    a = SimpleNamespace(**{k: v for k, v in locals().items() if k != "seed"})
    return run_seed(a, seed).to_dict("records")  # fmt: skip


def check(cell: dict, where) -> None:
    """An oracle study's values, before anything trains (one line naming the file and field)."""
    for key in ("steps", "routes", "batch-size", "lr"):
        if not cell[key] > 0:
            raise ValueError(f"{where}: grid.{key}: must be > 0")
    if not 0 <= cell["appearance"] <= 100 or (cell["appearance"] and not cell["models"]):
        raise ValueError(
            f"{where}: grid.appearance: in [0, 100], and needs `models` trained with it"
        )
    if not (ROOT / cell["speaker-study"]).is_file():
        raise ValueError(f"{where}: grid.speaker-study: {cell['speaker-study']}: no such file")
    if cell["data-dir"] and not (ROOT / cell["data-dir"]).is_dir():
        raise ValueError(f"{where}: grid.data-dir: {cell['data-dir']}: no such folder")


def outputs(study: dict) -> list[Path]:
    return study_files(RESULTS, study["name"])[:2]  # the table and the runs; no figure


def report(runs: pd.DataFrame, study: dict, command: str) -> str:
    """The table (gains with their intervals) from every seed's house rows (both written)."""
    out_csv, runs_csv = outputs(study)
    RESULTS.mkdir(parents=True, exist_ok=True)
    runs.to_csv(runs_csv, index=False)
    table = summarize(runs)
    table.to_csv(out_csv, index=False)
    return markdown(table)


def replot(study: dict) -> int:
    return print_from_runs(outputs(study)[1], lambda runs: markdown(summarize(runs)))
