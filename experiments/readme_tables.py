"""The README's and docs/' tables, generated from the committed CSVs (never typed by hand).

    python -m experiments.readme_tables           # rewrite every generated block in place
    python -m experiments.readme_tables --check   # exit 1 naming the block that is out of date

A block is the text between `<!-- generated: NAME -->` and `<!-- /generated -->` in README.md
or docs/*.md; NAME picks its renderer below, each the `markdown` function of the experiment
script that wrote the CSV (so a table reads exactly as its script prints it). The run-config
reference comes from the settings classes (config/), the same source as `simulation.py
--list-config`. tests/test_layout.py runs `--check`.
"""

from __future__ import annotations

import argparse
import re
import sys

import pandas as pd

from experiments.simulate import RESULTS, ROOT


def _csv(name: str) -> pd.DataFrame:
    return pd.read_csv(RESULTS / name, keep_default_na=False, na_values=[""])


# how a block's CSV is read: blanks as missing (CSV), as written (KEEP), or pandas' default
READ = {"CSV": {"keep_default_na": False, "na_values": [""]},
        "KEEP": {"keep_default_na": False}, "PLAIN": {}}  # fmt: skip


def _markdown(module: str, csv: str, read: str = "CSV"):
    """A block that is `module.markdown` of one committed CSV."""

    def render() -> str:
        import importlib

        return importlib.import_module(module).markdown(pd.read_csv(RESULTS / csv, **READ[read]))

    return render


def _fedvln(tag: str = "") -> str:
    from experiments.fedvln.pipeline import markdown

    suffix = f"_{tag}" if tag else ""
    tables = {  # a study of some stages only (--stages) has only their tables
        f"table{k}": _csv(f"fedvln_table{k}{suffix}.csv")
        if (RESULTS / f"fedvln_table{k}{suffix}.csv").is_file()
        else pd.DataFrame()
        for k in (2, 4, 5, 9)
    }
    return markdown(tables)


def _fedvln_gains(tag: str = "") -> str:
    from experiments.fedvln.gains import markdown

    return markdown(_csv(f"fedvln_gains{'_' + tag if tag else ''}.csv"))


def _fedvln_finetune_lr() -> str:
    from experiments.fedvln.finetune_lr import markdown

    return markdown(pd.read_csv(RESULTS / "fedvln_finetune_lr.csv", dtype=str).fillna(""))


def _fedvln_augment_budget() -> str:
    from experiments.fedvln.augment_budget import both_tables

    return both_tables(_csv("fedvln_augment_budget_runs.csv"), _csv("fedvln_augment_budget.csv"))


def _fedvln_speaker(split: str = "", name: str = "fedvln_speaker") -> str:
    from experiments.fedvln.speaker import markdown

    return markdown(_csv(f"{name}.csv"), split)


def _fedvln_speaker_augment(name: str = "fedvln_speaker") -> str:
    from experiments.fedvln.speaker import markdown_augment

    return markdown_augment(pd.read_csv(RESULTS / f"{name}_augment.csv", dtype=str))


def _fedvln_oracle(name: str = "fedvln_oracle") -> str:
    from experiments.fedvln.oracle import markdown

    return markdown(pd.read_csv(RESULTS / f"{name}.csv", dtype=str))


def _cdl() -> str:
    from experiments.cdl.driving_table import markdown

    return markdown()


def _fedavg_fedprox() -> str:
    t = _csv("driving_fedavg_fedprox.csv")
    seeds = int(t.seeds.dropna().iloc[0])
    lines = [
        f"| method | RMSE (pooled test, {seeds} seeds) | MAE | median round wall_s | "
        "median Σ fit_s per round | overhead ratio |",
        "|---|---|---|---|---|---|",
    ]
    for r in t.itertuples():
        timing = (
            ["", "", ""]
            if pd.isna(r.overhead_ratio)
            else [
                f"{r.median_wall_s:.2f} s",
                f"{r.median_sum_fit_s:.2f} s",
                f"{r.overhead_ratio:.2f}",
            ]
        )
        cells = [r.method, f"{r.rmse:.3f} ± {r.rmse_sd:.3f}", f"{r.mae:.3f}", *timing]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def _performance(fedrl: bool = False) -> str:
    from experiments.bench.performance_table import markdown

    return markdown(fedrl)


def _run_config() -> str:
    from config import render

    return render(markdown=True).strip()


