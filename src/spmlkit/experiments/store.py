"""Results store: one record per training run in a single SQLite file.

A sweep runs many (dataset, observation, method, config, seed) combinations, often in
several worker processes, and is resumed after interruptions. The store is the one place
their results go: a single file (stdlib :mod:`sqlite3`, no server) that many processes can
write at once, that answers "is this run done?" for resuming, and that loads as a pandas
DataFrame for the report (:mod:`spmlkit.experiments.report`) and the figures
(:mod:`spmlkit.experiments.plots`).

Layout: table ``runs`` with one scalar column per key used for filtering (``run_id`` is the
primary key) and JSON text columns for the nested parts (``hparams``, ``config``,
``history``, ``test_metrics``, ``test_ap``, ``class_names``, ``analysis``). Keys of a record
that are not part of the schema go to an ``extra`` JSON column and come back unchanged, so
a newer runner never loses data in an older store.

Concurrency: every call opens its own connection (``timeout=30`` s busy wait), the file is
in WAL mode (readers never block the writer) and writes take the write lock up front
(``BEGIN IMMEDIATE``), so a write is one atomic transaction and concurrent writers queue
instead of failing on a lock upgrade.
"""

from __future__ import annotations

import json
import math
import os
import sqlite3
import subprocess
from collections.abc import Iterable, Mapping
from contextlib import closing
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import pandas
from ..io import to_jsonable

__all__ = ["ResultsStore", "git_commit", "package_version", "SCALAR_COLUMNS", "JSON_COLUMNS", "REQUIRED_KEYS"]

#: scalar columns and their SQLite types, in table order
SCALAR_COLUMNS: dict[str, str] = {
    "run_id": "TEXT PRIMARY KEY",
    "sweep": "TEXT",
    "status": "TEXT",
    "dataset": "TEXT",
    "method": "TEXT",
    "observation": "TEXT",
    "seed": "INTEGER",
    "lr": "REAL",
    "batch_size": "INTEGER",
    "best_epoch": "INTEGER",
    "val_map": "REAL",
    "test_map": "REAL",
    "seconds": "REAL",
    "started_at": "TEXT",
    "finished_at": "TEXT",
    "spmlkit_version": "TEXT",
    "git_commit": "TEXT",
    "error": "TEXT",
}
#: nested parts, stored as JSON text
JSON_COLUMNS: tuple[str, ...] = (
    "hparams", "config", "history", "test_metrics", "test_ap", "class_names", "analysis", "extra",
)
#: keys every record must have
REQUIRED_KEYS: tuple[str, ...] = ("run_id", "status", "dataset", "method", "observation", "seed")
#: further keys a record with status "ok" must have (fractions in [0, 1])
REQUIRED_OK_KEYS: tuple[str, ...] = ("val_map", "test_map")
STATUSES: tuple[str, ...] = ("ok", "failed", "running")

_INT_COLUMNS = {k for k, v in SCALAR_COLUMNS.items() if v.startswith("INTEGER")}
_REAL_COLUMNS = {k for k, v in SCALAR_COLUMNS.items() if v.startswith("REAL")}
_ALL_COLUMNS = tuple(SCALAR_COLUMNS) + JSON_COLUMNS
_SCHEMA_KEYS = set(SCALAR_COLUMNS) | (set(JSON_COLUMNS) - {"extra"})
_SCHEMA_KEYS_ORDERED = tuple(SCALAR_COLUMNS) + tuple(k for k in JSON_COLUMNS if k != "extra")


def git_commit(cwd: str | os.PathLike | None = None) -> str | None:
    """``git rev-parse HEAD`` of the repository containing ``cwd`` (default: the current
    directory), or None when git is missing, this is not a repository, or anything fails.
    Never raises: provenance is nice to have, never worth a crashed run."""
    try:
        out = subprocess.run(
            ["git", "rev-parse", "HEAD"], cwd=cwd, capture_output=True, text=True, timeout=5, check=False
        )
    except Exception:  # noqa: BLE001 - any failure just means "unknown"
        return None
    sha = out.stdout.strip()
    return sha if out.returncode == 0 and sha else None


def package_version() -> str:
    """The installed spmlkit version (``spmlkit.__version__``)."""
    from spmlkit import __version__

    return __version__



def _scalar(key: str, value: Any) -> Any:
    """Convert one scalar column value to a type sqlite3 binds (numpy ints are not ints)."""
    if value is None:
        return None
    try:
        if key in _INT_COLUMNS:
            if isinstance(value, bool) or float(value) != int(value):
                raise ValueError
            return int(value)
        if key in _REAL_COLUMNS:
            return float(value)
    except (TypeError, ValueError):
        kind = "an integer" if key in _INT_COLUMNS else "a number"
        raise ValueError(f"record key {key!r} must be {kind}, got {value!r}") from None
    if not isinstance(value, str):
        raise ValueError(f"record key {key!r} must be a string, got {type(value).__name__} {value!r}")
    return value


