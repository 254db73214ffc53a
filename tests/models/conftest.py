"""Reference models from the mediapipe==0.10.14 wheel, fetched once into the cache (skip only when offline)."""

from __future__ import annotations

import pytest

REFERENCE_MODELS = ["face_detection_short_range", "face_landmark", "selfie_segmentation", "hand_landmark_lite",
                    "palm_detection_lite", "pose_detection"]


def reference_model(name: str) -> bytes:
    from gpuengine.tools import fetch

    try:
        return fetch.model_path(name).read_bytes()
    except fetch.ModelsUnavailable as e:
        pytest.skip(f"reference models unavailable (offline?): {e}")
