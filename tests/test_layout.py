"""The project's shape, kept true: the import rules of the layout, the run-config reference
generated from one source, and README/docs tables equal to what the committed CSVs give."""

import ast
import dataclasses
import subprocess

import pytest

from tests.conftest import PYTHON, ROOT


def _simulation(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [PYTHON, "simulation.py", *args], capture_output=True, text=True, cwd=ROOT
    )


def _imports(package: str):
    for path in sorted((ROOT / package).rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                yield path, [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
                yield path, [node.module]


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
