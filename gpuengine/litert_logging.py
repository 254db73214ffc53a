"""LiteRT's C++ runtime writes INFO lines ("INFO: Created TensorFlow Lite XNNPACK delegate for CPU.") straight to
file descriptor 2, whatever TF_CPP_MIN_LOG_LEVEL says; gpuengine's output should not carry them."""

from __future__ import annotations

import contextlib
import os
import sys
import tempfile
from collections.abc import Iterator


@contextlib.contextmanager
def without_litert_info() -> Iterator[None]:
    """Hold file descriptor 2 in a file while LiteRT starts (builds an interpreter, allocates it), then pass on
    every line but LiteRT's INFO lines."""
    sys.stderr.flush()
    try:
        saved = os.dup(2)
    except OSError:  # no descriptor 2 to hold
        yield
        return
    with tempfile.TemporaryFile() as held:
        os.dup2(held.fileno(), 2)
        try:
            yield
        finally:
            os.dup2(saved, 2)
            os.close(saved)
            held.seek(0)
            lines = held.read().decode("utf-8", "replace").splitlines(keepends=True)
            rest = "".join(line for line in lines if not line.startswith("INFO: "))
            if rest:
                sys.stderr.write(rest)
                sys.stderr.flush()
