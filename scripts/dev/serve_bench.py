"""Serving figures through a live `gpuengine.serve` server (uvicorn in a thread on 127.0.0.1, the openai client):

- throughput: one greedy streaming request alone, then `--clients` (4) at once: tokens/s of one vs the aggregate
  (goal: aggregate >= 0.9x one, no loss to interleaving); and the same `--clients` requests one after another
  ("same work": the prompts differ in length, so alone the first prompt's request prefills less per generated
  token than the four's mix; against the same requests in turn the ratio is what interleaving itself costs);
- time to first token of a new request alone, and while `--clients` long requests are generating (goal: <= 2x);
- soak (--soak N): N short requests (every tenth abandoned after its first chunk), then the server process's
  resident memory and wgpu's live GPU buffers and bytes (its /health) against the figures before;
- --scheduler: the throughput figures on the Scheduler alone (no HTTP), what interleaving itself costs, with the
  GPU submissions and the process's CPU time per generated token (one session, the four at once, one after
  another: figures that depend less on the machine's load than tokens/s), and the time to first token alone and
  under load (medians of --runs).

The server is `gpuengine serve` in a process of its own (the clients here would share its interpreter lock).

Each figure is the best of --runs (the machine is shared); the ratios also as the median of each run's ratio (the
figures of one run are measured back to back, under the same load). Usage:
    python scripts/dev/serve_bench.py [MODEL] [--tokens 48] [--clients 4] [--runs 3] [--quantum 1] [--soak 1000]
        [--scheduler] [--json]
MODEL: a bundle or a zoo decoder (default decoder_tiny). Figures go to docs/benchmarks.md by hand, never to a test.
"""

from __future__ import annotations

import argparse
import json
import os
import queue
import socket
import statistics
import subprocess
import sys
import threading
import time
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

PROMPTS = ["The quick brown fox", "Once upon a time", "Rain falls on the green hills", "Numbers like one two",
           "She sells sea shells", "A language model reads tokens", "Small models are good for tests",
           "The GPU runs the decode loop"]


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def start(model: str, quantum: int, max_sessions: int) -> tuple[subprocess.Popen, str]:
    """`gpuengine serve` in a process of its own (the clients here do not share its interpreter lock)."""
    port = free_port()
    server = subprocess.Popen([sys.executable, "-m", "gpuengine.tools.cli", "serve", model, "--port", str(port),
                               "--quantum", str(quantum), "--max-sessions", str(max_sessions),
                               "--log-level", "warning"], stderr=subprocess.PIPE, text=True)
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 300
    while True:
        if server.poll() is not None:
            raise SystemExit(f"serve_bench: the server exited: {server.stderr.read()[-2000:]}")
        try:
            with urllib.request.urlopen(f"{url}/health", timeout=5):
                break
        except OSError:
            if time.monotonic() > deadline:
                server.kill()
                raise SystemExit("serve_bench: the server did not start in 300 s") from None
            time.sleep(0.2)
    return server, url


def health(url: str) -> dict[str, Any]:
    with urllib.request.urlopen(f"{url}/health", timeout=30) as response:
        return json.loads(response.read())


def stream(client: Any, model: str, prompt: str, tokens: int, first: threading.Event | None = None
           ) -> dict[str, float]:
    """One greedy streaming request: seconds to its first text, to its end, and its generated tokens."""
    t0 = time.perf_counter()
    ttft = None
    count = 0
    for chunk in client.completions.create(model=model, prompt=prompt, max_tokens=tokens, temperature=0,
                                           stream=True, stream_options={"include_usage": True}):
        if chunk.choices and chunk.choices[0].text and ttft is None:
            ttft = time.perf_counter() - t0
            if first is not None:
                first.set()
        if chunk.usage is not None:
            count = chunk.usage.completion_tokens
    end = time.perf_counter() - t0
    return {"ttft_s": ttft if ttft is not None else end, "total_s": end, "tokens": count}


