"""Chat templates and conversations against LiteRT-LM (litert-lm-api's CPU engine on the same bundles): the text a
message adds (LiteRT-LM's Conversation.render_message_to_string) equal for a Gemma-style and a ChatML-style Jinja
template (LlmMetadata.jinja_prompt_template), the prefix/suffix templates and the plain fallback; greedy replies of
two-turn conversations equal LiteRT-LM's (the history kept in the KV cache, only the new part prefilled); a template
that re-renders earlier turns falls back to prefilling the differing part; bad roles and template errors are
clear exceptions."""

from __future__ import annotations

from pathlib import Path

import pytest

pytest.importorskip("sentencepiece")
pytest.importorskip("jinja2")
pytest.importorskip("litert_lm_builder.litertlm_builder")

from builders import bnth_cache, build_bundle  # noqa: E402
from helpers import SHARED_MODELS  # noqa: E402

from gpuengine.llm import ChatTemplate, Engine, SamplerConfig, TemplateError  # noqa: E402
from gpuengine.llm.bundle import Bundle, open_bundle  # noqa: E402

TOY = SHARED_MODELS / "toy_decoder_kv.tflite"
pytestmark = pytest.mark.skipif(not TOY.is_file(), reason=f"shared model {TOY.name} not found")

# Gemma 3's template (system prompt folded into the first user turn, typed or string content, roles alternating)
GEMMA = """{{ bos_token }}
{%- if messages[0]['role'] == 'system' -%}
    {%- if messages[0]['content'] is string -%}
        {%- set first_user_prefix = messages[0]['content'] + '\n\n' -%}
    {%- else -%}
        {%- set first_user_prefix = messages[0]['content'][0]['text'] + '\n\n' -%}
    {%- endif -%}
    {%- set loop_messages = messages[1:] -%}
{%- else -%}
    {%- set first_user_prefix = "" -%}
    {%- set loop_messages = messages -%}
{%- endif -%}
{%- for message in loop_messages -%}
    {%- if (message['role'] == 'user') != (loop.index0 % 2 == 0) -%}
        {{ raise_exception("Conversation roles must alternate user/assistant/user/assistant/...") }}
    {%- endif -%}
    {%- if (message['role'] == 'assistant') -%}
        {%- set role = "model" -%}
    {%- else -%}
        {%- set role = message['role'] -%}
    {%- endif -%}
    {{ '<start_of_turn>' + role + '\n' + (first_user_prefix if loop.first else "") }}
    {%- if message['content'] is string -%}
        {{ message['content'] | trim }}
    {%- else -%}
        {%- for item in message['content'] -%}
            {%- if item['type'] == 'text' -%}
                {{ item['text'] | trim }}
            {%- endif -%}
        {%- endfor -%}
    {%- endif -%}
    {{ '<end_of_turn>\n' }}
{%- endfor -%}
{%- if add_generation_prompt -%}
    {{'<start_of_turn>model\n'}}
{%- endif -%}
"""

# ChatML as Qwen2-VL writes it: literal newlines after block tags (trim_blocks), typed or string content
CHATML = """{% for message in messages %}{% if loop.first and message['role'] != 'system' %}<|im_start|>system
You are a helpful assistant.<|im_end|>
{% endif %}<|im_start|>{{ message['role'] }}
{% if message['content'] is string %}{{ message['content'] }}<|im_end|>
{% else %}{% for content in message['content'] %}{% if content['type'] == 'text' %}{{ content['text'] }}{% endif %}\
{% endfor %}<|im_end|>
{% endif %}{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant
{% endif %}"""

AFFIXES = {"user": ("<U>", "</U>\n"), "model": ("\n<M>", "\n\n</M>"), "system": ("\n\n<S>", "\n")}
STYLES = {"gemma": {"jinja": GEMMA}, "chatml": {"jinja": CHATML}, "affixes": {"templates": AFFIXES}, "plain": {}}
HISTORY = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "the sea"},
           {"role": "assistant", "content": "the river runs"}]


