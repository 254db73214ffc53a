"""The README's supported-op table is the registry's: regenerate it with `gpuengine ops` when ops change."""


from gpuengine.tools.ops import ops_markdown
from helpers import REPO_ROOT

README = REPO_ROOT / "README.md"


def test_readme_lists_exactly_the_registered_ops():
    text = README.read_text()
    start, end = text.index("<!-- ops:begin -->"), text.index("<!-- ops:end -->")
    assert text[start + len("<!-- ops:begin -->"):end].strip() == ops_markdown().strip()


def test_readme_commands_are_the_scripts_ci_runs():
    text = README.read_text()
    ci = (README.parent / ".ci" / "run").read_text()
    assert "bash scripts/test.sh" in text and "bash scripts/test.sh" in ci
    assert "bash scripts/run.sh" in text and (README.parent / "scripts" / "run.sh").exists()