def throughput(client: Any, model: str, tokens: int, clients: int) -> dict[str, float]:
    one = stream(client, model, PROMPTS[0], tokens)
    t0 = time.perf_counter()
    with ThreadPoolExecutor(clients) as pool:
        runs = list(pool.map(lambda p: stream(client, model, p, tokens), PROMPTS[:clients]))
    wall = time.perf_counter() - t0
    t0 = time.perf_counter()
    in_turn = [stream(client, model, p, tokens) for p in PROMPTS[:clients]]
    in_turn_s = time.perf_counter() - t0
    return {"single_tokens_per_s": one["tokens"] / one["total_s"],
            "aggregate_tokens_per_s": sum(r["tokens"] for r in runs) / wall,
            "in_turn_tokens_per_s": sum(r["tokens"] for r in in_turn) / in_turn_s,
            "tokens_each": [r["tokens"] for r in runs]}


def ttft(client: Any, model: str, tokens: int, clients: int) -> dict[str, float]:
    alone = stream(client, model, PROMPTS[-1], 2)["ttft_s"]
    started = [threading.Event() for _ in range(clients)]
    with ThreadPoolExecutor(clients) as pool:
        load = [pool.submit(stream, client, model, PROMPTS[k], tokens, started[k]) for k in range(clients)]
        for event in started:
            event.wait(120)
        loaded = stream(client, model, PROMPTS[-1], 2)["ttft_s"]
        busy = all(not f.done() for f in load)  # the new request came while all of them were generating
        for f in load:
            f.result()
    return {"ttft_alone_s": alone, "ttft_loaded_s": loaded, "load_still_running": busy}


