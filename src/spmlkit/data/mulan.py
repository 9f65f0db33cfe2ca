"""The MULAN multi-label data sets by name, with their official train/test splits.

MULAN (the multi-label library of Tsoumakas et al.) distributes each set as a train ARFF, a test
ARFF and an XML file naming the label attributes. spmlkit reads them from the data folder
(:mod:`spmlkit.data.download`: ``$SPMLKIT_DATA/mulan/<set>/`` under MULAN's own file names) and,
where a set is not there yet, fetches it once from MULAN's repository at a pinned commit, checked
against the SHA-256 sums and sizes below (docs/protocol.md, "MULAN data sets"). A set parsed
from MULAN's own files is kept as an ``.npz`` beside them, so it is parsed once per data folder,
not once per process; that cache is used only when its arrays hash to the digest pinned here
(:data:`MULAN_PARSED_SHA256`, :mod:`spmlkit.data.parsed_cache`), whoever wrote it.

``yeast`` is also in MULAN; the bare name stays the copy that ships with ``river`` (no download,
:mod:`spmlkit.data.yeast`), and ``mulan/yeast`` is MULAN's own files through this module (the same
numbers: a test compares them). Every set is also reachable as ``mulan/<set>``.

``cal500`` comes as one file: MULAN publishes no official split of it, so its train list is every
row and it has no test list. The tabular protocol (``partition: random``, docs/protocol.md), under
which SMILE's README runs it, partitions it as any set; a run of the reference protocol on it has
no test numbers, as a user's data without a test list.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from .download import data_home, fetch_file

if TYPE_CHECKING:  # read when a set is loaded: the table alone (spmlkit datasets) needs neither
    import numpy as np

    from .tabular import TabularDataset

__all__ = ["MULAN_COMMIT", "MULAN_PARSED_SHA256", "MULAN_SETS", "MULAN_SHA256", "MULAN_SIZES", "MulanSet", "is_cached",
           "load_mulan", "mulan_dir", "mulan_url"]

log = logging.getLogger(__name__)

MULAN_COMMIT = "43f6389095ad71984264db4387a8074b22bc7d4a"
"""The commit of github.com/tsoumakas/mulan whose files the sums below describe (2022-09-26)."""

URL_ENV = "SPMLKIT_MULAN_URL"
"""Replaces the base address (tests serve the files from 127.0.0.1; a mirror can too)."""

_BASE_URL = f"https://raw.githubusercontent.com/tsoumakas/mulan/{MULAN_COMMIT}/data/multi-label"


@dataclass(frozen=True)
class MulanSet:
    """One set: its folder and file names in MULAN's repository, and what the files hold."""

    name: str
    train: str
    test: str | None  # None: one file, no official split (every row is the train list)
    xml: str
    train_rows: int
    test_rows: int
    labels: int
    domain: str
    drop: tuple[str, ...] = ()  # identifier attributes, not features
    features: int = 0  # feature columns of the parsed arrays (one-hot nominal attributes counted per value)

    @property
    def files(self) -> tuple[str, ...]:
        return tuple(f for f in (self.train, self.test, self.xml) if f is not None)


def _set(name, train_rows, test_rows, labels, domain, *, features, stem=None, suffix="", drop=()):
    stem = stem or name
    return MulanSet(name, f"{stem}-train{suffix}.arff", f"{stem}-test{suffix}.arff", f"{stem}.xml",
                    train_rows, test_rows, labels, domain, drop, features)


MULAN_SETS: dict[str, MulanSet] = {s.name: s for s in (
    _set("bibtex", 4880, 2515, 159, "text", features=1836),
    _set("birds", 322, 323, 19, "audio", features=271),
    MulanSet("cal500", "cal500.arff", None, "cal500.xml", 502, 0, 174, "music", features=68),
    _set("corel5k", 4500, 500, 374, "image", stem="Corel5k", suffix="-sparse", features=499),
    _set("delicious", 12920, 3185, 983, "text", features=500),
    _set("emotions", 391, 202, 6, "music", features=72),
    _set("enron", 1123, 579, 53, "text", features=1001),
    _set("flags", 129, 65, 7, "image", features=43),
    _set("genbase", 463, 199, 27, "biology", drop=("protein",), features=1185),
    _set("medical", 333, 645, 45, "text", features=1449),
    _set("scene", 1211, 1196, 6, "image", features=294),
    _set("tmc2007", 21519, 7077, 22, "text", stem="tmc2007-500", features=500),
    _set("yeast", 1500, 917, 14, "biology", features=103),
)}
"""Rows and labels as read from the files (docs/protocol.md, "MULAN data sets")."""

