"""What a run's data *is*, beside where it lies: a digest of the files of a user's data folder.

A run is known by its settings (a sweep's run id, a run folder's ``config.yaml``), and its data
setting is a path. A feature folder or a prepared folder is the user's to write again, though:
``prepare table --out prep`` of other data, ``extract`` with another backbone. The path is then
the same and the data is not, and a benchmark that took the path for the data would find the
old data's runs "finished" and print their numbers as the new data's; a resumed run would
train its last epochs on other features than its first. So the identity of a run on a user's
folder includes :func:`data_digest`, the SHA-256 over what the folder holds
(docs/architecture.md, "What a run's id is made of"):

- a feature folder (``extract``, ``prepare table``, by hand): ``meta.json`` and each of its
  ``.npy`` files, every byte;
- a prepared image folder (``prepare``): the digests of its lists and labels that its
  ``meta.json`` records for itself (``files``), with its classes and the labels it holds. The
  images are not read (a million photos would cost minutes per run); a changed list of images
  or labels changes the digest, an image edited in place under its own name does not.

A named data set (Yeast, a MULAN set, a benchmark's official lists) has no digest: its data is
pinned by spmlkit (MULAN's files by their SHA-256) and its runs keep the ids they always had;
so has a plug-in's data set, whose code is already part of its runs' ids (docs/plugins.md).

Reading a large feature folder takes about a second per gigabyte, so each file's digest is
kept for the life of the process, keyed by the file's size, modification time and inode: a
sweep of a thousand runs reads its folder once, and a file written again is read again.
"""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path

__all__ = ["data_digest", "file_digest"]

#: the files of a feature folder (``data/feature_dir.py``), in the order they are digested
_FEATURE_FILES = ("meta.json", "train_features.npy", "train_labels.npy", "train_observed.npy", "test_features.npy",
                  "test_labels.npy")
_CHUNK = 1 << 20
#: (path, size, mtime_ns, inode) -> SHA-256 of the file
_DIGESTS: dict[tuple[str, int, int, int], str] = {}


def file_digest(path: Path) -> str:
    """The SHA-256 of ``path``'s bytes, read once per process while the file stays as it is."""
    stat = os.stat(path)
    key = (str(Path(path).absolute()), stat.st_size, stat.st_mtime_ns, stat.st_ino)
    if key not in _DIGESTS:
        sha = hashlib.sha256()
        with open(path, "rb") as fh:
            while chunk := fh.read(_CHUNK):
                sha.update(chunk)
        _DIGESTS[key] = sha.hexdigest()
    return _DIGESTS[key]


def data_digest(dataset: str, prepared: str | None = None) -> str | None:
    """The digest of the data ``dataset`` names (module docstring), None for a named data set or
    for an argument that names no readable folder (the run's own checks say what is wrong).
    ``prepared``: the prepared folder of a user's data named by its form (``folder``, ``csv``)."""
    from .registry import resolve_dataset

    try:
        ref = resolve_dataset(str(dataset))
        if ref.form == "user-form" and prepared:
            ref = resolve_dataset(str(prepared))
    except ValueError:
        return None
    try:
        if ref.form == "features-folder" and ref.path is not None:
            return _feature_folder(ref.path)
        if ref.form == "prepared-folder" and ref.path is not None:
            return _prepared_folder(ref.path)
    except (OSError, ValueError):  # unreadable now: loading the data says what is wrong, in one line
        return None
    return None


def _feature_folder(path: Path) -> str:
    sha = hashlib.sha256(b"spmlkit feature folder\n")
    for name in _FEATURE_FILES:
        if (path / name).is_file():
            sha.update(f"{name} {file_digest(path / name)}\n".encode())
    return sha.hexdigest()


def _prepared_folder(path: Path) -> str:
    from .formats.prepared import META

    meta = json.loads((path / META).read_text(encoding="utf-8"))
    held = {key: meta.get(key) for key in ("dataset", "variant", "class_names", "observation", "counts", "files")}
    return hashlib.sha256(("spmlkit prepared folder\n" + json.dumps(held, sort_keys=True)).encode()).hexdigest()
