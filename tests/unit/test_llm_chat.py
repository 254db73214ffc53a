"""Chat templates without a model: a Hugging Face tokenizer_config.json's chat_template found beside the tokenizer,
the prefix/suffix rendering (LiteRT-LM's: one leading newline of each affix dropped), content handed as a string or
as typed parts by what the template renders, and messages checked."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

pytest.importorskip("jinja2")

from gpuengine.errors import ModelError  # noqa: E402
from gpuengine.llm.bundle import PromptTemplate, hf_chat_template  # noqa: E402
from gpuengine.llm.chat import ChatTemplate, TemplateError, normalize_message  # noqa: E402


def test_hf_chat_template_beside_the_tokenizer(tmp_path: Path) -> None:
    tokenizer = tmp_path / "tokenizer.json"
    assert hf_chat_template(tokenizer) == ""  # no tokenizer_config.json
    config = tmp_path / "tokenizer_config.json"
    config.write_text(json.dumps({"chat_template": "{{ messages[0].content }}"}))
    assert hf_chat_template(tokenizer) == "{{ messages[0].content }}"
    config.write_text(json.dumps({"chat_template": [{"name": "tool_use", "template": "T"},
                                                    {"name": "default", "template": "D"}]}))
    assert hf_chat_template(tokenizer) == "D"
    config.write_text("{not json")
    with pytest.raises(ModelError, match="tokenizer_config.json"):
        hf_chat_template(tokenizer)
    config.write_text(json.dumps({"chat_template": 3}))
    with pytest.raises(ModelError, match="not a Jinja template string"):
        hf_chat_template(tokenizer)


def test_affixes_drop_one_leading_newline() -> None:
    template = ChatTemplate(affixes={"user": PromptTemplate("<U>", "</U>\n"), "system": PromptTemplate("\n\n<S>", "\n"),
                                     "model": PromptTemplate("\n<M>", "\n\n</M>")})
    messages = [{"role": "system", "content": "s"}, {"role": "user", "content": "u"},
                {"role": "assistant", "content": [{"type": "text", "text": "a"}]}]
    assert template.render(messages) == "\n<S>s<U>u</U>\n<M>a\n</M><M>"
    assert template.render(messages, add_generation_prompt=False).endswith("</M>")


def test_content_form_follows_the_template() -> None:
    typed_only = ChatTemplate("{% for m in messages %}{% for p in m.content %}[{{ p.text }}]{% endfor %}{% endfor %}")
    assert not typed_only.string_content
    assert typed_only.render([{"role": "user", "content": "hi"}]) == "[hi]"
    plain = ChatTemplate("{% for m in messages %}{{ m.content }}{% endfor %}")
    assert plain.string_content and plain.render([{"role": "user", "content": "hi"}]) == "hi"


def test_messages_are_checked() -> None:
    assert normalize_message("hi") == {"role": "user", "content": "hi"}
    with pytest.raises(ValueError, match="unknown message role 'robot'"):
        normalize_message({"role": "robot", "content": "x"})
    with pytest.raises(ValueError, match="list of typed parts"):
        normalize_message({"role": "user", "content": [1, 2]})
    with pytest.raises(TemplateError, match="the chat template raised: no"):
        ChatTemplate("{{ raise_exception('no') }}").render([])