MULAN_SHA256: dict[str, str] = {
    "bibtex/bibtex-test.arff": "9b03329cde64d3f994bdf7fbbac3f3b10fe185c311cb9ae725475f59c7f3f922",
    "bibtex/bibtex-train.arff": "8dcc9de6e0b2cebaec8c1f4fac78431adeeb73cfd3ab879b530a66d366e59174",
    "birds/birds-test.arff": "51ba6326d65ccdd7c755b6461280eb6d2769c7f59d8e12fd4250f91e6ca28326",
    "birds/birds-train.arff": "8f215db6ee163149901e753977f631ba8bea0e0e8e1abc42b234414822f8ae36",
    "cal500/cal500.arff": "cfe6097ba5fd6e8584e54911ab9783dcab34e898446b7c9370c71d477eae56d3",
    "corel5k/Corel5k-test-sparse.arff": "e8f8e9cd052c43ba7bdfdf99d242f461fc8c2a03163466d921e576887b51d8a7",
    "corel5k/Corel5k-train-sparse.arff": "19eb253c447144bea74ffa86b4731a56022addae2ba7d0aab72ad07fdc02e9b3",
    "delicious/delicious-test.arff": "2dfb01723a819914b0ca83361177ed413ce3f2169851d9f228d4692915d63944",
    "delicious/delicious-train.arff": "030186cdb542ebdd32052fcdbb1ebe30115b3a22518c1b4b198c45eb827aebe1",
    "emotions/emotions-test.arff": "f13d4b746b7b5c8eb484bd751d6ac463d4560dff998a93516a5c1fe35daf6c8f",
    "emotions/emotions-train.arff": "bbe704106c79bb8fb99c1d1d2e9bde081d6a2daeb01f100862f11fd91a3c1f98",
    "enron/enron-test.arff": "2f3aad54a8f54caaab4ab01246fe9dd385ba944a2633028f52747b57eac5474e",
    "enron/enron-train.arff": "2988cefc1cdf7a8004a20ef84615cc8fa1b5d7434c16687283b41454e2d9d194",
    "flags/flags-test.arff": "09f6136fae47dcc2f0f491efd6401a11072cbfb0bfbb2666c63b35bb06aeeb16",
    "flags/flags-train.arff": "1861cdab7f8baf1aef6fb6198f304465ddfd99b7f9a435337c604119522df3c5",
    "genbase/genbase-test.arff": "0e988520bedab39aa3f23f08f646c769bcdb6f9119ee298fd92b37127b226a36",
    "genbase/genbase-train.arff": "37670db2c2b308a1c163d05501819526f1d65d659638ddfb76812d4ce384b5c6",
    "medical/medical-test.arff": "6be472e75a6c0b0916187f343a398011b1b26f8f0ddc682c575312ad3532f6c4",
    "medical/medical-train.arff": "c764f45756ab1c553b8b4eaaf5605a5610a43bbbcf37492d0f1a12bf9c9e2244",
    "scene/scene-test.arff": "ea38d20296b3ff7e220f477a3b802a9bcb2d768881fe6ee163efbc97ea527a42",
    "scene/scene-train.arff": "b53ba93bdf412de922e3960389bcee24744fa3e872ce610511fc1d750888b64d",
    "tmc2007/tmc2007-500-test.arff": "b24f9c3f1eba77c9da0bbaff093ba41d331b7351be0167a8e1e3852c62e25e38",
    "tmc2007/tmc2007-500-train.arff": "edfe7b7615c6f80e54c92a214437610d1ae36560c5cc6c4253b51c434d258273",
    "yeast/yeast-test.arff": "4aaac102bff9669a765bf0b378602e5cc8c3b181048282e2f003117b496d552a",
    "yeast/yeast-train.arff": "e759dc991ff54694a4ff9c4314f3be0d6fd2b1994a4b563f57e416394c6aebbd",
    "bibtex/bibtex.xml": "08fe20013c1e75dcf1888c185f5187c95e76495b8518ce289b4d3afce38d1232",
    "birds/birds.xml": "0f4ea547b2b3d538c8402662daf689e0d4520cc8b4f5ba113c2e7c01700f010f",
    "cal500/cal500.xml": "877e128531268d7661faa3e44f7bb43cbcda829c0895e49879168775b192728c",
    "corel5k/Corel5k.xml": "54ef6a6ccb7ca9b77524052b34b306d5d501661a5609b9d1cc7085b2b597679d",
    "delicious/delicious.xml": "4e0c0f93c7d86a39b9fca4aaefaa00e9428f2c80277732dfbf03ca48e2c14da2",
    "emotions/emotions.xml": "dbce8e6ccbbb2fcbfd9e9edbb230d7ed12692c6e13f59fdbc0161fa9b6cf2dc0",
    "enron/enron.xml": "ed40c92d7f613eed51714912cab10dddc4ce456262137d8fef230d44c7f4457b",
    "flags/flags.xml": "7c9ed21a91b716b91f811323e20ee5a260ea2da62a5edcfeb1b91ec855a48f17",
    "genbase/genbase.xml": "198e8a1d7070e9603119e02e626cedc589db7577339b307b06f5192047b69eb9",
    "medical/medical.xml": "51fa9d5c09e48caff3f0a0c75db1c9aa85944f8e35451f3ad8bd56fc422286ce",
    "scene/scene.xml": "55d8b247b949ad5c52e5a73d8c6775ec6e5469ce9682465b45b333b68ee4bcc5",
    "tmc2007/tmc2007-500.xml": "cb6a67c8ae72fd9b47d89f77aa5b7f6cafb4ba9c20b1124c65a95a3f2caec38d",
    "yeast/yeast.xml": "c3056cc26444b5158b1588d1b73bec9c45429e10f0957ad085903423cb81f247",
}
"""SHA-256 of every file at :data:`MULAN_COMMIT`, keyed ``<set>/<file>``."""

