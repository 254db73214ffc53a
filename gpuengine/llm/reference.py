"""The same generation with LiteRT's Interpreter on the CPU driving the same signatures (the KV cache through the
host, as LiteRT users do): the oracle for the tokens, and the CPU column of `bench --llm`."""

from __future__ import annotations

import time

import numpy as np

from .engine import Timing, chunk_plan
from .sampling import SamplerConfig, sample


class LiteRTDecoder:
    """prefill_N / decode of a model bytes with ai_edge_litert (pip install 'gpuengine[litert]')."""

    def __init__(self, model: bytes, cache_length: int, num_threads: int | None = None) -> None:
        from ai_edge_litert.interpreter import Interpreter

        self.interpreter = Interpreter(model_content=model, num_threads=num_threads)
        self.decode = self.interpreter.get_signature_runner("decode")
        details = self.decode.get_input_details()
        self.cache_names = sorted(set(details) & set(self.decode.get_output_details()))
        self.prefills = {}
        for key in self.interpreter.get_signature_list():
            if key.startswith("prefill"):
                runner = self.interpreter.get_signature_runner(key)
                self.prefills[int(runner.get_input_details()["tokens"]["shape"][-1])] = runner
        self.cache_length = cache_length
        self.cache = {n: np.zeros(details[n]["shape"], details[n]["dtype"]) for n in self.cache_names}
        self.timing = Timing()

    def _step(self, token: int, position: int) -> np.ndarray:
        out = self.decode(tokens=np.array([[token]], np.int32), input_pos=np.array([position], np.int32),
                          **self.cache)
        self.cache = {n: out[n] for n in self.cache_names}
        return out["logits"].reshape(-1)

    def generate(self, ids: list[int], max_tokens: int, config: SamplerConfig | None = None,
                 stop: set[int] | None = None, start: int = 0, step0: int = 0) -> list[int]:
        """The tokens generated after `ids` (fed from position `start`), as gpuengine's Session does."""
        config, stop = config or SamplerConfig(), stop or set()
        t0 = time.perf_counter()
        k = 0
        for n, take in chunk_plan(len(ids) - 1, start, list(self.prefills), self.cache_length):
            if n == 0:
                self._step(ids[k], start + k)
            else:
                tokens = np.zeros((1, n), np.int32)
                tokens[0, :take] = ids[k:k + take]
                out = self.prefills[n](tokens=tokens, input_pos=np.arange(start + k, start + k + n, dtype=np.int32),
                                       **self.cache)
                self.cache = {name: out[name] for name in self.cache_names}
            k += take
        token, position = ids[-1], start + len(ids) - 1
        count = min(max_tokens, self.cache_length - position)
        generated: list[int] = []
        first_at = 0.0
        for s in range(count):
            token = sample(self._step(token, position + s), config, step0 + s)
            if s == 0:
                first_at = time.perf_counter()
            generated.append(token)
            if token in stop:
                break
        end = time.perf_counter()
        self.timing = Timing(prefill_tokens=len(ids), prefill_s=first_at - t0, decode_tokens=len(generated) - 1,
                             decode_s=end - first_at)
        return generated
