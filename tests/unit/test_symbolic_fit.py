"""The symbolic plan's expression fit (runtime/symbolic_plan.py fit): exact integer combinations of features over
sampled sizes, the simplest first, None when no combination is exact."""

from __future__ import annotations

import numpy as np

from gpuengine.runtime.symbolic_plan import Feature, features_of, fit

SAMPLES = [(h, w) for h, w in zip((3, 5, 6, 8, 9, 12, 16, 17, 23, 31, 40, 47, 64, 65, 96),
                                  (17, 23, 31, 32, 40, 47, 64, 65, 96, 3, 5, 6, 8, 9, 12))]


def _matrix(features: list[Feature]) -> np.ndarray:
    return np.array([[f.value([h, w, -(-h // 2), -(-w // 2)]) for f in features] for h, w in SAMPLES], np.int64)


def test_fits_constants_products_parities_and_tile_counts() -> None:
    features = features_of(4)
    matrix = _matrix(features)
    names = ["H", "W", "ceil(H/2)", "ceil(W/2)"]
    cases = {
        "7": [7 for _ in SAMPLES],
        "H*W - 1": [h * w - 1 for h, w in SAMPLES],
        "2*ceil(H/2) - H": [2 * -(-h // 2) - h for h, _ in SAMPLES],  # SAME padding's parity
        "ceil(ceil(H/2)*ceil(W/2)/8)": [-(-(-(-h // 2) * -(-w // 2)) // 8) for h, w in SAMPLES],
        "4*H*W + 3*W": [4 * h * w + 3 * w for h, w in SAMPLES],
    }
    for text, column in cases.items():
        expr = fit(matrix, np.array(column), atom_count=4)
        assert expr is not None, text
        assert [expr(list(row)) for row in matrix] == column, text
        assert expr.text(features, names), text
    assert fit(matrix, np.array([(h * 7919 + w * 104729) % 97 for h, w in SAMPLES]), atom_count=4) is None


def test_feature_text_and_value() -> None:
    f = Feature((0, 1), 8)
    assert f.value([5, 7]) == 5 and f.text(["H", "W"]) == "ceil(H*W/8)"
