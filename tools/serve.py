"""`gpuengine serve MODEL`: the OpenAI-compatible server (gpuengine.serve) on uvicorn, one engine, many sessions."""

from __future__ import annotations

import argparse
import re
import sys
from pathlib import Path
from typing import Any

from .common import add_engine_options
from .generate import BadInput, open_bundle, open_engine

UNITS = {"": 1, "b": 1, "k": 1000, "kb": 1000, "kib": 1024, "m": 1000**2, "mb": 1000**2, "mib": 1024**2,
         "g": 1000**3, "gb": 1000**3, "gib": 1024**3}


def parse_size(text: str) -> int:
    """Bytes from `512MiB`, `2GB`, `1000000` (argparse's type: a bad size is a usage error)."""
    m = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*([a-zA-Z]*)\s*", text)
    if not m or m.group(2).lower() not in UNITS:
        raise argparse.ArgumentTypeError(f"not a size: {text!r} (say 512MiB, 2GB or a number of bytes)")
    return int(float(m.group(1)) * UNITS[m.group(2).lower()])


def model_name(model: str) -> str:
    """The name clients give as `model`: the file's name without its suffix, or the zoo decoder's name."""
    return Path(model).stem or model


def cmd_serve(args: argparse.Namespace) -> int:
    try:
        import uvicorn

        from gpuengine.serve.app import Server, build_app
    except ImportError as e:
        raise SystemExit(f"gpuengine: serve needs the serve extra (pip install 'gpuengine[serve]'): {e}") from None
    if args.max_sessions < 1:
        raise BadInput(f"--max-sessions must be >= 1, got {args.max_sessions}")
    if args.prefix_cache < 0:
        raise BadInput(f"--prefix-cache must be >= 0, got {args.prefix_cache}")
    if not 0 <= args.port < 65536:
        raise BadInput(f"--port must be in [0, 65535], got {args.port}")
    engine = open_engine(args, bundle=open_bundle(args))
    try:
        server = Server(engine, args.model_name or model_name(args.model), args.max_sessions, args.memory_limit,
                        args.quantum, args.prefix_cache)
    except ValueError as e:
        raise BadInput(str(e)) from None
    s = server.scheduler
    print(f"gpuengine serve: {server.model_name} on {engine.gpu.name}, KV cache {engine.cache_length} positions, "
          f"{s.session_bytes / 2**20:.2f} MiB a session, at most {s.max_sessions} sessions; "
          f"http://{args.host}:{args.port}/v1", file=sys.stderr, flush=True)
    uvicorn.run(build_app(server), host=args.host, port=args.port, log_level=args.log_level)
    return 0


def add_parser(sub: Any) -> None:
    p = sub.add_parser("serve", help="an OpenAI-compatible HTTP server (/v1/completions, /v1/chat/completions, "
                                     "/v1/models) for a language-model bundle",
                       description="Serve a language model over HTTP with OpenAI's API (docs/guide/serving.md). One "
                                   "engine; the decode steps of concurrent requests are interleaved; past "
                                   "--max-sessions or --memory-limit a request gets 429 with Retry-After.")
    p.add_argument("model", help="a .litertlm / .task bundle, a .tflite with --tokenizer, or a zoo decoder "
                                 "(decoder_tiny)")
    p.add_argument("--tokenizer", help="tokenizer file for a bare .tflite")
    p.add_argument("--host", default="127.0.0.1", help="address to listen on (default 127.0.0.1)")
    p.add_argument("--port", type=int, default=8000, help="port to listen on (default 8000)")
    p.add_argument("--model-name", help="the name clients give as `model` (default: the file's name without its "
                                        "suffix)")
    p.add_argument("--max-sessions", type=int, default=8, help="requests generating at once, at most (default 8)")
    p.add_argument("--memory-limit", type=parse_size, default=None, metavar="SIZE",
                   help="GPU memory the sessions' KV caches may take together (512MiB, 2GB, bytes); fewer "
                        "sessions than --max-sessions where it says so")
    p.add_argument("--quantum", type=int, default=1, help="tokens a session generates per turn of the scheduler "
                                                          "(default 1; more: a new request waits longer for its turn)")
    p.add_argument("--prefix-cache", type=int, default=0, metavar="N",
                   help="keep the last N finished sessions; a prompt that starts with one's tokens (16 or more) "
                        "continues a GPU copy of it instead of prefilling them (default 0: off)")
    p.add_argument("--steps-ahead", type=int, default=4, help="decode steps in flight in the GPU loop")
    p.add_argument("--log-level", default="info", choices=["critical", "error", "warning", "info", "debug"],
                   help="uvicorn's log level")
    add_engine_options(p)
    p.set_defaults(func=cmd_serve)
