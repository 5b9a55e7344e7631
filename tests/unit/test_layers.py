"""The import rules of `docs/architecture.md`'s layout, checked on the source: `chatd/` is
the shared package, so it imports neither the gateway (`api/`) nor the worker's assembly
(`workers/`), except the CLI, the composition root that starts them; `api/` imports nothing
from `workers/`."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
COMPOSITION_ROOT = {"chatd/cli.py", "chatd/commands.py", "chatd/dev.py"}
"""The `chatd` command: it starts the gateway and the worker, so it imports both (inside the
command functions, so `chatd keys` loads neither)."""
RULES = [("chatd", ("api", "workers")), ("api", ("workers",))]


def _imported(path: Path) -> set[str]:
    tree = ast.parse(path.read_text(), str(path))
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names |= {alias.name.split(".")[0] for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.add(node.module.split(".")[0])
    return names


@pytest.mark.parametrize(("package", "forbidden"), RULES, ids=[r[0] for r in RULES])
def test_a_package_imports_only_what_its_layer_may(
    package: str, forbidden: tuple[str, ...]
) -> None:
    crossings = {
        str(path.relative_to(ROOT)): sorted(_imported(path) & set(forbidden))
        for path in sorted((ROOT / package).rglob("*.py"))
        if str(path.relative_to(ROOT)) not in COMPOSITION_ROOT
    }
    assert {module: found for module, found in crossings.items() if found} == {}


def test_the_composition_root_imports_its_layers_only_when_a_command_runs() -> None:
    for module in sorted(COMPOSITION_ROOT):
        tree = ast.parse((ROOT / module).read_text())
        top = [n for n in tree.body if isinstance(n, ast.Import | ast.ImportFrom)]
        names = {
            (n.module if isinstance(n, ast.ImportFrom) else n.names[0].name) or "" for n in top
        }
        assert not {name.split(".")[0] for name in names} & {"api", "workers"}, module
