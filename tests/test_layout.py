"""The project's shape, kept true: the import rules of the layout, the run-config reference
generated from one source, and README/docs tables equal to what the committed CSVs give."""

import ast
import dataclasses
import re
import subprocess

import pytest

from tests.conftest import PYTHON, ROOT


def _simulation(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [PYTHON, "simulation.py", *args], capture_output=True, text=True, cwd=ROOT
    )


def _imports(package: str, sources=None):
    for path in sources or sorted((ROOT / package).rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                yield path, [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
                yield path, [node.module]


# Each folder imports only folders below it (simulation.py, the launcher, on launch/, sits under
# experiments/, which may drive it); server/ and clients/ share a layer and never import each
# other; nothing below server/ imports flwr's engines, and models/ envs/ training/ no flwr.
LAYERS = [
    {"envs"},
    {"models"},
    {"config"},
    {"contracts"},
    {"training"},
    {"strategies"},
    {"domains"},
    {"server", "clients"},
    {"launch"},
    {"simulation"},
    {"experiments"},
]


def test_every_folder_imports_only_the_layers_below_it():
    level = {name: k for k, layer in enumerate(LAYERS) for name in layer}
    edges = []
    for package in level:
        sources = [ROOT / "simulation.py"] if package == "simulation" else None
        for path, mods in _imports(package, sources):
            for m in mods:
                top = m.split(".")[0]
                if top in level and top != package and level[top] >= level[package]:
                    edges.append(f"{path.relative_to(ROOT)} imports {m}")
    assert not edges, edges


@pytest.mark.parametrize(
    "package,forbidden",
    [
        ("server", {"clients"}),
        ("clients", {"server"}),
        ("strategies", {"server", "clients"}),
        ("contracts", {"server", "clients", "strategies"}),
        *[(p, {"flwr", "server", "clients", "strategies"}) for p in ("models", "envs", "training")],
    ],
)
def test_import_rules_of_the_layout(package, forbidden):
    edges = [
        f"{path.relative_to(ROOT)} imports {m}"
        for path, mods in _imports(package)
        for m in mods
        if m.split(".")[0] in forbidden
    ]
    assert not edges, edges


def test_config_imports_flower_only_to_parse_what_flwr_run_parses():
    uses = {
        path.name
        for path, mods in _imports("config")
        for m in mods
        if m.split(".")[0] in ("flwr", "server", "clients", "strategies")
    }
    assert uses == {"schema.py"}  # flwr.common.config: the same parser and flattening as flwr


def test_every_run_config_key_has_one_typed_documented_setting():
    from config import SECTIONS
    from config.schema import defaults

    declared = {}
    for cls in SECTIONS.values():
        for f in dataclasses.fields(cls):
            declared[cls.key(f)] = (f.type, f.metadata["help"])
    assert set(declared) == set(defaults())  # no key without a setting, no setting without a key
    for key, (kind, meaning) in declared.items():
        assert kind == type(defaults()[key]).__name__, key
        assert meaning.strip(), key


def test_parse_names_the_key_and_caches_by_value_and_type():
    from config import parse
    from config.schema import ConfigError

    assert parse({"fraction-train": 1}).run.fraction_train == 1.0
    with pytest.raises(ConfigError, match="'fraction-train' must be float"):
        parse({"fraction-train": True})  # True == 1, but not a number here
    with pytest.raises(ConfigError, match="'fedvln.stage' must be one of"):
        parse({"fedvln.stage": "tour"})
    with pytest.raises(ConfigError, match=r"'driving.lr' must be in \(0, 10\]"):
        parse({"driving.lr": 0.0})


@pytest.mark.slow
def test_list_config_prints_every_key_a_method_reads_and_refuses_an_unknown_name():
    from config.schema import defaults

    res = _simulation("--list-config", "fedrl")
    assert res.returncode == 0, res.stderr
    keys = [k for k in defaults() if k.startswith("fedrl.")]
    assert all(f"  {k} = " in res.stdout for k in keys)
    assert "driving.lr" not in res.stdout
    bad = _simulation("--list-config", "nope")
    assert bad.returncode == 2 and "'nope' is neither a section" in bad.stderr
    fedprox = _simulation("--list-config", "fedprox").stdout
    assert "fedprox.proximal-mu = " in fedprox and "driving.lr = " in fedprox


def test_list_config_of_a_method_is_the_sections_it_reads():
    from config import reference

    keys = {key for _, key, _, _ in reference("cdl")}
    assert {"seed", "driving.lr", "cdl.beta", "faults.fraction"} <= keys
    assert not any(k.startswith(("fedrl.", "fedvln.", "fedprox.")) for k in keys)
    assert {k for _, k, _, _ in reference("fedrl")} >= {"fedrl.sigma", "round-timeout"}


@pytest.mark.slow
def test_readme_and_docs_tables_are_what_the_committed_csvs_give():
    res = subprocess.run(
        [PYTHON, "-m", "experiments.readme_tables", "--check"],
        capture_output=True,
        text=True,
        cwd=ROOT,
    )
    assert res.returncode == 0, res.stderr


def test_the_wire_keys_are_named_in_contracts_only():
    """A reply or config key both sides use is a name from contracts/messages.py, never a
    string typed on one side (a typo there would be a silently missing metric)."""
    from contracts import messages

    keys = {v for k, v in vars(messages).items() if k.isupper() and isinstance(v, str)}
    typed = [
        f"{path.relative_to(ROOT)}:{node.lineno} {node.value!r}"
        for package in ("server", "clients", "strategies", "training", "experiments", "launch")
        for path in sorted((ROOT / package).rglob("*.py"))
        for node in ast.walk(ast.parse(path.read_text()))
        if isinstance(node, ast.Constant) and node.value in keys
    ]
    assert len(keys) >= 8 and not typed, typed


POINTER = re.compile(
    r"(?<![\w/.-])((?:clients|server|strategies|training|contracts|config|models|envs|"
    r"experiments|deploy|tests|docs)/[\w./-]*\w)([*{<\[]?)"
)


def _stale_pointers(text: str) -> list[str]:
    """`path/file.py`, `folder/module.name` mentions in `text` that name nothing in the project
    (a pattern such as `results/fedvln_table*.csv` and a line citing another repository,
    `github:owner/repo ...`, are not pointers into this one)."""
    out = []
    for line in text.splitlines():
        if "github:" in line:
            continue
        for m in POINTER.finditer(line):
            ref, pattern = m.groups()
            if pattern or (ROOT / ref).exists() or (ROOT / f"{ref}.py").exists():
                continue
            base, dot, name = ref.rpartition(".")
            module = next(
                (
                    p
                    for p in (ROOT / f"{base}.py", ROOT / base / "__init__.py")
                    if dot and p.is_file()
                ),
                None,
            )
            if module is None or not re.search(rf"\b{re.escape(name)}\b", module.read_text()):
                out.append(ref)
    return out


def test_every_file_and_name_the_docs_and_docstrings_point_to_exists():
    sources = [
        *ROOT.glob("*.md"),
        *ROOT.glob("docs/*.md"),
        *ROOT.glob("deploy/*.sh"),
        ROOT / "simulation.py",
        ROOT / "setup.sh",
        *(p for d in ("clients", "server", "strategies", "training", "contracts", "config",
                      "models", "envs", "experiments", "deploy", "tests") for p in (ROOT / d).rglob("*.py")),
    ]  # fmt: skip
    stale = [f"{s.relative_to(ROOT)}: {r}" for s in sources for r in _stale_pointers(s.read_text())]
    assert not stale, stale


def test_the_equation_map_names_functions_that_exist():
    """docs/layout.md's "Equation → code": every `file`, `function` of a row is defined there."""
    text = (ROOT / "docs" / "layout.md").read_text()
    table = text[text.index("**Equation → code.**") :].split("\n\n")[1]
    rows = [r for r in table.splitlines()[2:] if r.startswith("|")]
    assert len(rows) >= 10
    for row in rows:
        where = row.rsplit("|", 2)[1]
        names = re.findall(r"`([^`]+)`", where)
        source = (ROOT / names[0]).read_text()
        for name in names[1:]:
            last = name.split(".")[-1].split(" ")[0]
            assert re.search(rf"(def|class) {re.escape(last)}\b", source), (names[0], name)


def test_no_code_loads_a_checkpoint_that_can_run_code():
    """torch.load(weights_only=False) unpickles arbitrary objects: a checkpoint file that runs
    code when read (issue 62 found it back in an experiment). Outside the tests, every load
    is weights_only=True (or a loader that says so)."""
    found = []
    for path in sorted(ROOT.rglob("*.py")):
        rel = path.relative_to(ROOT)
        if rel.parts[0] in (".venv", "tests", "runs", "build") or "site-packages" in rel.parts:
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Call) and any(
                k.arg == "weights_only"
                and not (isinstance(k.value, ast.Constant) and k.value.value is True)
                for k in node.keywords
            ):
                found.append(f"{rel}:{node.lineno}")
    assert not found, found


def test_every_file_docs_layout_names_in_its_method_map_exists():
    """Issue 66: the method map named 8 experiment files that had moved. Each row names its
    folder (`config/`, ...) and the files in it; every one must be there."""
    import re

    text = (ROOT / "docs" / "layout.md").read_text()
    rows = [ln for ln in text.splitlines() if re.match(r"\| [a-z /]+ \(`[a-z]+/`\) \|", ln)]
    assert len(rows) == 10, rows  # one per room (folder)
    missing = []
    for row in rows:
        folder = re.search(r"\(`([a-z]+/)`\)", row).group(1)
        for name in re.findall(r"`([\w/]+\.py)`", row):
            if not (ROOT / folder / name).is_file():
                missing.append(folder + name)
    assert not missing, missing


def test_every_command_the_readme_and_docs_name_runs_its_help(capsys):
    """Issue 66: a command in the README, the docs or a committed result's CSV that names a
    module which moved or lost its flags is a first read that does not keep its promise. Every
    `python -m MODULE` there is a module of this project (or pytest), and `MODULE --help` exits
    0 (its `main`, in process); every study file `python -m experiments.study FILE` names is
    there."""
    import importlib

    texts = [p.read_text() for p in (ROOT / "README.md", *sorted(ROOT.glob("docs/*.md")))]
    # and the command a committed result names as its maker (its `command` column), so a
    # figure's CSV never names a script that moved (issue 66 item 2)
    texts += [p.read_text() for p in sorted((ROOT / "experiments" / "results").glob("*.csv"))]
    named = sorted({m for t in texts for m in re.findall(r"python -m ([\w.]+\w)", t)} - {"pytest"})
    # a floor that catches a pattern matching nothing (19 modules on 2026-12-04; it shrinks as
    # scripts become study files, to the tools that keep a `main`: experiments.study, plot,
    # readme_tables, bench.parity, fedvln.centralized); study files are checked next
    assert len(named) >= 5, named
    studies = {f for t in texts for f in re.findall(r"python -m experiments\.study (\S+\.toml)", t)}
    assert len(studies) >= 10, studies
    broken = [f"{f}: no such study file" for f in sorted(studies) if not (ROOT / f).is_file()]
    for name in named:
        if not (ROOT / (name.replace(".", "/") + ".py")).is_file():
            broken.append(f"{name}: no such module in the project")
            continue
        main = getattr(importlib.import_module(name), "main", None)
        if main is None:
            broken.append(f"{name}: no main(argv)")
            continue
        try:
            main(["--help"])
            broken.append(f"{name} --help: returned instead of printing its usage")
        except SystemExit as e:
            if e.code not in (0, None):
                broken.append(f"{name} --help: exit {e.code}")
        if "usage:" not in capsys.readouterr().out:
            broken.append(f"{name} --help: printed no usage")
    assert not broken, broken


# Figures committed before every figure carried its command (experiments/figures.py); each is
# drawn from its study's run folders, which a plot cannot be redrawn without. Kept named, so
# the list only shrinks: a listed figure drawn again with its command fails the test below.
UNSTAMPED_FIGURES = {
    "fedvln_gap.png",
    "fedvln_pipeline.png",
    "fedvln_pipeline_r2r-speaker.png",
}


# Figures made by a script before it became a study file, not re-made through the runner yet
# (issue 66): each figure, the study file that now makes it, and a commit whose tree has the
# script (with its `main`) that made it, so the command printed on the figure can still be run
# there. Kept named, so the list only shrinks: a listed figure re-made by its study fails below.
MADE_BY_A_RETIRED_SCRIPT = {
    "fedvln_pipeline_appearance.png": ("fedvln_pipeline_appearance.toml", "696fed6"),
}


def test_a_figure_made_by_a_retired_script_names_it_and_the_study_that_replaced_it():
    """Each listed figure's command names a script that had a `main` at the listed commit,
    and the study file that replaces it exists and draws that figure."""
    import shlex
    import subprocess

    from experiments.figures import command_of
    from experiments.study import analysis_of, load

    for name, (study_file, commit) in MADE_BY_A_RETIRED_SCRIPT.items():
        png = ROOT / "experiments" / "results" / name
        words = shlex.split(command_of(png) or "")
        assert words[:2] == ["python", "-m"], (name, words)
        script = words[2].replace(".", "/") + ".py"
        git = ["git", "-C", str(ROOT), "show", f"{commit}:{script}"]
        old = subprocess.run(git, capture_output=True, text=True)
        if old.returncode and "bad object" in old.stderr + old.stdout:
            pytest.skip(f"this clone lacks commit {commit} (a shallow clone)")
        assert old.returncode == 0 and "def main(" in old.stdout, (name, old.stderr)
        study = load(ROOT / "experiments" / "studies" / study_file)
        assert png in analysis_of(study).outputs(study), (name, study_file)


class _Parsed(BaseException):
    """Raised by the patched parser once a script's arguments parsed (nothing runs after)."""


def test_every_committed_figure_names_a_command_its_script_accepts(monkeypatch):
    """Issue 66 item 2: a figure's printed command is a real one. Every PNG in
    experiments/results carries the command that made it (`experiments.figures.save` draws it
    and keeps it in the PNG), the command is `python -m <a module of this project>`, and that
    module's `main` parses its arguments: the script is stopped right after its parser accepts
    them, so a renamed flag, a dropped choice or a moved module fails here, and nothing runs."""
    import argparse
    import importlib
    import shlex

    from experiments.figures import command_of

    pngs = sorted((ROOT / "experiments" / "results").glob("*.png"))
    assert len(pngs) >= 30
    parse = argparse.ArgumentParser.parse_args

    def parsed(self, args=None, namespace=None):
        raise _Parsed(parse(self, args, namespace))

    monkeypatch.setattr(argparse.ArgumentParser, "parse_args", parsed)
    monkeypatch.chdir(ROOT)  # the commands' relative paths (../shared/...) are the README's
    broken = []
    for png in pngs:
        command = command_of(png)
        if png.name in MADE_BY_A_RETIRED_SCRIPT:
            if command is not None and "experiments.study" in command:
                broken.append(f"{png.name}: re-made; take it off MADE_BY_A_RETIRED_SCRIPT")
            continue
        if png.name in UNSTAMPED_FIGURES:
            if command is not None:
                broken.append(f"{png.name}: now names its command; take it off UNSTAMPED_FIGURES")
            continue
        if command is None:
            broken.append(f"{png.name}: names no command (save it with experiments.figures.save)")
            continue
        words = shlex.split(command)
        if words[:2] != ["python", "-m"] or len(words) < 3:
            broken.append(f"{png.name}: {command!r} is not `python -m MODULE ...`")
            continue
        module, args = words[2], words[3:]
        if not (ROOT / (module.replace(".", "/") + ".py")).is_file():
            broken.append(f"{png.name}: {module}: no such module in the project")
            continue
        try:
            importlib.import_module(module).main(args)
            broken.append(f"{png.name}: {module} ran without parsing arguments")
        except _Parsed:
            pass
        except SystemExit as e:
            broken.append(f"{png.name}: {command!r}: its parser refused it (exit {e.code})")
        if module == "experiments.study":  # and the study file it names is one that loads
            from experiments.study import analysis_of, load

            try:
                study = load(ROOT / args[0])
                if png not in analysis_of(study).outputs(study):
                    broken.append(f"{png.name}: {args[0]} does not draw this figure")
            except ValueError as e:
                broken.append(f"{png.name}: {e}")
    assert not broken, broken
    assert not UNSTAMPED_FIGURES - {p.name for p in pngs}, "a listed figure no longer exists"


def test_a_saved_figure_draws_the_command_it_keeps(tmp_path):
    """What the test above reads is what the figure shows: `save` draws the command (wrapped,
    so a long one is not cut at the edge) and keeps the same string in the PNG; a figure
    without a command is refused."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from experiments.figures import command_of, save

    command = "python -m experiments.fedrl.table1 " + " ".join(f"--flag-{k} {k}" for k in range(30))
    fig, ax = plt.subplots(figsize=(4, 3))
    ax.plot([0, 1], [0, 1])
    drawn = []
    fig.canvas.mpl_connect("draw_event", lambda _e: drawn.extend(t.get_text() for t in fig.texts))
    save(fig, tmp_path / "f.png", command)
    assert command_of(tmp_path / "f.png") == command
    [text] = set(drawn)
    assert " ".join(text.split()) == command and "\n" in text  # all of it, over lines
    fig, _ = plt.subplots()
    with pytest.raises(ValueError, match="command"):
        save(fig, tmp_path / "g.png", " ")
    assert not (tmp_path / "g.png").exists()
