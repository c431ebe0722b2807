"""Shared fixtures: paths to ../shared, tiny GGUF models made once per session."""

from __future__ import annotations

from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
SHARED = REPO.parent / "shared"


def shared_path(*parts: str) -> Path:
    """A file under ../shared (the project's reference material), or skip the test."""
    path = SHARED.joinpath(*parts)
    if not path.exists():
        pytest.skip(f"{path} is not here (CI clones the repo with ../shared beside it)")
    return path


@pytest.fixture(scope="session")
def qwen2_vocab() -> Path:
    return shared_path("fixtures", "ggml-vocab-qwen2.gguf")
