"""Reading a run's checkpoints back (they are written atomically by :mod:`spmlkit.io`)."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import torch

__all__ = ["load_checkpoint"]


def load_checkpoint(path: str | os.PathLike) -> dict[str, Any]:
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"checkpoint {path} not found")
    try:
        # our own files: they hold numpy RNG states and plain dicts besides tensors
        return torch.load(path, map_location="cpu", weights_only=False)
    except Exception as exc:
        raise ValueError(f"checkpoint {path} cannot be read ({type(exc).__name__}: {exc}); "
                         "it may be from another program or damaged") from exc