def rss_bytes(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    return 0


def soak(url: str, model: str, pid: int, count: int) -> dict[str, Any]:
    """`count` short requests, every tenth abandoned after its first chunk; the server's resident memory and GPU
    objects (its /health) before (after 20 warm-up requests) and after."""
    import httpx2 as httpx

    body = {"model": model, "prompt": PROMPTS[0], "max_tokens": 4, "temperature": 0}

    def settled() -> dict[str, Any]:
        while health(url)["active_sessions"]:
            time.sleep(0.05)
        h = health(url)
        return {"rss_bytes": rss_bytes(pid), "gpu_buffers": h["gpu_buffers"], "gpu_bytes": h["gpu_bytes"],
                "served": h["served"]}

    with httpx.Client(base_url=f"{url}/v1", timeout=120) as http:
        def one(k: int) -> None:
            if k % 10 == 9:
                with http.stream("POST", "/completions", json={**body, "stream": True}) as response:
                    next(response.iter_lines())
                return
            response = http.post("/completions", json={**body, "seed": k, "prompt": PROMPTS[k % len(PROMPTS)]})
            response.raise_for_status()

        for k in range(20):
            one(k)
        before = settled()
        t0 = time.perf_counter()
        rounds = []  # after each quarter: a leak grows every quarter, a warm-up only at first
        for quarter in range(4):
            for k in range(quarter * count // 4, (quarter + 1) * count // 4):
                one(k)
            rounds.append(settled())
        seconds = time.perf_counter() - t0
    return {"requests": count, "seconds": seconds, "before": before, "after": rounds[-1], "quarters": rounds}


def scheduler_level(model: str, tokens: int, clients: int, quantum: int, runs: int = 3) -> dict[str, float]:
    """The same throughput figures on the Scheduler itself, no HTTP: what interleaving costs."""
    from gpuengine.llm import Engine
    from gpuengine.serve.scheduler import Scheduler

    engine = Engine(model)
    scheduler = Scheduler(engine, max_sessions=clients + 1, quantum=quantum)
    ids = [[*engine.bundle.start_ids, *engine.tokenizer.encode(p)] for p in PROMPTS[:clients]]
    greedy = engine.default_sampler.__class__(top_k=1)
    queue_class = type(engine.device.queue)  # every GPU submission of the process counted (this script only)
    submit = queue_class.submit
    submissions = [0]

    def counted(self: Any, *args: Any, **kwargs: Any) -> Any:
        submissions[0] += 1
        return submit(self, *args, **kwargs)

    queue_class.submit = counted
    per_token: dict[str, list[tuple[float, float]]] = {"one": [], "at_once": [], "in_turn": []}

    def run(prompts: list[list[int]], in_turn: bool = False, key: str = "") -> float:
        done: queue.Queue = queue.Queue()
        counts = [0] * len(prompts)

        def sink(k: int) -> Any:
            def put(event: Any) -> None:
                if event[0] == "token":
                    counts[k] += 1
                else:
                    done.put(event)
            return put

        submitted, cpu = submissions[0], time.process_time()
        t0 = time.perf_counter()
        for k, p in enumerate(prompts):
            scheduler.submit(p, tokens, greedy, sink(k))
            if in_turn:
                done.get(timeout=300)
        for _ in [] if in_turn else prompts:
            done.get(timeout=300)
        seconds = time.perf_counter() - t0
        if key:
            per_token[key].append(((submissions[0] - submitted) / sum(counts),
                                   (time.process_time() - cpu) / sum(counts) * 1e3))
        return sum(counts) / seconds

    new = [*engine.bundle.start_ids, *engine.tokenizer.encode(PROMPTS[-1])]

    def first_token() -> float:
        """Seconds from a new request's submit to its first token (its session made, its prompt prefilled)."""
        events: queue.Queue = queue.Queue()
        t0 = time.perf_counter()
        scheduler.submit(new, 2, greedy, events.put)
        events.get(timeout=300)
        seconds = time.perf_counter() - t0
        while events.get(timeout=300)[0] == "token":
            pass
        return seconds

    def first_token_loaded() -> float:
        """The same while `clients` long requests generate (each has streamed a token)."""
        started = [threading.Event() for _ in ids]
        done: queue.Queue = queue.Queue()
        for k, p in enumerate(ids):
            def sink(event: Any, k: int = k) -> None:
                if event[0] == "token":
                    started[k].set()
                else:
                    done.put(event)
            scheduler.submit(p, tokens, greedy, sink)
        for event in started:
            event.wait(300)
        seconds = first_token()
        for _ in ids:
            done.get(timeout=300)
        return seconds

    try:
        run(ids[:1])
        rates = [(run(ids[:1], key="one"), run(ids, key="at_once"), run(ids, in_turn=True, key="in_turn"))
                 for _ in range(runs)]
        waits = [(first_token(), first_token_loaded()) for _ in range(runs)]
    finally:
        scheduler.close()
        queue_class.submit = submit
    single, aggregate, in_turn = (max(r[k] for r in rates) for k in range(3))
    return {"single_tokens_per_s": single, "aggregate_tokens_per_s": aggregate, "ratio": aggregate / single,
            "in_turn_tokens_per_s": in_turn, "ratio_same_work": aggregate / in_turn,
            "ratio_median": statistics.median(r[1] / r[0] for r in rates),
            "ratio_same_work_median": statistics.median(r[1] / r[2] for r in rates),
            "ttft_alone_ms": statistics.median(w[0] for w in waits) * 1e3,
            "ttft_loaded_ms": statistics.median(w[1] for w in waits) * 1e3,
            **{f"submissions_per_token_{k}": statistics.median(v[0] for v in vs) for k, vs in per_token.items()},
            **{f"cpu_ms_per_token_{k}": statistics.median(v[1] for v in vs) for k, vs in per_token.items()}}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("model", nargs="?", default="decoder_tiny")
    parser.add_argument("--tokens", type=int, default=48)
    parser.add_argument("--clients", type=int, default=4)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--quantum", type=int, default=1, help="the scheduler's tokens per session per turn")
    parser.add_argument("--scheduler", action="store_true", help="also the throughput on the Scheduler alone (no "
                                                                 "HTTP, in this process)")
    parser.add_argument("--soak", type=int, default=0, help="requests of the memory soak (0: none)")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)

    import openai

    name = Path(args.model).stem or args.model
    report: dict[str, Any] = {"model": args.model, "tokens": args.tokens, "clients": args.clients,
                              "quantum": args.quantum, "runs": args.runs}
    server, url = start(args.model, args.quantum, max(8, args.clients + 1))
    try:
        client = openai.OpenAI(base_url=f"{url}/v1", api_key="none", max_retries=0, timeout=300)
        stream(client, name, PROMPTS[0], 4)  # warm-up: the sampler kernel, the HTTP stack
        rates = [throughput(client, name, args.tokens, args.clients) for _ in range(args.runs)]
        waits = [ttft(client, name, args.tokens, args.clients) for _ in range(args.runs)]
        single = max(r["single_tokens_per_s"] for r in rates)
        aggregate = max(r["aggregate_tokens_per_s"] for r in rates)
        in_turn = max(r["in_turn_tokens_per_s"] for r in rates)
        alone = min(w["ttft_alone_s"] for w in waits)
        loaded = min(w["ttft_loaded_s"] for w in waits)
        report.update(single_tokens_per_s=single, aggregate_tokens_per_s=aggregate,
                      aggregate_over_single=aggregate / single, in_turn_tokens_per_s=in_turn,
                      aggregate_over_in_turn=aggregate / in_turn,
                      ratio_median=statistics.median(r["aggregate_tokens_per_s"] / r["single_tokens_per_s"]
                                                     for r in rates),
                      ratio_same_work_median=statistics.median(r["aggregate_tokens_per_s"] / r["in_turn_tokens_per_s"]
                                                               for r in rates),
                      load_average=os.getloadavg()[0], ttft_alone_ms=alone * 1e3,
                      ttft_loaded_ms=loaded * 1e3, ttft_loaded_over_alone=loaded / alone,
                      load_still_running=all(w["load_still_running"] for w in waits),
                      session_bytes=health(url)["session_bytes"])
        if args.soak:
            report["soak"] = soak(url, name, server.pid, args.soak)
    finally:
        server.terminate()
        server.wait(60)
    if args.scheduler:
        report["scheduler_level"] = scheduler_level(args.model, args.tokens, args.clients, args.quantum, args.runs)
        report["load_average_end"] = os.getloadavg()[0]
    if args.json:
        print(json.dumps(report))
        return 0
    print(f"{report['model']}: {args.clients} clients x {args.tokens} greedy tokens, "
          f"best of {args.runs}, scheduler quantum {report['quantum']}")
    print(f"  one session {single:.1f} tokens/s; {args.clients} at once {aggregate:.1f} tokens/s in all "
          f"({aggregate / single:.2f}x; median of the runs' ratios {report['ratio_median']:.2f}x); the same "
          f"{args.clients} requests one after another {in_turn:.1f} tokens/s ({aggregate / in_turn:.2f}x; median "
          f"{report['ratio_same_work_median']:.2f}x); load average {report['load_average']:.1f}")
    print(f"  time to first token alone {alone * 1e3:.0f} ms, under load {loaded * 1e3:.0f} ms "
          f"({loaded / alone:.2f}x)")
    if "soak" in report:
        s = report["soak"]
        print(f"  soak: {s['requests']} requests in {s['seconds']:.0f} s; before {s['before']}")
        for k, q in enumerate(s["quarters"]):
            print(f"    after {(k + 1) * s['requests'] // 4}: {q}")
    if "scheduler_level" in report:
        r = report["scheduler_level"]
        print(f"  scheduler alone (no HTTP): one {r['single_tokens_per_s']:.1f} tokens/s, {args.clients} at once "
              f"{r['aggregate_tokens_per_s']:.1f} ({r['ratio']:.2f}x; median {r['ratio_median']:.2f}x), one after "
              f"another {r['in_turn_tokens_per_s']:.1f} ({r['ratio_same_work']:.2f}x; median "
              f"{r['ratio_same_work_median']:.2f}x); load average {report['load_average_end']:.1f}")
        print(f"    time to first token alone {r['ttft_alone_ms']:.1f} ms, under load {r['ttft_loaded_ms']:.1f} ms "
              f"({r['ttft_loaded_ms'] / r['ttft_alone_ms']:.2f}x; medians)")
        print("    per generated token (medians): GPU submissions " + ", ".join(
            f"{k.replace('_', ' ')} {r['submissions_per_token_' + k]:.2f}" for k in ("one", "at_once", "in_turn")) +
              "; process CPU ms " + ", ".join(
            f"{k.replace('_', ' ')} {r['cpu_ms_per_token_' + k]:.2f}" for k in ("one", "at_once", "in_turn")))
    return 0


if __name__ == "__main__":
    sys.exit(main())