MULAN_SIZES: dict[str, int] = {
    "bibtex/bibtex-test.arff": 1215637,
    "bibtex/bibtex-train.arff": 2292961,
    "birds/birds-test.arff": 540883,
    "birds/birds-train.arff": 539367,
    "cal500/cal500.arff": 492857,
    "corel5k/Corel5k-test-sparse.arff": 60876,
    "corel5k/Corel5k-train-sparse.arff": 339535,
    "delicious/delicious-test.arff": 757565,
    "delicious/delicious-train.arff": 3056590,
    "emotions/emotions-test.arff": 132007,
    "emotions/emotions-train.arff": 252080,
    "enron/enron-test.arff": 324140,
    "enron/enron-train.arff": 607799,
    "flags/flags-test.arff": 4218,
    "flags/flags-train.arff": 7707,
    "genbase/genbase-test.arff": 758739,
    "genbase/genbase-train.arff": 1714007,
    "medical/medical-test.arff": 99124,
    "medical/medical-train.arff": 69680,
    "scene/scene-test.arff": 3090742,
    "scene/scene-train.arff": 3127968,
    "tmc2007/tmc2007-500-test.arff": 1054414,
    "tmc2007/tmc2007-500-train.arff": 3152791,
    "yeast/yeast-test.arff": 918515,
    "yeast/yeast-train.arff": 1501117,
    "bibtex/bibtex.xml": 5880,
    "birds/birds.xml": 889,
    "cal500/cal500.xml": 7901,
    "corel5k/Corel5k.xml": 11222,
    "delicious/delicious.xml": 34303,
    "emotions/emotions.xml": 323,
    "enron/enron.xml": 1604,
    "flags/flags.xml": 304,
    "genbase/genbase.xml": 992,
    "medical/medical.xml": 1818,
    "scene/scene.xml": 285,
    "tmc2007/tmc2007-500.xml": 783,
    "yeast/yeast.xml": 526,
}
"""The size in bytes of every file at :data:`MULAN_COMMIT`: a download stops there (a file of
that checksum has that size, whatever the server says)."""

