"""Fetch the reference models: the .tflite files inside the mediapipe==0.10.14 wheel, cached locally (and the
`gpuengine fetch-models` command).

The wheel is fetched with `pip download --no-deps` (PyPI is the only source) for a fixed platform tag, so
every machine gets the same bytes. Cache: $GPUENGINE_MODELS, else ~/.cache/gpuengine/models.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path
from typing import Any

from gpuengine import settings

MEDIAPIPE = "mediapipe==0.10.14"
_FOLDER = "mediapipe-0.10.14"
_failure: str | None = None  # remembered so a session offline does not retry the download for every test


class ModelsUnavailable(RuntimeError):
    """The reference models are not cached and could not be downloaded (offline?)."""


def cache_dir() -> Path:
    root = settings.get(settings.MODELS)
    base = Path(root) if root else Path.home() / ".cache" / "gpuengine" / "models"
    return base / _FOLDER


def cached_models() -> dict[str, Path]:
    folder = cache_dir()
    return {p.stem: p for p in sorted(folder.rglob("*.tflite"))} if folder.exists() else {}


def fetch(force: bool = False, quiet: bool = True) -> dict[str, Path]:
    """Download and unpack the models once; returns {model name: path}."""
    global _failure
    have = cached_models()
    if have and not force:
        return have
    if _failure and not force:
        raise ModelsUnavailable(_failure)
    folder = cache_dir()
    with tempfile.TemporaryDirectory() as tmp:
        cmd = [sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:", "--python-version", "3.11",
               "--platform", "manylinux_2_17_x86_64", "--implementation", "cp", "-d", tmp, MEDIAPIPE]
        if quiet:
            cmd.insert(4, "-q")
        try:
            proc = subprocess.run(cmd, capture_output=True, text=True, timeout=900)
        except (OSError, subprocess.TimeoutExpired) as e:
            _failure = f"could not run pip to download {MEDIAPIPE}: {e}"
            raise ModelsUnavailable(_failure) from e
        wheels = list(Path(tmp).glob("mediapipe-*.whl"))
        if proc.returncode != 0 or not wheels:
            tail = (proc.stderr or proc.stdout).strip().splitlines()[-3:]
            _failure = f"pip could not download {MEDIAPIPE} (offline?): {' | '.join(tail)}"
            raise ModelsUnavailable(_failure)
        with zipfile.ZipFile(wheels[0]) as wheel:
            for member in wheel.namelist():
                if member.startswith("mediapipe/modules/") and member.endswith(".tflite"):
                    target = folder / Path(member).relative_to("mediapipe/modules")
                    target.parent.mkdir(parents=True, exist_ok=True)
                    tmp_target = target.with_suffix(".part")
                    tmp_target.write_bytes(wheel.read(member))
                    tmp_target.replace(target)
    return cached_models()


def model_path(name: str, download: bool = True) -> Path:
    """Path of a reference model by name (e.g. 'selfie_segmentation'), downloading the set if needed."""
    models = cached_models()
    if name not in models and download:
        models = fetch()
    if name not in models:
        if not models:
            raise ModelsUnavailable(f"reference models are not cached in {cache_dir()}; run `gpuengine fetch-models`")
        raise KeyError(f"no reference model named {name!r}; available: {sorted(models)}")
    return models[name]


def cmd_fetch(args: argparse.Namespace) -> int:
    try:
        models = fetch(force=args.force, quiet=False)
    except ModelsUnavailable as e:
        print(f"gpuengine: {e}", file=sys.stderr)
        return 1
    print(f"{len(models)} models in {cache_dir()}:")
    for name in models:
        print(f"  {name}")
    return 0


def add_parser(sub: Any) -> None:
    parser = sub.add_parser("fetch-models", help="download the reference models (mediapipe==0.10.14) into the cache")
    parser.add_argument("--force", action="store_true", help="download again even if the models are cached")
    parser.set_defaults(func=cmd_fetch)