@pytest.fixture(scope="module")
def bundles(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """The toy decoder with each style of template (rendering only: its 100 positions and one prefill_100
    signature let LiteRT-LM prefill one turn)."""
    directory = tmp_path_factory.mktemp("chat")
    model = directory / "toy_bnth.tflite"
    model.write_bytes(bnth_cache(TOY.read_bytes()))
    return {name: build_bundle(directory, model, name=name, **kw) for name, kw in STYLES.items()}


@pytest.fixture(scope="module")
def engines(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Engine]:
    """A zoo decoder (float weights, 256 positions, prefill_16; the cache in [B, N, T, H] for LiteRT-LM) and the
    zoo's SentencePiece tokenizer, with the Gemma-style and the ChatML-style template: conversations of several
    turns, in LiteRT-LM too."""
    from gpuengine.zoo.decoder import DecoderConfig, decoder
    from gpuengine.zoo.tokenizer import sentencepiece_model

    directory = tmp_path_factory.mktemp("chat_zoo")
    model = directory / "zoo_bnth.tflite"
    model.write_bytes(bnth_cache(decoder(DecoderConfig(weights="f32", cache=256, prefill=16), seed=0)))
    tokenizer = sentencepiece_model(256)
    return {name: Engine(build_bundle(directory, model, max_tokens=256, jinja=jinja, name=name,
                                      sentencepiece=tokenizer))
            for name, jinja in (("gemma", GEMMA), ("chatml", CHATML))}


@pytest.fixture(scope="module")
def litert_lm():
    return pytest.importorskip("litert_lm")


@pytest.mark.parametrize("style", list(STYLES))
def test_rendered_prompt_equals_litert_lm(bundles: dict[str, Path], litert_lm, style: str) -> None:
    """A first message after a system prompt, and one after a history given at creation: the text LiteRT-LM's
    Conversation renders for it (render_message_to_string) and ours."""
    template = ChatTemplate.for_bundle(open_bundle(bundles[style]))
    first = {"role": "user", "content": "the sea"}
    then = {"role": "user", "content": "green world"}
    ours = [template.render([{"role": "system", "content": "Be brief."}, first]), template.render([*HISTORY, then])]
    lm = litert_lm.Engine(str(bundles[style]), backend=litert_lm.Backend.CPU())
    try:
        theirs = [lm.create_conversation(system_message="Be brief.").render_message_to_string(first),
                  lm.create_conversation(messages=HISTORY).render_message_to_string(then)]
    finally:
        lm.close()
    assert ours == theirs
    assert template.kind == {"gemma": "jinja", "chatml": "jinja"}.get(style, style)
    assert all(text in ours[1] for text in ("Be brief.", "the river runs", "green world"))


@pytest.mark.fp32_only("greedy text compared with LiteRT-LM's float32 CPU engine")
@pytest.mark.parametrize("style", ["gemma", "chatml"])
def test_two_turn_replies_equal_litert_lm(engines: dict[str, Engine], litert_lm, style: str,
                                          monkeypatch: pytest.MonkeyPatch) -> None:
    """Greedy, two turns: the same replies as LiteRT-LM's Conversation, the second turn's rendered part and the
    token count the same, and only that part prefilled (the first turn stays in the KV cache)."""
    engine = engines[style]
    turns = [{"role": "user", "content": "the sea"}, {"role": "user", "content": "Rain falls"}]
    lm = litert_lm.Engine(engine.bundle.source, backend=litert_lm.Backend.CPU())
    try:
        conv = lm.create_conversation(system_message="Be brief.", max_output_tokens=12,
                                      sampler_config=litert_lm.SamplerConfig(top_k=1, seed=0))
        theirs = [conv.send_message(turns[0]).to_json()["content"][0]["text"]]
        theirs_part = conv.render_message_to_string(turns[1])
        theirs.append(conv.send_message(turns[1]).to_json()["content"][0]["text"])
        theirs_count = conv.token_count
    finally:
        lm.close()
    conversation = engine.create_conversation(system_message="Be brief.", max_tokens=12,
                                              sampler_config=SamplerConfig())
    ours = [conversation.send_message(turns[0])["content"]]
    assert conversation.render_message(turns[1]) == theirs_part
    prefilled = []
    original = engine.prefill
    monkeypatch.setattr(engine, "prefill", lambda s, ids, start: (prefilled.append(len(ids)),
                                                                   original(s, ids, start))[1])
    ours.append(conversation.send_message(turns[1])["content"])
    assert ours == theirs and all(ours)
    assert conversation.token_count == theirs_count
    # fed: the pending token and the new part; prefilled: all but the last (the first decode step's input)
    assert prefilled == [len(engine.tokenizer.encode(theirs_part))]
    assert conversation.messages[-1] == {"role": "assistant", "content": ours[1]}


@pytest.mark.fp32_only("greedy tokens compared between two conversations")
def test_rerendered_history_is_prefilled_again(engines: dict[str, Engine]) -> None:
    """A template whose first line counts the messages renders the history differently at every turn: the
    conversation rewinds to the start and prefills it all, giving the reply a conversation started from that
    history gives."""
    counting = "{{ messages | length }} messages\n" + CHATML
    engine = engines["chatml"]
    greedy = SamplerConfig()
    first = engine.create_conversation(chat_template=counting, max_tokens=8, sampler_config=greedy)
    reply = first.send_message("the sea")
    again = first.send_message("Rain falls")["content"]
    fresh = engine.create_conversation(chat_template=counting, messages=[{"role": "user", "content": "the sea"}, reply],
                                       max_tokens=8, sampler_config=greedy)
    assert fresh.send_message("Rain falls")["content"] == again
    assert fresh.session.history == first.session.history


def test_streamed_reply_is_the_message(engines: dict[str, Engine]) -> None:
    engine = engines["gemma"]
    a = engine.create_conversation(max_tokens=10)
    b = engine.create_conversation(max_tokens=10)
    pieces = list(a.send_message_stream("the sea"))
    assert len(pieces) > 1 and b.send_message("the sea")["content"] == "".join(pieces)
    assert a.messages[-1]["content"] == "".join(pieces) and a.finish_reason in ("stop", "length")


def test_bad_roles_and_template_errors(engines: dict[str, Engine]) -> None:
    engine = engines["gemma"]
    conversation = engine.create_conversation()
    with pytest.raises(ValueError, match="unknown message role 'wizard'"):
        conversation.send_message({"role": "wizard", "content": "the sea"})
    with pytest.raises(ValueError, match="content of a user message must be a string or a list"):
        conversation.send_message({"role": "user", "content": 7})
    with pytest.raises(TemplateError, match="roles must alternate"):  # Gemma's raise_exception: two user turns
        engine.create_conversation(messages=[{"role": "user", "content": "a"}]).send_message("b")
    with pytest.raises(TemplateError, match="does not parse"):
        engine.create_conversation(chat_template="{% for m in messages %}")
    with pytest.raises(TemplateError, match="failed to render"):
        engine.create_conversation(chat_template="{{ messages[0].content + 1 }}").send_message("the sea")
    assert conversation.session.position == 0 and conversation.messages == []  # nothing was fed or kept


def test_template_sandbox_and_variables() -> None:
    """The template runs in jinja2's sandbox (no attribute escape), with MiniJinja's display of values."""
    template = ChatTemplate("{{ add_generation_prompt }}|{{ none }}|{{ [1, 'a'] }}|{{ {'k': 'é'} | tojson }}"
                            "|{{ bos_token }}{{ eos_token }}|{{ tools | length }}")
    assert template.render([], True, tools=[{"name": "f"}]) == 'true|none|[1, "a"]|{"k": "é"}||1'
    escape = ChatTemplate("{{ messages.__class__.__mro__[1].__subclasses__() }}")
    with pytest.raises(TemplateError):
        escape.render([{"role": "user", "content": "x"}])
    bundle = Bundle(model=b"", tokenizer=None, source="test")  # no template at all: the plain fallback
    assert ChatTemplate.for_bundle(bundle).render(HISTORY) == "Be brief.the seathe river runs"
