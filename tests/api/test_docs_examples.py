"""Every shell and Python example in README.md and docs/ runs as written, so a renamed flag or a moved module breaks
this test, not a user.

The convention (docs/README.md, *Examples in the docs*): the line before each fenced `bash` or `python` block is
an HTML comment, either `<!-- runnable -->` (options: `timeout=SECONDS`, default 60; `exit=CODE` for a command
documented to fail, default 0) or `<!-- not-runnable: why -->` (a hardware GPU, a download of something else than
the reference models, a model not in the repository, the test suite itself). An unmarked block fails the test, as
does a fence without a language (`text` for diagrams).

Each runnable block runs in its own subprocess (bash: `bash -euo pipefail`; python: `python -c`) with the
repository's `.venv/bin` first on PATH, in a scratch copy of the repository's top level (symlinks; `../shared` beside
it when the repository has one), where the placeholder files the text-generation docs name exist:
`model.tflite` (the toy decoder of ../shared/models), `tokenizer.model` (a SentencePiece tokenizer of its
150-word vocabulary) and `model.litertlm` (the two as a LiteRT-LM bundle). It must exit with the documented code and
print no traceback. Blocks that need the reference models skip when they cannot be fetched (offline), blocks that
name ../shared when it is missing.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest
from builders import build_bundle
from helpers import REPO_ROOT, SHARED_MODELS

DOCS = [REPO_ROOT / "README.md", *sorted((REPO_ROOT / "docs").rglob("*.md"))]
EXECUTABLE = {"bash": "bash", "sh": "bash", "shell": "bash", "console": "bash", "python": "python", "py": "python"}
FENCE = re.compile(r"^(\s*)(```+|~~~+)\s*([\w+-]*)")
MARKER = re.compile(r"^\s*<!--\s*(runnable|not-runnable)\s*(?::\s*(.*?))?\s*-->\s*$")
DEFAULT_TIMEOUT = 60
REFERENCE_MODEL_HINTS = ("model_path(", "fetch-models", "selfie_segmentation", "face_detection", "segment_then_detect")


@dataclass(frozen=True)
class Block:
    """One fenced block of a markdown file: where it is, its language, its text and the marker before it."""

    path: Path
    line: int  # 1-based line of the opening fence
    language: str
    code: str
    marker: str | None  # "runnable" | "not-runnable" | None (unmarked)
    options: str  # the marker's text after the colon: options or the reason

    @property
    def name(self) -> str:
        return f"{self.path.relative_to(REPO_ROOT)}:{self.line}"

    def option(self, key: str, default: int) -> int:
        match = re.search(rf"\b{key}=(\d+)", self.options)
        return int(match.group(1)) if match else default


def fenced_blocks(path: Path, text: str | None = None) -> list[Block]:
    """The fenced blocks of a markdown file with the marker comment on the line before each (blank lines between
    are allowed)."""
    lines = (path.read_text(encoding="utf-8") if text is None else text).splitlines()
    blocks, k = [], 0
    while k < len(lines):
        opening = FENCE.match(lines[k])
        if not opening:
            k += 1
            continue
        indent, fence, language = opening.groups()
        end = k + 1
        while end < len(lines) and not lines[end].strip().startswith(fence):
            end += 1
        previous = k - 1
        while previous >= 0 and not lines[previous].strip():
            previous -= 1
        marker = MARKER.match(lines[previous]) if previous >= 0 else None
        code = "\n".join(line[len(indent):] if line.startswith(indent) else line for line in lines[k + 1:end])
        blocks.append(Block(path, k + 1, language.lower(), code, marker.group(1) if marker else None,
                            (marker.group(2) or "") if marker else ""))
        k = end + 1
    return blocks


ALL_BLOCKS = [block for path in DOCS for block in fenced_blocks(path)]
RUNNABLE = [block for block in ALL_BLOCKS if block.marker == "runnable"]


def test_every_example_is_marked():
    """Every bash/python block says whether it runs (and if not, why); every fence has a language."""
    problems = []
    for block in ALL_BLOCKS:
        if not block.language:
            problems.append(f"{block.name}: a fence without a language (use `text` for diagrams)")
        elif block.language in EXECUTABLE and block.marker is None:
            problems.append(f"{block.name}: a {block.language} block without <!-- runnable --> or "
                            f"<!-- not-runnable: why --> on the line before")
        elif block.marker == "not-runnable" and not block.options:
            problems.append(f"{block.name}: <!-- not-runnable --> needs a reason after a colon")
        elif block.marker == "runnable" and block.language not in EXECUTABLE:
            problems.append(f"{block.name}: <!-- runnable --> on a {block.language!r} block, which this test "
                            f"cannot run")
    assert not problems, "\n".join(problems)


def test_the_convention_is_enforced():
    """The parser sees markers, options and reasons, and leaves an unmarked block unmarked."""
    text = ("<!-- runnable: timeout=5 exit=2 -->\n```bash\ngpuengine run nothing\n```\n\n"
            "<!-- not-runnable: needs a hardware GPU -->\n\n```python\nimport gpuengine\n```\n"
            "```bash\nls\n```\n```\ndiagram\n```\n")
    first, second, third, fourth = fenced_blocks(REPO_ROOT / "README.md", text)
    assert (first.marker, first.option("timeout", 60), first.option("exit", 0)) == ("runnable", 5, 2)
    assert first.code == "gpuengine run nothing"
    assert (second.marker, second.options, second.language) == ("not-runnable", "needs a hardware GPU", "python")
    assert third.marker is None and third.language == "bash"
    assert fourth.language == "" and fourth.code == "diagram"
    assert len(RUNNABLE) >= 10, "the docs' runnable examples were not found"


@pytest.fixture(scope="module")
def workspace(tmp_path_factory: pytest.TempPathFactory) -> dict[str, object]:
    """A scratch directory that looks like the repository's root (symlinks to its top-level entries), with
    ../shared beside it and the placeholder files of the text-generation docs; whether the reference models are
    available."""
    root = tmp_path_factory.mktemp("docs")
    work = root / "repo"
    work.mkdir()
    for entry in REPO_ROOT.iterdir():
        if entry.name != ".git":
            (work / entry.name).symlink_to(entry)
    shared = SHARED_MODELS.parent
    if shared.exists():
        (root / "shared").symlink_to(shared.resolve())
        toy = SHARED_MODELS / "toy_decoder_kv.tflite"
        (work / "model.tflite").write_bytes(toy.read_bytes())
        bundle = build_bundle(root, work / "model.tflite")
        (work / "model.litertlm").write_bytes(bundle.read_bytes())
        (work / "tokenizer.model").write_bytes((root / "tokenizer.model").read_bytes())
    from gpuengine.tools import fetch

    try:
        fetch.fetch()
        reference_models = ""
    except fetch.ModelsUnavailable as e:
        reference_models = str(e)
    return {"dir": work, "shared": shared.exists(), "reference_models_unavailable": reference_models}


@pytest.mark.parametrize("block", RUNNABLE, ids=[block.name for block in RUNNABLE])
def test_example_runs(block: Block, workspace: dict[str, object]):
    needs_shared = "../shared" in block.code or "model.litertlm" in block.code or "tokenizer.model" in block.code
    if needs_shared and not workspace["shared"]:
        pytest.skip(f"{block.name} needs ../shared/models, which this checkout does not have")
    if workspace["reference_models_unavailable"] and any(hint in block.code for hint in REFERENCE_MODEL_HINTS):
        pytest.skip(f"reference models unavailable (offline?): {workspace['reference_models_unavailable']}")
    venv_bin = REPO_ROOT / ".venv" / "bin"
    bin_dir = venv_bin if venv_bin.exists() else Path(sys.executable).parent
    env = {**os.environ, "PATH": f"{bin_dir}{os.pathsep}{os.environ.get('PATH', '')}",
           "XDG_RUNTIME_DIR": os.environ.get("XDG_RUNTIME_DIR", "/tmp")}
    if EXECUTABLE[block.language] == "bash":
        command = ["bash", "-euo", "pipefail", "-c", block.code]
    else:
        command = [str(bin_dir / "python"), "-c", block.code]
    expected = block.option("exit", 0)
    timeout = block.option("timeout", DEFAULT_TIMEOUT)
    try:
        proc = subprocess.run(command, cwd=workspace["dir"], env=env, capture_output=True, text=True,
                              timeout=timeout, stdin=subprocess.DEVNULL)
    except subprocess.TimeoutExpired:
        pytest.fail(f"{block.name} ran past its {timeout} s (raise timeout= in its marker or shorten the example)")
    report = (f"{block.name} (exit {proc.returncode}):\n--- stdout\n{proc.stdout[-3000:]}\n"
              f"--- stderr\n{proc.stderr[-3000:]}")
    assert proc.returncode == expected, f"expected exit {expected}: {report}"
    assert "Traceback" not in proc.stderr and "Traceback" not in proc.stdout, report


INLINE_CODE = re.compile(r"(?<!`)`([^`\n]+)`(?!`)")
FLAG = re.compile(r"(?<![\w-])(--[a-z0-9][a-z0-9-]*)")
PATH = re.compile(r"(?<![\w./-])((?:tools|scripts|examples|tests|gpuengine|delegate|shaders|docs)/[\w./<>*-]*[\w>*])")


def inline_spans() -> list[tuple[str, str]]:
    """(file:line, text) of every inline code span in the docs outside fenced blocks."""
    spans = []
    for path in DOCS:
        inside = False
        for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
            if FENCE.match(line):
                inside = not inside
                continue
            if not inside:
                spans += [(f"{path.relative_to(REPO_ROOT)}:{number}", m.group(1).replace("\\|", "|"))
                          for m in INLINE_CODE.finditer(line)]
    return spans


def test_inline_commands_name_real_commands_and_flags():
    """Commands quoted inline (synopses with placeholders, which the tests cannot run) name commands, scripts and
    flags that exist: `gpuengine CMD --flag` against the CLI's parser, `python FILE --flag` against the script."""
    from gpuengine.tools.cli import build_parser

    commands = next(action for action in build_parser()._actions if action.dest == "command").choices
    problems = []
    for where, text in inline_spans():
        words = text.split()
        if words[0] == "gpuengine" and len(words) > 1 and not words[1].startswith("-"):
            command = commands.get(words[1])
            if command is None:
                problems.append(f"{where}: no command `gpuengine {words[1]}`")
                continue
            problems += [f"{where}: `gpuengine {words[1]}` has no option {flag}" for flag in FLAG.findall(text)
                         if flag not in command._option_string_actions]
        elif words[0] in ("python", ".venv/bin/python") and len(words) > 1 and words[1].endswith(".py") or \
                words[0].endswith(".py") and words[0].startswith(("examples/", "scripts/")):
            name = words[1] if words[0] in ("python", ".venv/bin/python") else words[0]
            script = REPO_ROOT / name
            if not script.exists():
                problems.append(f"{where}: no script {name}")
                continue
            source = script.read_text(encoding="utf-8")
            problems += [f"{where}: {name} has no option {flag}" for flag in FLAG.findall(text)
                         if f'"{flag}"' not in source]
    assert not problems, "\n".join(problems)


def test_paths_in_the_docs_exist():
    """Repository paths quoted in the docs (tools/..., scripts/..., gpuengine/..., tests/...) exist: a module moved
    by a reorganization breaks this test, not a reader."""
    problems = []
    for where, text in inline_spans():
        for path in PATH.findall(text):
            if not (REPO_ROOT / path).exists() and not any(c in path for c in "*<>"):
                problems.append(f"{where}: no {path}")
    assert not problems, "\n".join(problems)


def test_modules_in_the_docs_exist():
    """Dotted names quoted in the docs (`gpuengine.zoo.decoder`, `gpuengine.llm.Engine`) import."""
    import importlib

    problems = []
    for where, text in inline_spans():
        for dotted in re.findall(r"(?<![\w.])(gpuengine(?:\.[A-Za-z_]\w*)+)", text):
            parts = dotted.split(".")
            for depth in range(len(parts), 0, -1):
                try:
                    found: object = importlib.import_module(".".join(parts[:depth]))
                    break
                except ImportError:
                    continue
            for attribute in parts[depth:]:
                found = getattr(found, attribute, None)
            if found is None:
                problems.append(f"{where}: {dotted} does not import")
    assert not problems, "\n".join(problems)
