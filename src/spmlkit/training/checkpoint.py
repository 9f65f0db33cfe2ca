"""Reading and writing a run's checkpoints safely (they are written atomically by :mod:`spmlkit.io`).

A checkpoint is a pickle, and unpickling an arbitrary file can run any code it names. So
spmlkit only ever loads checkpoints with ``torch.load(..., weights_only=True)``, which
rebuilds tensors, plain containers, numbers, strings, bools and None and refuses everything
else; and it only ever writes checkpoints that such a load accepts (:func:`plain_checkpoint`
checks and converts what a run hands it, and the numpy random state, a tuple holding an
array, is stored as :func:`numpy_rng_state`'s plain dict). A file the safe load refuses (a
checkpoint of an older spmlkit, or a pickle from elsewhere) is reported as one line saying
what to do; it is never unpickled.
"""

from __future__ import annotations

import os
import pickle
import re
from collections import OrderedDict
from pathlib import Path
from typing import Any

import numpy as np
import torch

__all__ = ["load_checkpoint", "load_initial_weights", "plain_checkpoint", "numpy_rng_state", "set_numpy_rng_state"]

#: what ``weights_only=True`` rebuilds besides tensors and containers: what a checkpoint may hold
_PLAIN_LEAVES = (str, int, float, bool, type(None), torch.dtype, torch.device, torch.Size)


def load_checkpoint(path: str | os.PathLike) -> dict[str, Any]:
    """The checkpoint at ``path``, loaded without unpickling anything but tensors and plain data.

    Raises ``FileNotFoundError`` for a missing file and ``ValueError`` (one line: the file,
    why, what to do) for a file that is damaged, not a checkpoint, or holds Python objects.
    """
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"checkpoint {path} not found")
    try:
        ckpt = torch.load(path, map_location="cpu", weights_only=True)
    except pickle.UnpicklingError as exc:
        raise ValueError(_refusal(path, exc)) from None
    except Exception as exc:  # not a torch file at all (zip errors, truncation): every reader's own type
        reason = " ".join(str(exc).split())[:200] or type(exc).__name__
        raise ValueError(f"checkpoint {path} cannot be read ({type(exc).__name__}: {reason}); it is damaged or "
                         "not an spmlkit checkpoint: use the best.pt or last.pt that `spmlkit train` writes, or "
                         "train the run again") from None
    if not isinstance(ckpt, dict):
        raise ValueError(f"checkpoint {path} holds a {type(ckpt).__name__}, not an spmlkit checkpoint (a dict of "
                         "model weights, config and run state): use the best.pt or last.pt that `spmlkit train` "
                         "writes")
    return ckpt


def _refusal(path: Path, exc: BaseException) -> str:
    """The one line for a file the safe load refuses: what it is, why it is not loaded, what to do.

    torch's own message runs over a dozen lines and suggests ``weights_only=False``, which
    is exactly the step that would run a malicious file's code; the line names the Python
    object the file asks for, when torch says which, and nothing that loads it anyway.
    """
    named = re.search(r"GLOBAL ([\w.]+)", str(exc))
    what = f"a pickled {named.group(1)}" if named else "pickle instructions beyond tensors and plain data"
    return (f"checkpoint {path} holds Python objects that spmlkit does not load, for safety ({what}: unpickling "
            "it could run any code); if it is a run of an older spmlkit (whose last.pt pickled numpy's random "
            "state), train the run again (--overwrite, or a new --out); otherwise it is not an spmlkit checkpoint: "
            "use the best.pt or last.pt that `spmlkit train` writes")


