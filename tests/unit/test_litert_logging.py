"""gpuengine.litert_logging: LiteRT's C++ INFO lines (written straight to file descriptor 2) are held back, every
other line written meanwhile is passed on."""

from __future__ import annotations

import os

from gpuengine.litert_logging import without_litert_info


def test_info_lines_are_dropped_and_the_rest_passed_on(capfd):
    with without_litert_info():
        os.write(2, b"INFO: Created TensorFlow Lite XNNPACK delegate for CPU.\n")
        os.write(2, b"ERROR: something LiteRT could not do\n")
        os.write(2, b"INFO: [accelerator_registry.cc:54] RegisterAccelerator\n")
    captured = capfd.readouterr()
    assert captured.err == "ERROR: something LiteRT could not do\n"
    os.write(2, b"INFO: after the block\n")  # descriptor 2 is back
    assert capfd.readouterr().err == "INFO: after the block\n"