BLOCKS = {
    "fedvln-embedded": _fedvln,
    "fedvln-r2r": lambda: _fedvln("r2r"),
    "fedvln-r2r-speaker": lambda: _fedvln("r2r-speaker"),
    "fedvln-gains": _fedvln_gains,
    "fedvln-gap": _markdown("experiments.fedvln.gap", "fedvln_gap.csv"),
    "fedvln-finetune-lr": _fedvln_finetune_lr,
    "fedvln-augment-budget": _fedvln_augment_budget,
    "fedvln-speaker": _fedvln_speaker,
    "fedvln-speaker-unseen": lambda: _fedvln_speaker("val_unseen"),
    "fedvln-speaker-augment": _fedvln_speaker_augment,
    "fedvln-speaker-floors": _markdown(
        "experiments.fedvln.speaker_floors", "fedvln_speaker_floors.csv"
    ),
    "fedvln-speaker-r2r": lambda: _fedvln_speaker(name="fedvln_speaker_r2r"),
    "fedvln-speaker-r2r-augment": lambda: _fedvln_speaker_augment("fedvln_speaker_r2r"),
    "fedvln-speaker-r2r-long": lambda: _fedvln_speaker(name="fedvln_speaker_r2r_long"),
    "fedvln-speaker-r2r-long-augment": lambda: _fedvln_speaker_augment("fedvln_speaker_r2r_long"),
    "fedvln-appearance": _markdown("experiments.fedvln.appearance_gap", "fedvln_appearance.csv"),
    "fedvln-local-epochs": _markdown(
        "experiments.fedvln.local_epochs", "fedvln_local_epochs.csv", "PLAIN"
    ),
    "fedvln-appearance-pre": lambda: _fedvln("appearance"),
    "fedvln-appearance-pre-gains": lambda: _fedvln_gains("appearance"),
    "fedvln-oracle": _fedvln_oracle,
    "fedvln-oracle-r2r": lambda: _fedvln_oracle("fedvln_oracle_r2r"),
    "fedvln-oracle-appearance": lambda: _fedvln_oracle("fedvln_oracle_appearance"),
    "fedrl-table1": _markdown("experiments.fedrl.table1", "fedrl_table1.csv", "KEEP"),
    "fedrl-table2": _markdown("experiments.fedrl.table2", "fedrl_table2.csv", "KEEP"),
    "cdl": _cdl,
    "fedavg-fedprox": _fedavg_fedprox,
    "reliability": _markdown("experiments.bench.reliability_table", "reliability.csv", "PLAIN"),
    "performance": _performance,
    "performance-fedrl": lambda: _performance(fedrl=True),
    "message-cost": _markdown("experiments.bench.message_cost", "message_cost.csv", "PLAIN"),
    "dp-frontier": _markdown("experiments.privacy.dp_frontier", "dp_frontier.csv"),
    "dp-frontier-cdl": _markdown("experiments.privacy.dp_frontier", "dp_frontier_cdl.csv"),
    "dp-frontier-bnlocal": _markdown("experiments.privacy.dp_frontier", "dp_frontier_bnlocal.csv"),
    "dp-frontier-cdl-bnlocal": _markdown(
        "experiments.privacy.dp_frontier", "dp_frontier_cdl_bnlocal.csv"
    ),
    "dp-frontier-cdl-bnlocal-clip2": _markdown(
        "experiments.privacy.dp_frontier", "dp_frontier_cdl_bnlocal_clip2.csv"
    ),
    "dp-frontier-adaptive": _markdown(
        "experiments.privacy.dp_frontier", "dp_frontier_adaptive.csv"
    ),
    "fedrl-attack": _markdown("experiments.privacy.fedrl_attack", "fedrl_attack.csv", "PLAIN"),
    "fedrl-attack-defence": lambda: __import__(
        "experiments.privacy.fedrl_attack", fromlist=["x"]
    ).markdown_defence(_csv("fedrl_attack_defence.csv")),
    "fedrl-derandomize": _markdown(
        "experiments.privacy.fedrl_derandomize", "fedrl_derandomize.csv", "PLAIN"
    ),
    "fedrl-frontier": _markdown(
        "experiments.privacy.fedrl_frontier", "fedrl_frontier.csv", "PLAIN"
    ),
    "fedvln-frontier": _markdown(
        "experiments.privacy.fedvln_frontier", "fedvln_frontier.csv", "PLAIN"
    ),
    "driving-membership": _markdown(
        "experiments.privacy.driving_membership", "driving_membership.csv", "PLAIN"
    ),
    "fedvln-property": _markdown(
        "experiments.privacy.fedvln_property", "fedvln_property.csv", "PLAIN"
    ),
    "run-config": _run_config,
}
BLOCK = re.compile(r"(<!-- generated: ([\w-]+) -->\n)(.*?)(<!-- /generated -->)", re.S)


def regenerate(text: str, where: str) -> str:
    def one(m: re.Match) -> str:
        name = m.group(2)
        if name not in BLOCKS:
            raise SystemExit(f"{where}: unknown generated block {name!r} ({', '.join(BLOCKS)})")
        return f"{m.group(1)}{BLOCKS[name]().strip()}\n{m.group(4)}"

    return BLOCK.sub(one, text)


def files() -> list:
    return [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--check", action="store_true", help="fail if a block is out of date")
    args = p.parse_args(argv)
    stale = []
    for f in files():
        text = f.read_text()
        new = regenerate(text, f.name)
        if new != text:
            stale.append(f.relative_to(ROOT).as_posix())
            if not args.check:
                f.write_text(new)
    if args.check and stale:
        print(
            f"readme_tables: out of date in {', '.join(stale)}: "
            "run python -m experiments.readme_tables",
            file=sys.stderr,
        )
        return 1
    print(("checked " if args.check else "regenerated ") + f"{len(files())} files")
    return 0


if __name__ == "__main__":
    sys.exit(main())