MULAN_PARSED_SHA256: dict[str, str] = {
    "bibtex": "2d160b07c5061847d77cb986ed835c02f9a51c785b9380b83727f44a9bcf398c",
    "birds": "9b4fd4997a898113892034d9b1295f7739fce6d249309b86b6f08c05d5501df8",
    "cal500": "5d99e1d464901708aeadb92ce628dfa41fa8b1d477df52acd789fb73a4854c39",
    "corel5k": "cb42daac2f94bdfc4693ff37e565678184623d52afbafe1bcaacfcac6bafd432",
    "delicious": "1f42f87a2a80ca54de00f65d9981358edf9021d992fb7500808163d6d38b8406",
    "emotions": "aa9cb8baf51d477d4abf53268a38f9802ccfc77357034195e2649ab7f70c24be",
    "enron": "4bea8c5148031616e971ce7fd04b8c8dd77fab50f68b73759e52900e1cba5681",
    "flags": "822f0d4625588abfae3f8243eb72d4ae1b07b13a7d62e7617487fc401b809851",
    "genbase": "348d15c629795d23412007511e8c445035235172cf05070ac9c1d2a85ab58e37",
    "medical": "27713a9b7019fa14d201f47de512a4e7e80736d1296c090693c568a73baba32c",
    "scene": "9ad90e7f15f3cf5f7c9097712b69d95dfcb84f07b433987ef4ac7463bcd61b3b",
    "tmc2007": "bcd5f007b3a19a3bf9ec3f3fe68bb12e4ae90300fc0d2aee2b607148da45ba6a",
    "yeast": "5eadd795c368d81016f8eb2bdfbb862086cd748dbba186ad8063e929dfa9a998",
}
"""What spmlkit's reader makes of each set's pinned files:
:func:`~spmlkit.data.parsed_cache.arrays_digest` of its arrays. The parsed-array cache in the
data folder is used only when its arrays hash to this (the file's own claims prove nothing in a
shared folder); ``tests/test_mulan_faults.py`` parses MULAN's files of every set and compares."""

_PARSED = "spmlkit-parsed-v1.npz"
_ARRAYS = ("X_train", "Y_train", "X_test", "Y_test", "class_names", "feature_names")
_MAX_NAME = 1024  # characters of a label or feature name in the cache (MULAN's longest: 76)


def mulan_url(name: str, file: str) -> str:
    """Where ``file`` of set ``name`` is fetched from (``$SPMLKIT_MULAN_URL`` replaces the base)."""
    import os

    base = os.environ.get(URL_ENV) or _BASE_URL
    return f"{base.rstrip('/')}/{name}/{file}"


def _get(name: str) -> MulanSet:
    if name not in MULAN_SETS:
        raise ValueError(f"unknown MULAN set {name!r}; the sets are {', '.join(MULAN_SETS)}")
    return MULAN_SETS[name]


def is_cached(name: str) -> bool:
    """Whether every file of set ``name`` is in the data folder already (no download needed)."""
    folder = data_home() / "mulan" / name
    return all((folder / f).is_file() for f in _get(name).files)


def mulan_dir(name: str) -> Path:
    """The folder holding set ``name``'s files, fetching the missing ones first.

    Files already there are used as they are (offline use, a copy of one's own); a fetched file
    must match its SHA-256 before it is kept (:func:`~spmlkit.data.download.fetch_file`).
    """
    spec = _get(name)
    folder = data_home() / "mulan" / name
    for file in spec.files:
        target = folder / file
        if not target.is_file():
            log.warning("fetching MULAN's %s/%s into %s", name, file, folder)
            key = f"{name}/{file}"
            fetch_file(mulan_url(name, file), target, MULAN_SHA256[key], size=MULAN_SIZES[key],
                       manual=f"download {', '.join(spec.files)} from {mulan_url(name, '')} into {folder}")
    return folder


def load_mulan(name: str) -> TabularDataset:
    """Set ``name`` with its official train and test lists, rows in their ARFF files' order.

    Rows without any positive label are kept here (they are the official lists); the training
    side drops them from the train list (docs/protocol.md, "MULAN data sets"). MULAN's own files
    are parsed once per data folder (:mod:`~spmlkit.data.parsed_cache`); a copy of one's own,
    whose checksum differs, is parsed every time it is loaded.
    """
    from .tabular import TabularDataset

    spec = _get(name)
    folder = mulan_dir(name)
    digests = {f: _sha256(folder / f) for f in spec.files}
    changed = [f for f, digest in digests.items() if digest != MULAN_SHA256[f"{name}/{f}"]]
    for file in changed:
        log.warning("%s differs from MULAN's file at commit %s (SHA-256 %s...); using it as it is",
                    folder / file, MULAN_COMMIT[:7], digests[file][:12])
    arrays = None if changed else _read_parsed(spec, folder / _PARSED)
    if arrays is None:
        arrays = _parse(spec, folder, changed)
        if not changed:
            _keep_parsed(spec, folder / _PARSED, arrays)
    return TabularDataset(
        name=name if name != "yeast" else "mulan/yeast",
        X_train=arrays["X_train"], Y_train=arrays["Y_train"],
        X_test=arrays["X_test"] if spec.test else None, Y_test=arrays["Y_test"] if spec.test else None,
        class_names=tuple(str(c) for c in arrays["class_names"]),
        feature_names=tuple(str(c) for c in arrays["feature_names"]),
        source=str(folder),
        notes={"split": f"MULAN {spec.train} / {spec.test}" if spec.test else f"MULAN {spec.train} (one file, no "
                        "official split)", "empty_train_rows": "drop"},
    )