def plain_checkpoint(obj: Any, where: str = "checkpoint") -> Any:
    """``obj`` with numpy values made plain, checked to hold only what the safe load rebuilds.

    numpy scalars become Python numbers and numpy arrays tensors (the safe load refuses
    both); dicts, lists and tuples are walked. Anything else is refused here, when the run
    writes it, rather than when a resume or ``spmlkit predict`` could no longer read the file:
    a ``TypeError`` naming the entry (``where``) and its type.
    """
    if isinstance(obj, torch.Tensor) or type(obj) in _PLAIN_LEAVES:
        return obj
    if isinstance(obj, np.generic):
        return obj.item()
    if isinstance(obj, np.ndarray):
        return torch.from_numpy(np.ascontiguousarray(obj))
    for base in (bool, int, float, str):  # subclasses (an IntEnum, a str subclass): the safe load refuses them
        if isinstance(obj, base):
            return base(obj)
    if isinstance(obj, dict):
        items = ((k, plain_checkpoint(v, f"{where}[{k!r}]")) for k, v in obj.items())
        return OrderedDict(items) if isinstance(obj, OrderedDict) else dict(items)
    if isinstance(obj, (list, tuple)):
        values = [plain_checkpoint(v, f"{where}[{i}]") for i, v in enumerate(obj)]
        return values if isinstance(obj, list) else tuple(values)
    raise TypeError(f"{where} is a {type(obj).__module__}.{type(obj).__qualname__}, which a safe checkpoint "
                    "cannot hold; state_dict() / extra_state() must return tensors, numbers, strings, bools, None, "
                    "lists and dicts")


def numpy_rng_state() -> dict[str, Any]:
    """numpy's global random state as plain data (``np.random.get_state()`` is a tuple holding an array).

    The 624 uint32 words of the Mersenne Twister key are kept in an int64 tensor: a uint32
    tensor saves and loads, but cannot be pickled on its own, which is how torch.distributed
    hands the checkpoint of a resume from rank 0 to the other processes.
    """
    algorithm, key, pos, has_gauss, cached_gaussian = np.random.get_state()
    return {"algorithm": str(algorithm), "key": torch.from_numpy(np.asarray(key, dtype=np.int64)), "pos": int(pos),
            "has_gauss": int(has_gauss), "cached_gaussian": float(cached_gaussian)}


def set_numpy_rng_state(state: dict[str, Any]) -> None:
    """Restore what :func:`numpy_rng_state` saved (the exact stream continues)."""
    key = np.asarray(state["key"].numpy() if isinstance(state["key"], torch.Tensor) else state["key"], dtype=np.uint32)
    np.random.set_state((state.get("algorithm", "MT19937"), key, int(state["pos"]), int(state["has_gauss"]),
                         float(state["cached_gaussian"])))


def load_initial_weights(model: torch.nn.Module, path: str | os.PathLike) -> None:
    """Start ``model`` from the weights of a checkpoint (``init_weights``, docs/protocol.md, "Recipes").

    Every tensor the checkpoint holds must fit the model; tensors the model has and the checkpoint
    lacks keep their fresh initialisation only when they are new parts (a label-query head's
    projector, which a first stage without embeddings does not train), and anything else missing is
    refused, naming it, so a checkpoint of
    another network never half-loads."""
    ckpt = load_checkpoint(path)
    weights = ckpt.get("model") if isinstance(ckpt, dict) else None
    if not isinstance(weights, dict):
        raise ValueError(f"init_weights {path} holds no model weights; name a run's best.pt or last.pt")
    own = model.state_dict()
    foreign = sorted(k for k in weights if k not in own)
    wrong = sorted(k for k in weights if k in own and tuple(weights[k].shape) != tuple(own[k].shape))
    missing = sorted(k for k in own if k not in weights and not k.startswith("head.projector."))
    if foreign or wrong or missing:
        what = "; ".join(f"{label} {', '.join(keys[:4])}{' ...' if len(keys) > 4 else ''}"
                         for label, keys in (("unknown to this model:", foreign), ("of another shape:", wrong),
                                             ("missing:", missing)) if keys)
        raise ValueError(f"init_weights {path} does not fit this run's model ({what}); name a checkpoint of the same "
                         "backbone, head and classes")
    model.load_state_dict(weights, strict=False)
