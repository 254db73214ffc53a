"""gpuengine.serve.ray_app: the server as a Ray Serve deployment, run locally with `serve.run` (a Ray instance of
2 CPUs in this process, one replica asking for half a CPU; shut down at the end): the openai client gets
`gpuengine generate --top-k 1 --no-template`'s text from it, streamed and not, and OpenAI's error bodies."""

from __future__ import annotations

import socket
from collections.abc import Iterator
from pathlib import Path

import pytest

pytest.importorskip("sentencepiece")
pytest.importorskip("litert_lm_builder.litertlm_builder")
pytest.importorskip("fastapi")
openai = pytest.importorskip("openai")
ray = pytest.importorskip("ray")
serve = pytest.importorskip("ray.serve")

from builders import PROMPT  # noqa: E402
from helpers import SHARED_MODELS  # noqa: E402

from gpuengine.llm import Engine  # noqa: E402

TOY = SHARED_MODELS / "toy_decoder_kv.tflite"
pytestmark = pytest.mark.skipif(not TOY.is_file(), reason=f"shared model {TOY.name} not found")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def ray_url(bundle: Path) -> Iterator[str]:
    from gpuengine.serve.ray_app import app

    port = _free_port()
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False, configure_logging=False)
    try:
        serve.start(http_options={"host": "127.0.0.1", "port": port})
        serve.run(app(str(bundle), model_name="toy", num_cpus=0.5), name="gpuengine", route_prefix="/")
        yield f"http://127.0.0.1:{port}/v1"
    finally:
        serve.shutdown()
        ray.shutdown()


def test_ray_serve_deployment_answers_like_generate(ray_url: str, bundle: Path) -> None:
    expected = Engine(bundle).create_session(apply_prompt_template=False).generate(PROMPT, 24)  # greedy: the
    # toy bundle has no sampler parameters (gpuengine generate --top-k 1 --no-template, test_serve.py)
    client = openai.OpenAI(base_url=ray_url, api_key="none", max_retries=0, timeout=120)
    assert [m.id for m in client.models.list().data] == ["toy"]
    done = client.completions.create(model="toy", prompt=PROMPT, max_tokens=24, temperature=0)
    assert done.choices[0].text == expected and len(expected) > 20
    stream = client.completions.create(model="toy", prompt=PROMPT, max_tokens=24, temperature=0, stream=True)
    assert "".join(c.choices[0].text for c in stream if c.choices) == expected
    with pytest.raises(openai.BadRequestError) as info:
        client.completions.create(model="toy", prompt=PROMPT, top_p=2)
    assert info.value.body["param"] == "top_p"
