"""The README and docs/ cannot go stale: every `bakeoff ...` command quoted in them
names a command that exists, and every flag it shows is one that command takes; every
verdict sentence they quote is one the program writes. A test beside each shows the
check bites (a quoted flag that is not; a sentence changed)."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
import typer

from bakeoff.cli import app

ROOT = Path(__file__).resolve().parents[1]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
# A quoted command: at the start of a code line (after a prompt, a path to the venv's
# command or environment variables), or in an inline code span.
COMMAND = re.compile(r"^(?:\$ )?(?:[A-Z_]+=\S+ )*(?:\.venv/bin/)?bakeoff\s+(.*)$")
INLINE = re.compile(r"`(?:\.venv/bin/)?bakeoff\s+([^`]*)`")
FLAG = re.compile(r"(?<![\w-])(--?[a-zA-Z][\w-]*)")


def quoted_commands(text: str) -> list[str]:
    """Each quoted command with the synopsis lines that continue it (indented, in the
    same code block), comments cut."""
    commands: list[str] = []
    fence = False
    for line in text.splitlines():
        if line.startswith("```"):
            fence = not fence
            continue
        if fence:
            code = line.split(" #")[0].rstrip()
            found = COMMAND.match(code.strip())
            if found and not line.startswith(" "):
                commands.append(found.group(1))
            elif commands and code.startswith(" ") and code.strip().startswith("["):
                commands[-1] += " " + code.strip()
        else:
            commands += [m.group(1) for m in INLINE.finditer(line)]
    return commands


def problems(command: str, root: Any) -> list[str]:
    """What in one quoted command the CLI does not have: its command, or its flags."""
    words = command.split()
    cmd = root
    name = "bakeoff"
    while hasattr(cmd, "commands") and words and not words[0].startswith(("-", "[")):
        if words[0] not in cmd.commands:
            if cmd is root:
                return [f"no command `bakeoff {words[0]}`"]
            break
        cmd, name = cmd.commands[words[0]], f"{name} {words[0]}"
        words = words[1:]
    return _flags(" ".join(words), cmd, name)


def _flags(rest: str, cmd: Any, name: str) -> list[str]:
    known = {"--help", "-h"}
    for param in cmd.params:
        known.update(getattr(param, "opts", []))
        known.update(getattr(param, "secondary_opts", []))
    return [f"`{name}` has no {flag}" for flag in FLAG.findall(rest) if flag not in known]


def test_every_quoted_command_and_flag_exists() -> None:
    root = typer.main.get_command(app)
    assert hasattr(root, "commands")  # typer's own click, vendored or not
    seen, wrong = 0, []
    for page in PAGES:
        for command in quoted_commands(page.read_text(encoding="utf-8")):
            seen += 1
            wrong += [f"{page.relative_to(ROOT)}: {p}" for p in problems(command, root)]
    assert seen > 40, seen  # the pages quote commands: the scan finds them
    assert not wrong, "\n".join(wrong)


@pytest.mark.parametrize(
    ("quoted", "said"),
    [
        (
            "```\nbakeoff run builtin:minilm --no-such-flag\n```",
            "`bakeoff run` has no --no-such-flag",
        ),
        ("Run `bakeoff frobnicate RUN_ID`.", "no command `bakeoff frobnicate`"),
        (
            "```\nbakeoff cache ls [--json]\n           [--nope]\n```",
            "`bakeoff cache ls` has no --nope",
        ),
    ],
)
def test_a_quoted_command_the_cli_lacks_is_caught(quoted: str, said: str) -> None:
    root = typer.main.get_command(app)
    assert hasattr(root, "commands")  # typer's own click, vendored or not
    found = [p for c in quoted_commands(quoted) for p in problems(c, root)]
    assert found == [said]


# A quoted make target: `make X` inline, or a code line that starts with it.
MAKE = re.compile(r"(?:`|^)make ([a-z][\w-]*)", re.MULTILINE)
TARGET = re.compile(r"^([a-z][\w-]*)\s*:(?!=)", re.MULTILINE)


def unknown_make_targets(text: str, makefile: str) -> list[str]:
    """The `make X` that `text` quotes and `makefile` has no target X for."""
    targets = set(TARGET.findall(makefile))
    return sorted({t for t in MAKE.findall(text) if t not in targets})


def test_every_quoted_make_target_is_in_the_makefile() -> None:
    makefile = (ROOT / "Makefile").read_text(encoding="utf-8")
    quoted = [t for page in PAGES for t in MAKE.findall(page.read_text("utf-8"))]
    assert {"demo", "test", "vllm", "fastai"} <= set(quoted)  # the scan finds them
    wrong = {p.name: unknown_make_targets(p.read_text("utf-8"), makefile) for p in PAGES}
    assert not {page: ts for page, ts in wrong.items() if ts}


def test_a_quoted_make_target_the_makefile_lacks_is_caught() -> None:
    makefile = "demo: $(STAMP)\n\t$(PY) -m bakeoff\nVENV := .venv\n"
    text = "```\nmake demo\nmake nothing-here\n```\nthen `make frobnicate`, not make-believe"
    assert unknown_make_targets(text, makefile) == ["frobnicate", "nothing-here"]


# A verdict sentence the docs quote: X, Y, Z stand for candidates and B for the
# baseline; "…" for what the quote leaves out.
QUOTED_VERDICT = re.compile(r'"((?:X |No candidate )[^"]*)"')


def _verdict_sentences() -> list[str]:
    """Every form of a verdict's first sentence, as the program writes it."""
    from bakeoff.judge.stats import Interval
    from bakeoff.judge.verdict_words import headline

    gain = Interval(1.38, 1.23, 1.45)
    return [
        headline(standing, "X", "B", tied, gain, 3, baseline_out="failed")
        for standing, tied in (
            ("clear", []),
            ("leads", ["Y", "Z"]),
            ("no-baseline", []),
            ("no-baseline", ["Y"]),
            ("baseline-tied", ["B"]),
            ("baseline-tied", ["B", "Y"]),
            ("baseline-tied", ["B", "Y", "Z"]),
        )
    ] + [headline("baseline-leads", "B", "B", tied, None, 3) for tied in ([], ["Y"])]


def unmatched_verdict_quotes(text: str) -> list[str]:
    """The quoted verdict sentences in `text` that the program does not write."""
    sentences = _verdict_sentences()
    wrong = []
    for quote in QUOTED_VERDICT.findall(" ".join(text.split())):
        pattern = ".*".join(re.escape(part) for part in quote.split("…"))
        if not any(re.match(pattern, s) for s in sentences):
            wrong.append(quote)
    return wrong


def test_every_quoted_verdict_sentence_is_one_the_program_writes() -> None:
    quotes = [q for page in PAGES for q in QUOTED_VERDICT.findall(page.read_text("utf-8"))]
    assert len(quotes) >= 3, quotes  # docs/measuring.md quotes the three forms
    wrong = [w for page in PAGES for w in unmatched_verdict_quotes(page.read_text("utf-8"))]
    assert not wrong, wrong


def test_a_changed_verdict_sentence_is_caught() -> None:
    page = (ROOT / "docs" / "measuring.md").read_text("utf-8")
    assert not unmatched_verdict_quotes(page)
    changed = page.replace('"X is fastest:', '"X is the fastest:')
    assert unmatched_verdict_quotes(changed) == [
        "X is the fastest: 1.38× (CI 1.23–1.45) over the baseline B"
    ]
