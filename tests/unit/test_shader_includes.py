"""The shader include mechanism (codegen: `#include "<path>"` lines resolved against shaders/include/ when a shader
file is loaded): every packaged shader and snippet loads, and a bad include fails naming its file. No GPU."""

from __future__ import annotations

from importlib import resources

import pytest

from gpuengine.lowering import codegen


def _shader_files(folder: str = "") -> list[str]:
    """Paths (relative to shaders/) of the packaged .wgsl files under folder."""
    root = resources.files("gpuengine.shaders")
    base = root.joinpath(folder) if folder else root
    out = []
    for entry in base.iterdir():
        path = f"{folder}/{entry.name}" if folder else entry.name
        if entry.is_dir():
            out += _shader_files(path)
        elif entry.name.endswith(".wgsl"):
            out.append(path)
    return sorted(out)


TEMPLATES = [p.removesuffix(".wgsl") for p in _shader_files() if "/" not in p]
SNIPPETS = [p.removeprefix(f"{codegen.INCLUDE_DIR}/") for p in _shader_files(codegen.INCLUDE_DIR)]


def test_shaders_are_found():
    assert len(TEMPLATES) >= 30 and "element_main.wgsl" in SNIPPETS and "math/exp4.wgsl" in SNIPPETS


@pytest.mark.parametrize("name", TEMPLATES)
def test_every_template_loads_with_its_includes_resolved(name):
    text = codegen.load_template(name).template
    assert "#include" not in text
    assert "fn main(" in text


@pytest.mark.parametrize("path", SNIPPETS)
def test_every_snippet_loads(path):
    text = codegen.snippet(path)
    assert text.strip() and "#include" not in text
    assert not text.lstrip().startswith("//"), "a snippet's leading comment is its documentation, not included"


def test_every_snippet_is_used():
    """A snippet no shader, snippet, kernel or codegen names is dead code."""
    import gpuengine.lowering.kernels as kernels

    texts = [resources.files("gpuengine.shaders").joinpath(p).read_text() for p in _shader_files()]
    kernel_dir = resources.files(kernels)
    texts += [f.read_text() for f in kernel_dir.iterdir() if f.name.endswith(".py")]
    texts.append(resources.files("gpuengine.lowering").joinpath("codegen.py").read_text())
    for path in SNIPPETS:
        assert any(f'"{path}"' in t for t in texts), f"{path} is included nowhere"


def _fake_files(monkeypatch, files: dict[str, str]) -> None:
    def read(path: str) -> str:
        if path not in files:
            raise FileNotFoundError(path)
        return files[path]

    monkeypatch.setattr(codegen, "_shader_file", read)


def test_include_replaces_the_line_indented_without_the_documentation(monkeypatch):
    _fake_files(monkeypatch, {
        "include/outer.wgsl": "// documentation\n// more of it\nlet a = 1;\n#include \"inner.wgsl\"\n",
        "include/inner.wgsl": "// inner's documentation\nlet b = 2;\n\nlet c = 3;\n",
    })
    text = "fn main() {\n  #include \"outer.wgsl\"\n}\n"
    assert codegen._resolve(text, "k.wgsl", ()) == "fn main() {\n  let a = 1;\n  let b = 2;\n\n  let c = 3;\n}\n"


def test_a_missing_include_names_the_file_and_its_includer(monkeypatch):
    _fake_files(monkeypatch, {"include/outer.wgsl": "#include \"nowhere/missing.wgsl\"\n"})
    with pytest.raises(codegen.ShaderIncludeError, match=r"include/outer\.wgsl.*include/nowhere/missing\.wgsl"):
        codegen._resolve("#include \"outer.wgsl\"\n", "k.wgsl", ())


def test_an_include_loop_is_refused(monkeypatch):
    _fake_files(monkeypatch, {"include/a.wgsl": "#include \"b.wgsl\"\n", "include/b.wgsl": "#include \"a.wgsl\"\n"})
    with pytest.raises(codegen.ShaderIncludeError, match=r"loop a\.wgsl -> b\.wgsl -> a\.wgsl"):
        codegen._resolve("#include \"a.wgsl\"\n", "k.wgsl", ())


@pytest.mark.parametrize("path", ["../conv2d.wgsl", "/etc/passwd", "x.txt", ""])
def test_an_include_outside_the_folder_is_refused(monkeypatch, path):
    _fake_files(monkeypatch, {})
    with pytest.raises(codegen.ShaderIncludeError, match="invalid include path"):
        codegen._resolve(f"#include \"{path}\"\n", "k.wgsl", ())


def test_fill_indents_the_snippet_before_the_values_go_in(monkeypatch):
    """A piece a kernel chooses per dispatch: numbers become literals, Code goes in as it is, and only the snippet's
    own lines take the placeholder's indentation (a value's lines keep theirs)."""
    monkeypatch.setattr(codegen, "snippet", lambda path: "// doc\nfor (var i = 0u; i < ${N}u; i++) {\n  ${BODY}\n}\n"
                        .split("\n", 1)[1])
    body = codegen.Code("a += 1.0;\n    b += 2.0;")
    assert codegen.fill("x.wgsl", {"N": 3, "BODY": body}, "  ") == (
        "for (var i = 0u; i < 3u; i++) {\n    a += 1.0;\n    b += 2.0;\n  }")
    with pytest.raises(ValueError, match=r"include/x\.wgsl needs parameter 'BODY'"):
        codegen.fill("x.wgsl", {"N": 3}, "")
