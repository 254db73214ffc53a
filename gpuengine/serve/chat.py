"""Chat messages to the prompt text the model reads.

With the bundle's prompt templates (LlmMetadata prompt_templates: a prefix and a suffix per role) each turn is
wrapped in its role's affixes (assistant turns in the model's, system and developer turns in the system's) and the
model's prefix opens the reply. A bundle without templates gets the plain fallback: one line per message,
`role: content`, then `assistant: ` (never an error).
"""

from __future__ import annotations

from typing import Any

ROLE_TEMPLATE = {"system": "system", "developer": "system", "user": "user", "assistant": "model", "tool": "user"}


def chat_prompt(bundle: Any, messages: list[dict[str, Any]]) -> str:
    """The prompt text of these messages (after the start token)."""
    templates = bundle.templates
    if not templates:
        return "".join(f"{m['role']}: {m['content']}\n" for m in messages) + "assistant: "
    parts = []
    for m in messages:
        t = templates.get(ROLE_TEMPLATE[m["role"]])
        parts.append((t.prefix if t else "") + m["content"] + (t.suffix if t else ""))
    model = templates.get("model")
    return "".join(parts) + (model.prefix if model else "")
