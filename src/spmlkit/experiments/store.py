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

Leases: several sweeps may share one store (on one machine, or on several machines that see
the same file). So that they split a grid instead of each running all of it, a sweep
*claims* a run before starting it: table ``leases`` (``run_id`` primary key, ``owner`` =
``host:pid:token``, ``expires_at`` in Unix seconds) gets a row in the same write
transaction that checks the run is not finished and not leased by someone else
(:meth:`ResultsStore.claim`). The owner renews its leases while the run is in progress
(:meth:`ResultsStore.renew`) and drops the lease in the transaction that writes the run's
record (``add(record, release_lease=owner)``) or when the run is given up
(:meth:`ResultsStore.release`). A lease whose owner stopped renewing it expires and may be
taken over; so may a lease whose owner is a process of this host that no longer exists (a
killed sweep), without waiting for the expiry. Requirements: clocks of machines sharing a
store agree to well within the lease duration (NTP), host names differ between machines, and
the file system has working POSIX locks -- SQLite on NFS/SMB mounts often has broken or
disabled locking, which makes any two writers (leases and records alike) corrupt the file;
use a local disk, or one sweep per store there.
"""

from __future__ import annotations

import json
import math
import os
import secrets
import socket
import sqlite3
import time
from collections.abc import Iterable, Mapping
from contextlib import closing
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import pandas
from ..io import to_jsonable
from ..training.provenance import git_commit  # re-exported: the store's records carry it

__all__ = ["ResultsStore", "git_commit", "package_version", "new_owner_id", "SCALAR_COLUMNS", "JSON_COLUMNS",
           "REQUIRED_KEYS", "CLAIMED", "FINISHED", "HELD"]

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


def package_version() -> str:
    """The installed spmlkit version (``spmlkit.__version__``)."""
    from spmlkit import __version__

    return __version__



#: outcomes of :meth:`ResultsStore.claim`
CLAIMED, FINISHED, HELD = "claimed", "finished", "held"


def new_owner_id() -> str:
    """``host:pid:token``, the lease owner id of one sweep. The host and pid let another sweep
    on the same host see that a killed owner is gone (and take its leases over at once); the
    random token keeps two sweeps of one process (called one after the other) apart."""
    return f"{socket.gethostname()}:{os.getpid()}:{secrets.token_hex(4)}"


def _owner_is_gone(owner: str) -> bool:
    """True only when ``owner`` is a process of *this* host that no longer exists. A process
    of another host, or one we cannot check, counts as alive: its lease then ends by expiry,
    which is slower but never lets two sweeps run the same run."""
    host, _, rest = owner.partition(":")
    pid_text = rest.partition(":")[0]
    if host != socket.gethostname() or not pid_text.isdigit():
        return False
    try:
        os.kill(int(pid_text), 0)
    except ProcessLookupError:
        return True
    except OSError:  # PermissionError: it exists, under another user
        return False
    return False


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
            con.execute("CREATE TABLE IF NOT EXISTS leases (\n  run_id TEXT PRIMARY KEY,\n  owner TEXT NOT NULL,\n"
                        "  expires_at REAL NOT NULL,\n  claimed_at REAL NOT NULL\n)")

    def __repr__(self) -> str:
        return f"ResultsStore({str(self.path)!r})"

    def _connect(self) -> sqlite3.Connection:
        # autocommit mode; transactions are explicit (BEGIN IMMEDIATE ... COMMIT)
        con = sqlite3.connect(self.path, timeout=30.0, isolation_level=None)
        con.row_factory = sqlite3.Row
        return con

    # ------------------------------------------------------------------ writing

    def add(self, record: Mapping[str, Any], *, release_lease: str | None = None) -> None:
        """Insert ``record``, replacing a stored run with the same ``run_id``.

        The record is validated first (required keys, status, fractions in [0, 1], an error
        message for failed runs); the write is one transaction, so readers see either the
        old or the new record, never half of one. ``release_lease`` (an owner id) drops that
        owner's lease on the run in the same transaction, so no other sweep ever sees the run
        neither recorded nor leased.
        """
        self.add_many([record], release_lease=release_lease)

    def add_many(self, records: Iterable[Mapping[str, Any]], *, release_lease: str | None = None) -> None:
        """Insert or replace several records in one transaction (all or none); with
        ``release_lease``, that owner's leases on these runs go in the same transaction."""
        rows, ids = [], []
        for rec in records:
            _validate(rec)
            rows.append(_row(rec))
            ids.append((rec["run_id"], release_lease))
        if not rows:
            return
        marks = ", ".join("?" for _ in _ALL_COLUMNS)
        sql = f"INSERT OR REPLACE INTO runs ({', '.join(_ALL_COLUMNS)}) VALUES ({marks})"
        with closing(self._connect()) as con:
            con.execute("BEGIN IMMEDIATE")
            try:
                con.executemany(sql, rows)
                if release_lease is not None:
                    con.executemany("DELETE FROM leases WHERE run_id = ? AND owner = ?", ids)
            except BaseException:
                con.execute("ROLLBACK")
                raise
            con.execute("COMMIT")

    # ------------------------------------------------------------------ leases

    def claim(self, run_id: str, owner: str, *, duration: float, redo_failed_until: str | None = None) -> str:
        """Try to take the run ``run_id`` for ``owner`` for ``duration`` seconds.

        Returns :data:`CLAIMED` (the lease is ours: run it, then ``add(record,
        release_lease=owner)`` or :meth:`release`), :data:`FINISHED` (a record with status
        ``ok``, or ``failed``, is stored: nothing to do) or :data:`HELD` (another owner holds a
        live lease). With ``redo_failed_until`` (an ISO time like the records'
        ``finished_at``) a failure recorded at or before that time does not count as finished,
        so ``--retry-failed`` runs it again while a failure that a concurrent sweep records
        later is not retried twice. Check and claim are one write transaction, so of two
        sweeps claiming the same run at once exactly one gets it.
        """
        return self.claim_many([run_id], owner, duration=duration, redo_failed_until=redo_failed_until)[0]

    def claim_many(self, run_ids: list[str], owner: str, *, duration: float,
                   redo_failed_until: str | None = None) -> list[str]:
        """:meth:`claim` for several runs in one write transaction: one outcome per run, in
        order, each decided exactly as :meth:`claim` decides it. A sweep that starts several
        runs together (a stacked group) then pays one write, not one per run: each write is a
        transaction of its own, milliseconds on most disks."""
        if duration <= 0:
            raise ValueError(f"lease duration must be positive, got {duration!r} s")
        now = time.time()
        with closing(self._connect()) as con:
            con.execute("BEGIN IMMEDIATE")
            try:
                outcomes = [self._claim_in(con, run_id, owner, now, duration, redo_failed_until) for run_id in run_ids]
            except BaseException:
                con.execute("ROLLBACK")
                raise
            con.execute("COMMIT")
        return outcomes

    @staticmethod
    def _claim_in(con: sqlite3.Connection, run_id: str, owner: str, now: float, duration: float,
                  redo_failed_until: str | None) -> str:
        """The body of :meth:`claim`, inside its transaction."""
        row = con.execute("SELECT status, finished_at FROM runs WHERE run_id = ?", (run_id,)).fetchone()
        if row is not None and row["status"] == "ok":
            return FINISHED
        if row is not None and row["status"] == "failed":
            recorded = row["finished_at"]
            if redo_failed_until is None or (recorded is not None and recorded > redo_failed_until):
                return FINISHED
        lease = con.execute("SELECT owner, expires_at FROM leases WHERE run_id = ?", (run_id,)).fetchone()
        if lease is not None:
            if lease["owner"] != owner and lease["expires_at"] > now and not _owner_is_gone(lease["owner"]):
                return HELD
            con.execute("DELETE FROM leases WHERE run_id = ?", (run_id,))  # expired, orphaned, or ours
        try:
            con.execute("INSERT INTO leases (run_id, owner, expires_at, claimed_at) VALUES (?, ?, ?, ?)",
                        (run_id, owner, now + duration, now))
        except sqlite3.IntegrityError:  # cannot happen under the write lock; never run twice if it does
            return HELD
        return CLAIMED

    def renew(self, owner: str, *, duration: float) -> int:
        """Extend every lease of ``owner`` to ``duration`` seconds from now; the number of
        leases renewed. A lease that is not renewed before it expires may be taken over."""
        with closing(self._connect()) as con:
            cur = con.execute("UPDATE leases SET expires_at = ? WHERE owner = ?", (time.time() + duration, owner))
            return cur.rowcount

    def release(self, owner: str, run_id: str | None = None) -> int:
        """Drop ``owner``'s lease on ``run_id`` (all of its leases when None), e.g. when a run
        is given up unfinished; the number of leases dropped. Another owner's lease stays."""
        with closing(self._connect()) as con:
            if run_id is None:
                cur = con.execute("DELETE FROM leases WHERE owner = ?", (owner,))
            else:
                cur = con.execute("DELETE FROM leases WHERE owner = ? AND run_id = ?", (owner, run_id))
            return cur.rowcount

    def leases(self) -> list[dict[str, Any]]:
        """The current leases (``run_id``, ``owner``, ``expires_at``, ``claimed_at``), expired
        ones included, oldest claim first: who is running what right now."""
        with closing(self._connect()) as con:
            rows = con.execute(
                "SELECT run_id, owner, expires_at, claimed_at FROM leases ORDER BY claimed_at").fetchall()
        return [dict(r) for r in rows]

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

