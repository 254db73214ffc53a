"""Chat templates: a list of messages -> the prompt text, rendered as LiteRT-LM renders it.

Three kinds, by what the bundle carries (ChatTemplate.for_bundle):
- a Jinja template (LlmMetadata.jinja_prompt_template, or a Hugging Face tokenizer_config.json `chat_template`),
  rendered by jinja2 in its sandbox (ImmutableSandboxedEnvironment) with the settings LiteRT-LM's MiniJinja and
  Hugging Face use (trim_blocks, lstrip_blocks, loop controls) and its variables: messages, add_generation_prompt,
  bos_token and eos_token ("": the session feeds the start token as an id, as LiteRT-LM does), tools (when given),
  raise_exception, strftime_now; values print as MiniJinja prints them (true, none, JSON-style lists and maps);
- the prefix/suffix templates of LlmMetadata.prompt_templates: prefix + content + suffix per message (role
  "assistant" uses the "model" affixes), the model's prefix as the generation prompt; as LiteRT-LM does, one
  leading newline of each affix is dropped (its generated template's trim_blocks);
- none: the plain fallback, LiteRT-LM's: the messages' contents one after the other, nothing added.

Message content is a string or a list of typed parts ({"type": "text", "text": ...}). LiteRT-LM hands templates the
list form; here a string is handed as a string where the template renders one (Hugging Face's convention, which
templates written for either form render alike) and as the list otherwise.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Any

from .bundle import Bundle, PromptTemplate

ROLES = ("system", "user", "assistant", "model", "tool")
PROBE = "gpuengine-probe-7f3a"  # content of the message that tells whether a template renders string content


class TemplateError(ValueError):
    """A chat template failed to render (its own raise_exception, a syntax error, an undefined operation)."""


def message_text(content: Any) -> str:
    """The text of a message's content: the string, or its text parts joined."""
    if isinstance(content, str):
        return content
    return "".join(str(part.get("text", "")) for part in content if isinstance(part, Mapping)
                   and part.get("type") == "text")


def normalize_message(message: Any) -> dict[str, Any]:
    """A message dict {"role", "content"} checked: a known role (ValueError naming it), content a string or a list
    of typed parts; a bare string is a user message."""
    if isinstance(message, str):
        return {"role": "user", "content": message}
    if not isinstance(message, Mapping):
        raise ValueError(f"a message is a dict with 'role' and 'content', got {type(message).__name__}")
    role = message.get("role")
    if role not in ROLES:
        raise ValueError(f"unknown message role {role!r}; roles: {', '.join(ROLES)}")
    content = message.get("content", "")
    if content is None:
        content = ""
    if not isinstance(content, str) and not (isinstance(content, Sequence) and all(
            isinstance(p, Mapping) and isinstance(p.get("type"), str) for p in content)):
        raise ValueError(f"the content of a {role} message must be a string or a list of typed parts "
                         f"({{'type': 'text', 'text': ...}}), got {type(content).__name__}")
    out = dict(message)
    out["content"] = content if isinstance(content, str) else [dict(p) for p in content]
    return out


def minijinja_display(value: Any) -> Any:
    """How MiniJinja (LiteRT-LM's Jinja) prints a value that is not a string: true / false, none, lists and maps
    JSON-style."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if value is None:
        return "none"
    if isinstance(value, (list, tuple, dict)):
        return json.dumps(value, ensure_ascii=False, default=str)
    return value


def to_json(value: Any, indent: int | None = None, separators: tuple[str, str] | None = None,
            sort_keys: bool = False) -> str:
    """The `tojson` filter as Hugging Face and MiniJinja give it (no HTML escaping)."""
    return json.dumps(value, ensure_ascii=False, indent=indent, separators=separators, sort_keys=sort_keys)


def raise_exception(message: str) -> None:
    raise TemplateError(f"the chat template raised: {message}")


def strftime_now(fmt: str) -> str:
    return datetime.now().strftime(fmt)


class ChatTemplate:
    """Renders messages to prompt text: render(messages, add_generation_prompt) -> str (TemplateError naming what
    failed)."""

    def __init__(self, jinja: str = "", affixes: Mapping[str, PromptTemplate] | None = None) -> None:
        self.source = jinja
        self.affixes = dict(affixes or {})
        self.kind = "jinja" if jinja else "affixes" if self.affixes else "plain"
        self._template: Any = None
        self.string_content = True
        if jinja:
            try:
                from jinja2 import TemplateSyntaxError
                from jinja2.sandbox import ImmutableSandboxedEnvironment
            except ImportError as e:
                raise ImportError("rendering a chat template needs `jinja2` (pip install 'gpuengine[llm]')") from e
            env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True,
                                                extensions=["jinja2.ext.loopcontrols"], finalize=minijinja_display)
            env.filters["tojson"] = to_json
            env.globals.update(raise_exception=raise_exception, strftime_now=strftime_now)
            try:
                self._template = env.from_string(jinja)
            except TemplateSyntaxError as e:
                raise TemplateError(f"the chat template does not parse: {e.message} (line {e.lineno})") from e
            try:
                self.string_content = PROBE in self._render([{"role": "user", "content": PROBE}], False, None)
            except TemplateError:
                self.string_content = False

    @classmethod
    def for_bundle(cls, bundle: Bundle, chat_template: str | None = None) -> ChatTemplate:
        """The bundle's template (or `chat_template`, overriding it): Jinja, else its prefix/suffix affixes, else
        the plain fallback."""
        jinja = chat_template if chat_template is not None else bundle.chat_template
        return cls(jinja or "", None if jinja else bundle.templates)

    def render(self, messages: Sequence[Any], add_generation_prompt: bool = True,
               tools: Sequence[Any] | None = None) -> str:
        messages = [normalize_message(m) for m in messages]
        if self.kind == "jinja":
            if not self.string_content:
                messages = [{**m, "content": [{"type": "text", "text": m["content"]}]}
                            if isinstance(m["content"], str) else m for m in messages]
            return self._render(messages, add_generation_prompt, tools)
        if self.kind == "plain":
            return "".join(message_text(m["content"]) for m in messages)
        parts = []
        for m in messages:
            affix = self._affix(m["role"])
            parts.append(affix.prefix + message_text(m["content"]) + affix.suffix)
        if add_generation_prompt:
            parts.append(self._affix("model").prefix)
        return "".join(parts)

    def _affix(self, role: str) -> PromptTemplate:
        """A role's prefix and suffix, each less one leading newline (LiteRT-LM's trim_blocks)."""
        affix = self.affixes.get("model" if role == "assistant" else role) or PromptTemplate()
        return PromptTemplate(*(a[1:] if a.startswith("\n") else a for a in (affix.prefix, affix.suffix)))

    def _render(self, messages: list[dict[str, Any]], add_generation_prompt: bool, tools: Sequence[Any] | None
                ) -> str:
        from jinja2 import TemplateError as JinjaError

        variables: dict[str, Any] = {"messages": messages, "add_generation_prompt": add_generation_prompt,
                                     "bos_token": "", "eos_token": ""}
        if tools:
            variables["tools"] = list(tools)
        try:
            return self._template.render(**variables)
        except TemplateError:
            raise
        except JinjaError as e:
            raise TemplateError(f"the chat template failed to render: {e}") from e
        except (TypeError, ValueError, KeyError, IndexError, AttributeError) as e:
            raise TemplateError(f"the chat template failed to render: {type(e).__name__}: {e}") from e
