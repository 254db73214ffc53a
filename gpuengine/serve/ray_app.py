"""Past one GPU: gpuengine's OpenAI-compatible server as a Ray Serve deployment. Each replica opens its own Engine
(one GPU, one scheduler) and serves the same FastAPI app as `gpuengine serve`; Ray Serve routes requests among the
replicas and scales them. Needs the `ray` extra (`pip install 'gpuengine[ray]'`).

    from ray import serve
    from gpuengine.serve.ray_app import app
    serve.run(app("model.litertlm", num_replicas=2, num_gpus=1), route_prefix="/")
"""

from __future__ import annotations

from typing import Any

from ray import serve
from ray.serve import Application

from .app import Server, build_app


@serve.ingress()
class GpuEngineDeployment:
    """One replica: an Engine opened from `model`, served by build_app (built after the constructor, Ray Serve's
    late-bound ingress)."""

    def __init__(self, model: str, model_name: str, scheduling: dict[str, Any], engine_options: dict[str, Any]
                 ) -> None:
        from ..llm import Engine

        self.server = Server(Engine(model, **engine_options), model_name, **scheduling)

    def __serve_build_asgi_app__(self) -> Any:
        return build_app(self.server)


def app(model: str, *, model_name: str | None = None, max_sessions: int = 8, memory_limit: int | None = None,
        quantum: int = 1, prefix_cache: int = 0, num_replicas: int = 1, num_cpus: float = 1, num_gpus: float = 0,
        **engine_options: Any) -> Application:
    """A Ray Serve application serving `model` (a bundle path or zoo decoder) with OpenAI's API from
    `num_replicas` replicas, each asking Ray for num_cpus CPUs and num_gpus GPUs; the scheduling options are
    `gpuengine serve`'s (each replica's own); engine_options go to Engine."""
    from pathlib import Path

    name = model_name or Path(model).stem or model
    deployment = serve.deployment(GpuEngineDeployment, name="gpuengine", num_replicas=num_replicas,
                                  ray_actor_options={"num_cpus": num_cpus, "num_gpus": num_gpus})
    scheduling = {"max_sessions": max_sessions, "memory_limit": memory_limit, "quantum": quantum,
                  "prefix_cache": prefix_cache}
    return deployment.bind(str(model), name, scheduling, engine_options)