def _validate(record: Mapping[str, Any]) -> None:
    """Check the keys the store and the report rely on; errors name the key and the fix."""
    if not isinstance(record, Mapping):
        raise ValueError(f"a record must be a dict, got {type(record).__name__}")
    missing = [k for k in REQUIRED_KEYS if k not in record or record[k] is None]
    if missing:
        raise ValueError(
            f"record {record.get('run_id', '<no run_id>')!r} lacks required key(s) {missing}; "
            f"every record needs {list(REQUIRED_KEYS)}"
        )
    if not isinstance(record["run_id"], str) or not record["run_id"]:
        raise ValueError(f"run_id must be a non-empty string, got {record['run_id']!r}")
    status = record["status"]
    if status not in STATUSES:
        raise ValueError(f"record {record['run_id']!r}: status must be one of {STATUSES}, got {status!r}")
    if status == "ok":
        missing = [k for k in REQUIRED_OK_KEYS if record.get(k) is None]
        if missing:
            raise ValueError(
                f"record {record['run_id']!r} has status 'ok' but lacks {missing}; a finished run "
                "reports val_map and test_map (use status 'failed' with an error otherwise)"
            )
        for k in REQUIRED_OK_KEYS:
            try:
                v = float(record[k])
            except (TypeError, ValueError):
                raise ValueError(f"record {record['run_id']!r}: {k} must be a number, got {record[k]!r}") from None
            if not math.isnan(v) and not 0.0 <= v <= 1.0:
                raise ValueError(
                    f"record {record['run_id']!r}: {k} must be a fraction in [0, 1], got {v}; "
                    "store mAP as a fraction (the report converts to percent)"
                )
    if status == "failed" and not record.get("error"):
        raise ValueError(f"record {record['run_id']!r} has status 'failed' but no 'error' message")


def _row(record: Mapping[str, Any]) -> tuple[Any, ...]:
    """The record as a tuple in ``_ALL_COLUMNS`` order."""
    values = [_scalar(k, record.get(k)) for k in SCALAR_COLUMNS]
    extra = {k: v for k, v in record.items() if k not in _SCHEMA_KEYS}
    for k in JSON_COLUMNS:
        v = extra if k == "extra" else record.get(k)
        if k == "extra" and not v:
            v = None
        try:
            values.append(None if v is None else json.dumps(v, default=to_jsonable, sort_keys=True))
        except (TypeError, ValueError) as exc:
            raise ValueError(f"record {record['run_id']!r}: key {k!r} cannot be stored as JSON ({exc})") from None
    return tuple(values)


def _decode(row: sqlite3.Row) -> dict[str, Any]:
    """A stored row back to the record dict (JSON decoded, ``extra`` keys merged back)."""
    rec: dict[str, Any] = {k: row[k] for k in SCALAR_COLUMNS}
    for k in JSON_COLUMNS:
        text = row[k]
        value = None if text is None else json.loads(text)
        if k == "extra":
            rec.update(value or {})
        else:
            rec[k] = value
    return rec