def _parse(spec: MulanSet, folder: Path, changed: list[str]) -> dict[str, np.ndarray]:
    """The arrays of the set's files; a refusal names the file and, for a file that is not
    MULAN's, the way back to MULAN's own."""
    import numpy as np

    from .arff_reader import read_label_names, read_multilabel_arff

    def way_out(file: str) -> str:
        if file in changed:
            return (f"; {file} is not MULAN's file (its SHA-256 differs): correct it, or delete it and spmlkit fetches "
                    "MULAN's own on the next run")
        return f"; delete {folder / file} and spmlkit fetches it again on the next run"

    try:
        current = spec.xml
        names = read_label_names(folder / spec.xml)
        current = spec.train
        train = read_multilabel_arff(folder / spec.train, names, drop=spec.drop)
        if spec.test is not None:
            current = spec.test
            test = read_multilabel_arff(folder / spec.test, names, drop=spec.drop)
    except ValueError as exc:
        raise ValueError(f"{exc}{way_out(current)}") from None
    if spec.test is None:  # one file: the cache keeps an empty test list beside it, read back as none
        X_test, Y_test = train.X[:0], train.Y[:0]
    elif (train.label_names, train.feature_names) != (test.label_names, test.feature_names):
        raise ValueError(f"{folder}: {spec.train} and {spec.test} declare different attributes; they are not one "
                         f"set's train and test files{way_out((changed or [spec.test])[0])}")
    elif not len(test.Y):
        raise ValueError(f"{folder / spec.test}: holds no rows, so there is nothing to test on{way_out(spec.test)}")
    else:
        X_test, Y_test = test.X, test.Y
    if not train.Y.any():
        raise ValueError(f"{folder / spec.train}: none of its {len(train.Y):,} rows has a positive label, so there is "
                         f"nothing to train on (rows without one are left out of training){way_out(spec.train)}")
    return {"X_train": train.X, "Y_train": train.Y, "X_test": X_test, "Y_test": Y_test,
            "class_names": np.asarray(train.label_names), "feature_names": np.asarray(train.feature_names)}


def _expected(spec: MulanSet) -> dict:
    """Names, dtypes and shapes of a set's parsed arrays, as the cache must hold them."""
    from .parsed_cache import ArraySpec

    n, m, c, d = spec.train_rows, spec.test_rows, spec.labels, spec.features
    return {"X_train": ArraySpec((n, d), "f", 4), "Y_train": ArraySpec((n, c), "u", 1),
            "X_test": ArraySpec((m, d), "f", 4), "Y_test": ArraySpec((m, c), "u", 1),
            "class_names": ArraySpec((c,), "U", 4 * _MAX_NAME), "feature_names": ArraySpec((d,), "U", 4 * _MAX_NAME)}


def _read_parsed(spec: MulanSet, path: Path) -> dict[str, np.ndarray] | None:
    """The cached arrays of MULAN's files, when they are exactly what spmlkit's reader makes of them."""
    from .parsed_cache import read_cache

    return read_cache(path, _expected(spec), MULAN_PARSED_SHA256[spec.name])


def _keep_parsed(spec: MulanSet, path: Path, arrays: dict[str, np.ndarray]) -> None:
    """Cache what was parsed from MULAN's files, unless it is not what the pinned digest says (a
    reader that changed without its digests: kept out of the cache, and said)."""
    from .parsed_cache import arrays_digest, write_cache

    if arrays_digest(arrays, _ARRAYS) != MULAN_PARSED_SHA256[spec.name]:
        log.warning("%s: spmlkit's reader does not give MULAN_PARSED_SHA256's arrays for MULAN's files (a change "
                    "of the reader or of liac-arff); the arrays are used but not cached", path.parent)
        return
    write_cache(path, {k: arrays[k] for k in _ARRAYS})


def _sha256(path: Path) -> str:
    import hashlib

    digest = hashlib.sha256()
    with open(path, "rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()
