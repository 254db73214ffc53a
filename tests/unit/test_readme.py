"""The docs' claims that code can check: the supported-op table is the registry's (regenerate it with
`gpuengine ops` when ops change), the README's commands are the scripts CI runs, and every link resolves."""

import re

from gpuengine.tools.ops import ops_markdown
from helpers import REPO_ROOT

ROOT = REPO_ROOT
README = ROOT / "README.md"
OPS_PAGE = ROOT / "docs" / "guide" / "ops.md"


def test_ops_page_lists_exactly_the_registered_ops():
    text = OPS_PAGE.read_text()
    start, end = text.index("<!-- ops:begin -->"), text.index("<!-- ops:end -->")
    assert text[start + len("<!-- ops:begin -->"):end].strip() == ops_markdown().strip()


def test_readme_links_the_ops_page():
    assert "docs/guide/ops.md" in README.read_text()


def test_readme_commands_are_the_scripts_ci_runs():
    text = README.read_text()
    ci = (ROOT / ".ci" / "run").read_text()
    assert "## The two commands" in text
    assert "bash scripts/test.sh" in text and "bash scripts/test.sh" in ci
    assert "bash scripts/run.sh" in text and (ROOT / "scripts" / "run.sh").exists()


def test_readme_stays_short():
    assert len(README.read_text().splitlines()) <= 250


def _anchor(heading: str) -> str:
    """GitHub's anchor for a heading: lower case, punctuation dropped, spaces as hyphens."""
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


def test_relative_links_in_readme_and_docs_resolve():
    pages = [README, *sorted((ROOT / "docs").rglob("*.md"))]
    anchors = {page.resolve(): {_anchor(h) for h in re.findall(r"^#+ (.*)$", page.read_text(), re.M)}
               for page in pages}
    broken = []
    for page in pages:
        for target in re.findall(r"\]\(([^)\s]+)\)", page.read_text()):
            if re.match(r"[a-z]+:", target):
                continue
            path, _, anchor = target.partition("#")
            resolved = (page.parent / path).resolve() if path else page.resolve()
            if not resolved.exists() or (anchor and resolved in anchors and anchor not in anchors[resolved]):
                broken.append(f"{page.relative_to(ROOT)} -> {target}")
    assert not broken, broken