class ResultsStore:
    """All run records of a project in one SQLite file.

    Args:
        path: the database file; created (with its parent folders) if missing.

    Example::

        store = ResultsStore("results/runs.sqlite")
        if not store.has_finished(run_id):
            store.add(run_once(config))
        df = store.to_dataframe(status="ok")
    """

    def __init__(self, path: str | os.PathLike) -> None:
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        cols = ",\n  ".join(f"{k} {t}" for k, t in SCALAR_COLUMNS.items())
        cols += ",\n  " + ",\n  ".join(f"{k} TEXT" for k in JSON_COLUMNS)
        with closing(self._connect()) as con:
            con.execute("PRAGMA journal_mode=WAL")  # persistent: set once for the file
            con.execute(f"CREATE TABLE IF NOT EXISTS runs (\n  {cols}\n)")
            con.execute("CREATE INDEX IF NOT EXISTS runs_group ON runs (dataset, observation, method)")

    def __repr__(self) -> str:
        return f"ResultsStore({str(self.path)!r})"

    def _connect(self) -> sqlite3.Connection:
        # autocommit mode; transactions are explicit (BEGIN IMMEDIATE ... COMMIT)
        con = sqlite3.connect(self.path, timeout=30.0, isolation_level=None)
        con.row_factory = sqlite3.Row
        return con

    # ------------------------------------------------------------------ writing

    def add(self, record: Mapping[str, Any]) -> None:
        """Insert ``record``, replacing a stored run with the same ``run_id``.

        The record is validated first (required keys, status, fractions in [0, 1], an error
        message for failed runs); the write is one transaction, so readers see either the
        old or the new record, never half of one.
        """
        self.add_many([record])

    def add_many(self, records: Iterable[Mapping[str, Any]]) -> None:
        """Insert or replace several records in one transaction (all or none)."""
        rows = []
        for rec in records:
            _validate(rec)
            rows.append(_row(rec))
        if not rows:
            return
        marks = ", ".join("?" for _ in _ALL_COLUMNS)
        sql = f"INSERT OR REPLACE INTO runs ({', '.join(_ALL_COLUMNS)}) VALUES ({marks})"
        with closing(self._connect()) as con:
            con.execute("BEGIN IMMEDIATE")
            try:
                con.executemany(sql, rows)
            except BaseException:
                con.execute("ROLLBACK")
                raise
            con.execute("COMMIT")

    def delete(self, run_id: str) -> bool:
        """Remove a run; True if it existed."""
        with closing(self._connect()) as con:
            cur = con.execute("DELETE FROM runs WHERE run_id = ?", (run_id,))
            return cur.rowcount > 0

    # ------------------------------------------------------------------ reading

    def get(self, run_id: str) -> dict[str, Any] | None:
        """The record of ``run_id``, or None if it is not stored."""
        with closing(self._connect()) as con:
            row = con.execute("SELECT * FROM runs WHERE run_id = ?", (run_id,)).fetchone()
        return None if row is None else _decode(row)

    def has_finished(self, run_id: str) -> bool:
        """True if the run is stored with status ``ok`` or ``failed`` (a sweep skips it on
        resume; a ``running`` record left by a killed worker is run again)."""
        with closing(self._connect()) as con:
            row = con.execute("SELECT status FROM runs WHERE run_id = ?", (run_id,)).fetchone()
        return row is not None and row["status"] in ("ok", "failed")

    def __contains__(self, run_id: object) -> bool:
        with closing(self._connect()) as con:
            return con.execute("SELECT 1 FROM runs WHERE run_id = ?", (run_id,)).fetchone() is not None

    def __len__(self) -> int:
        with closing(self._connect()) as con:
            return int(con.execute("SELECT COUNT(*) FROM runs").fetchone()[0])

    def records(self, **filters: Any) -> list[dict[str, Any]]:
        """Records whose scalar columns match ``filters``, in insertion order.

        A filter value is matched exactly; a list, tuple or set matches any of its values;
        None matches a missing value. Example: ``records(dataset="voc2012",
        method=["an", "em"], status="ok")``.
        """
        where, params = [], []
        for key, value in filters.items():
            if key not in SCALAR_COLUMNS:
                raise ValueError(
                    f"cannot filter on {key!r}; filterable keys are the scalar columns: {', '.join(SCALAR_COLUMNS)}"
                )
            if value is None:
                where.append(f"{key} IS NULL")
            elif isinstance(value, (list, tuple, set, frozenset)):
                values = [_scalar(key, v) for v in value]
                if not values:
                    return []
                where.append(f"{key} IN ({', '.join('?' for _ in values)})")
                params.extend(values)
            else:
                where.append(f"{key} = ?")
                params.append(_scalar(key, value))
        sql = "SELECT * FROM runs" + (f" WHERE {' AND '.join(where)}" if where else "") + " ORDER BY rowid"
        with closing(self._connect()) as con:
            return [_decode(r) for r in con.execute(sql, params).fetchall()]

    def to_dataframe(self, *, expand_hparams: bool = True, **filters: Any) -> pandas.DataFrame:
        """All (or the filtered) records as a DataFrame, one row per run.

        JSON columns hold decoded Python objects (``history`` a list of dicts, ...).
        With ``expand_hparams`` every hyperparameter becomes a column ``hp.<name>`` (NaN where
        a run does not set it), next to the ``hparams`` dict; ``test_metrics`` is always
        expanded to ``test.<name>`` columns.
        """
        import pandas as pd

        recs = self.records(**filters)
        df = pd.DataFrame(recs, columns=list(_SCHEMA_KEYS_ORDERED) if not recs else None)
        if df.empty:
            return df
        extra_cols: dict[str, list[Any]] = {}
        if expand_hparams:
            names = sorted({k for r in recs for k in (r.get("hparams") or {})})
            for n in names:
                extra_cols[f"hp.{n}"] = [(r.get("hparams") or {}).get(n, math.nan) for r in recs]
        names = sorted({k for r in recs for k in (r.get("test_metrics") or {})})
        for n in names:
            extra_cols[f"test.{n}"] = [(r.get("test_metrics") or {}).get(n, math.nan) for r in recs]
        if extra_cols:
            df = pd.concat([df, pd.DataFrame(extra_cols, index=df.index)], axis=1)
        return df

