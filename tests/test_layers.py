"""The layers of the code (README, "How it is built"): no module imports from a
layer above its own. import-linter checks the contract in pyproject.toml; the
second test shows the check has teeth, on a contract that is known to be broken."""

from __future__ import annotations

import re
import subprocess
import sys
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
LINT = Path(sys.executable).with_name("lint-imports")


def _lint(config: Path) -> subprocess.CompletedProcess[str]:
    # --no-cache: import-linter would otherwise write a cache folder beside the code.
    return subprocess.run(
        [str(LINT), "--config", str(config), "--no-cache", "--no-logo"],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=ROOT,
    )


def test_no_module_imports_from_a_layer_above_its_own() -> None:
    proc = _lint(ROOT / "pyproject.toml")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert re.search(r"Contracts: 1 kept, 0 broken", proc.stdout), proc.stdout


def test_an_import_from_a_layer_above_is_caught(tmp_path: Path) -> None:
    """The same layers with two of them swapped: the check must say it is broken
    and name an import that runs upward."""
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["importlinter"]
    [contract] = config["contracts"]
    layers = list(contract["layers"])
    # The command line sits on top and imports the face below it: put it at the bottom.
    assert layers[0] == "bakeoff.cli"
    swapped = [*layers[1:], "bakeoff.cli"]
    body = "\n".join(f'    "{layer}",' for layer in swapped)
    (tmp_path / "broken.toml").write_text(
        f'[tool.importlinter]\nroot_package = "bakeoff"\n\n'
        f'[[tool.importlinter.contracts]]\nname = "{contract["name"]}"\ntype = "layers"\n'
        f"layers = [\n{body}\n]\n"
    )
    proc = _lint(tmp_path / "broken.toml")
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert "0 kept, 1 broken" in proc.stdout
    # The command line's modules import the face (bakeoff.cli.run -> bakeoff.api ...).
    assert re.search(r"bakeoff\.cli(\.\w+)* -> bakeoff\.api\b", proc.stdout), proc.stdout


def _import_cycles(graph: object) -> list[list[str]]:
    """The groups of modules that import each other, directly or round a loop
    (Tarjan's strongly connected components of the import graph)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found: list[list[str]] = []

    def visit(module: str) -> None:
        index[module] = low[module] = len(index)
        stack.append(module)
        for imported in graph.find_modules_directly_imported_by(module):  # type: ignore[attr-defined]
            if imported not in index:
                visit(imported)
                low[module] = min(low[module], low[imported])
            elif imported in stack:
                low[module] = min(low[module], index[imported])
        if low[module] == index[module]:
            group = []
            while True:
                member = stack.pop()
                group.append(member)
                if member == module:
                    break
            if len(group) > 1:
                found.append(sorted(group))

    for module in sorted(graph.modules):  # type: ignore[attr-defined]
        if module not in index:
            visit(module)
    return found


def test_no_import_cycles_type_checking_imports_and_imports_in_functions_included() -> None:
    import grimp

    graph = grimp.build_graph("bakeoff", exclude_type_checking_imports=False)
    assert _import_cycles(graph) == []
    # The check finds a cycle where there is one: add an import back up the layers.
    graph.add_import(importer="bakeoff.errors", imported="bakeoff.cli")
    assert any("bakeoff.errors" in group for group in _import_cycles(graph))
