"""The help every command prints reads as written: every option explained, brackets
kept, no `<bool>` type on a flag, real placeholders in usage lines, `-h` and
`--version`."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import typer
from typer.testing import CliRunner

from bakeoff import __version__
from bakeoff.cli import app
from front_door import call, refused_in_one_line


def _commands(command: Any, path: tuple[str, ...] = ()) -> Iterator[tuple[tuple[str, ...], Any]]:
    yield path, command
    for name, sub in getattr(command, "commands", {}).items():
        yield from _commands(sub, (*path, name))


COMMANDS = list(_commands(typer.main.get_command(app)))


def _help(path: tuple[str, ...], flag: str = "--help") -> str:
    result = CliRunner().invoke(app, [*path, flag], env={"COLUMNS": "200"})
    assert result.exit_code == 0, result.output
    return result.output


def test_the_version_and_short_help() -> None:
    result = CliRunner().invoke(app, ["--version"])
    assert result.exit_code == 0 and result.output.strip() == f"bakeoff {__version__}"
    for path in [(), ("run",), ("cache", "ls")]:
        assert _help(path, "-h") == _help(path, "--help")


@pytest.mark.parametrize("path", [p for p, _ in COMMANDS], ids=lambda p: " ".join(p) or "bakeoff")
def test_every_command_explains_each_option_and_keeps_its_words(path: tuple[str, ...]) -> None:
    command = dict(COMMANDS)[path]
    shown = _help(path)
    assert "<bool>" not in shown
    usage = next(line for line in shown.splitlines() if "Usage:" in line)
    assert "{" not in usage and not re.search(r"\[[a-z_]+\]", usage), usage
    for param in command.params:
        assert param.help, f"bakeoff {' '.join(path)}: {param.name} has no help text"
        # Rich markup would eat "[train]"; every bracketed word must be printed.
        for word in re.findall(r"\[[^\]\s]+\]", param.help.replace("\\[", "[")):
            assert word in shown, (param.name, word)


def test_a_bracketed_word_in_a_help_text_survives() -> None:
    assert "a workload .toml with a [train] section" in _help(("train",))


def test_the_fake_runtime_is_hidden_from_users(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    from bakeoff.backends import DEVELOPMENT_VARIABLE, runtime_names

    assert "fake" in runtime_names()  # the suite's switch
    monkeypatch.delenv(DEVELOPMENT_VARIABLE)
    assert "fake" not in runtime_names()
    listed = call("env", "--json")
    assert listed.code == 0
    assert "fake" not in {r["runtime"] for r in json.loads(listed.stdout)["runtimes"]}
    store = str(tmp_path / "s.db")
    refused_in_one_line(call("run", "--runtimes", "fake", "--store", store), "unknown value 'fake'")
    workload = tmp_path / "w.toml"
    workload.write_text('name = "w"\n[model]\nkind = "fake"\n')
    assert "test double" in call("run", str(workload), "--store", store).stderr


@pytest.mark.parametrize(
    ("args", "meant"),
    [
        (["run", "builtin:minilm", "--runtimes", "onnxrt"], "onnxruntime"),
        (["run", "builtin:minilm", "--precisions", "bf61"], "bf16"),
        (["train", "builtin:digits-train", "--stacks", "torh"], "torch"),
    ],
)
def test_a_mistyped_name_gets_a_did_you_mean(args: list[str], meant: str, tmp_path: Path) -> None:
    refused_in_one_line(call(*args, "--store", str(tmp_path / "s.db")), f"did you mean {meant!r}")


def test_a_mistyped_model_kind_gets_a_did_you_mean(tmp_path: Path) -> None:
    workload = tmp_path / "w.toml"
    workload.write_text('name = "w"\n[model]\nkind = "onxx"\npath = "m.onnx"\n')
    refused = call("run", str(workload), "--store", str(tmp_path / "s.db"))
    assert refused.code == 2 and "did you mean 'onnx'" in refused.stderr, refused.stderr
