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

Whose file: a store carries spmlkit's mark in its SQLite header (``PRAGMA application_id``,
:data:`APPLICATION_ID`), written when spmlkit creates it. Opening a file that is neither
marked nor new (no tables) nor an older spmlkit store (only ``runs`` and ``leases``) is
refused before anything is written, so another program's database never gets spmlkit's
tables or WAL mode.

Faults: a store that cannot be used -- a full disk, a read-only file or folder, a damaged
file, a lock held past the timeout -- raises :class:`StoreError`, a user error of one line
naming the file, what happened and what to do (docs/bad-input.md). Every write is one
transaction, so a fault mid-sweep leaves the runs recorded before it intact; any other
SQLite error is a bug of ours and keeps its traceback.
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import secrets
import socket
import sqlite3
import time
from collections.abc import Iterable, Iterator, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import pandas
from ..errors import InputError
from ..io import to_jsonable
from ..training.provenance import git_commit  # re-exported: the store's records carry it

__all__ = ["ResultsStore", "StoreError", "git_commit", "package_version", "new_owner_id", "SCALAR_COLUMNS",
           "JSON_COLUMNS", "REQUIRED_KEYS", "CLAIMED", "FINISHED", "HELD", "APPLICATION_ID"]

#: spmlkit's mark in the header of every store it creates (``PRAGMA application_id``): "SPML"
APPLICATION_ID = 0x53504D4C
#: the tables of a store (an older spmlkit store has these and no mark)
_OUR_TABLES = {"runs", "leases"}


class StoreError(InputError):
    """A results store that cannot be used as it is (full disk, read-only, damaged, another
    program's file): one line naming the file, what happened and what to do."""


#: SQLite faults that are the state of the user's file or disk, not our bug: the error names
#: (or, for an error raised without one, words of its message), what happened, what to do
_FAULTS: tuple[tuple[tuple[str, ...], tuple[str, ...], str, str], ...] = (
    (("SQLITE_FULL",), ("database or disk is full",), "the disk is full",
     "free space, then run the same command again (the runs recorded so far are kept; it resumes)"),
    (("SQLITE_READONLY", "SQLITE_PERM", "SQLITE_CANTOPEN", "SQLITE_AUTH"),
     ("readonly database", "unable to open database file", "access permission denied", "not authorized"),
     "the file or its folder cannot be written (read-only, or not yours)",
     "make both writable, or give a store in a writable folder (copy this one there to keep its runs)"),
    (("SQLITE_CORRUPT", "SQLITE_NOTADB"), ("malformed", "not a database"),
     "the file is damaged or is not a SQLite database",
     "restore it from a backup or give another store path; spmlkit leaves this file as it is"),
    (("SQLITE_IOERR",), ("disk i/o error",), "the disk failed to read or write it",
     "check the disk and its free space, then run the same command again"),
    (("SQLITE_BUSY", "SQLITE_LOCKED"), ("database is locked", "database table is locked"),
     "another process held its lock for longer than 30 s",
     "let that process finish and run again; keep stores on a local disk (network file systems lock unreliably)"),
)


def store_error(path: Path, exc: sqlite3.Error) -> StoreError | None:
    """The one-line :class:`StoreError` for a SQLite fault of the user's file or disk; None
    when ``exc`` is none of those (then it is our bug and keeps its traceback)."""
    name = getattr(exc, "sqlite_errorname", None) or ""
    text = str(exc)
    for names, words, what, todo in _FAULTS:
        if any(name.startswith(n) for n in names) or any(w in text.lower() for w in words):
            return StoreError(f"results store {path}: {what} (SQLite: {text}); {todo}")
    return None


def _rollback(con: sqlite3.Connection) -> None:
    """Undo the open transaction, if SQLite has not already (it ends a transaction itself on a
    full disk or an I/O error, and ROLLBACK then fails): the error that caused the rollback is
    the one to report."""
    if con.in_transaction:
        with contextlib.suppress(sqlite3.Error):
            con.execute("ROLLBACK")

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
        if self.path.is_dir():
            raise StoreError(f"results store {self.path} is a folder; give a file path, e.g. {self.path / 'results.db'}")
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise StoreError(f"results store {self.path}: cannot create its folder {self.path.parent} "
                             f"({exc.strerror or exc}); give a store in a writable folder") from exc
        created = self._create_file()
        try:
            self._set_up()
        except StoreError:
            if created and self.path.stat().st_size == 0:  # a store that never was: no empty file left behind
                self.path.unlink(missing_ok=True)
            raise

    def _set_up(self) -> None:
        """Our tables, the WAL mode and spmlkit's mark, in a file that is new or ours."""
        cols = ",\n  ".join(f"{k} {t}" for k, t in SCALAR_COLUMNS.items())
        cols += ",\n  " + ",\n  ".join(f"{k} TEXT" for k in JSON_COLUMNS)
        with self._connection() as con:
            marked = self._check_ours(con)  # before any write: another program's file stays as it was
            con.execute("PRAGMA journal_mode=WAL")  # persistent: set once for the file
            con.execute(f"CREATE TABLE IF NOT EXISTS runs (\n  {cols}\n)")
            con.execute("CREATE INDEX IF NOT EXISTS runs_group ON runs (dataset, observation, method)")
            con.execute("CREATE TABLE IF NOT EXISTS leases (\n  run_id TEXT PRIMARY KEY,\n  owner TEXT NOT NULL,\n"
                        "  expires_at REAL NOT NULL,\n  claimed_at REAL NOT NULL\n)")
            if not marked:
                con.execute(f"PRAGMA application_id = {APPLICATION_ID}")

    def _create_file(self) -> bool:
        """Create a new store as ``open()`` creates any file: mode 0666 less the umask, so a group's
        shared store is group-writable under umask 002 (docs/architecture.md, "Files that must
        survive a crash"). SQLite would create it 0644 whatever the umask allows; an empty file is
        a new database to it, and its ``-wal`` and ``-shm`` files take the database file's mode.
        True when it was created here."""
        try:
            os.close(os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666))
            return True
        except FileExistsError:  # an existing store keeps the mode its owner gave it
            return False
        except OSError as exc:
            raise StoreError(f"results store {self.path}: cannot create it ({exc.strerror or exc}); give a store in a "
                             "writable folder") from exc

    def _check_ours(self, con: sqlite3.Connection) -> bool:
        """Refuse a file that is not a store of spmlkit's; True when it carries the mark already.
        Accepted: a marked file, a new one (no tables: an empty file, a fresh path) and an
        older spmlkit store (only ``runs`` and ``leases``, ``runs`` with our columns), which
        then gets the mark."""
        app_id = int(con.execute("PRAGMA application_id").fetchone()[0])
        if app_id == APPLICATION_ID:
            return True
        tables = {r[0] for r in con.execute(
            "SELECT name FROM sqlite_master WHERE type = 'table' AND name NOT LIKE 'sqlite_%'")}
        columns = {r[1] for r in con.execute("PRAGMA table_info(runs)")} if "runs" in tables else set()
        ours = app_id == 0 and (not tables or (tables <= _OUR_TABLES and columns >= set(SCALAR_COLUMNS)))
        if not ours:
            whose = f"marked by another program (application id {app_id:#x})" if app_id else \
                f"holds other tables ({', '.join(sorted(tables)[:6])})"
            raise StoreError(f"results store {self.path} is not a store of spmlkit's: the SQLite file {whose}; "
                             "spmlkit writes its runs only into its own stores, so give a new store path")
        return False

    def __repr__(self) -> str:
        return f"ResultsStore({str(self.path)!r})"

    def _connect(self) -> sqlite3.Connection:
        # autocommit mode; transactions are explicit (BEGIN IMMEDIATE ... COMMIT)
        con = sqlite3.connect(self.path, timeout=30.0, isolation_level=None)
        con.row_factory = sqlite3.Row
        return con

    @contextlib.contextmanager
    def _connection(self) -> Iterator[sqlite3.Connection]:
        """A connection of its own, closed after the block; a fault of the file or the disk
        inside the block becomes one :class:`StoreError` line (:func:`store_error`)."""
        try:
            con = self._connect()
            try:
                yield con
            finally:
                con.close()
        except sqlite3.Error as exc:
            error = store_error(self.path, exc)
            if error is None:
                raise
            raise error from exc

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
        with self._connection() as con:
            con.execute("BEGIN IMMEDIATE")
            try:
                con.executemany(sql, rows)
                if release_lease is not None:
                    con.executemany("DELETE FROM leases WHERE run_id = ? AND owner = ?", ids)
            except BaseException:
                _rollback(con)
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
        with self._connection() as con:
            con.execute("BEGIN IMMEDIATE")
            try:
                outcomes = [self._claim_in(con, run_id, owner, now, duration, redo_failed_until) for run_id in run_ids]
            except BaseException:
                _rollback(con)
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
        with self._connection() as con:
            cur = con.execute("UPDATE leases SET expires_at = ? WHERE owner = ?", (time.time() + duration, owner))
            return cur.rowcount

    def release(self, owner: str, run_id: str | None = None) -> int:
        """Drop ``owner``'s lease on ``run_id`` (all of its leases when None), e.g. when a run
        is given up unfinished; the number of leases dropped. Another owner's lease stays."""
        with self._connection() as con:
            if run_id is None:
                cur = con.execute("DELETE FROM leases WHERE owner = ?", (owner,))
            else:
                cur = con.execute("DELETE FROM leases WHERE owner = ? AND run_id = ?", (owner, run_id))
            return cur.rowcount

    def leases(self) -> list[dict[str, Any]]:
        """The current leases (``run_id``, ``owner``, ``expires_at``, ``claimed_at``), expired
        ones included, oldest claim first: who is running what right now."""
        with self._connection() as con:
            rows = con.execute(
                "SELECT run_id, owner, expires_at, claimed_at FROM leases ORDER BY claimed_at").fetchall()
        return [dict(r) for r in rows]

    def delete(self, run_id: str) -> bool:
        """Remove a run; True if it existed."""
        with self._connection() as con:
            cur = con.execute("DELETE FROM runs WHERE run_id = ?", (run_id,))
            return cur.rowcount > 0

    # ------------------------------------------------------------------ reading

    def get(self, run_id: str) -> dict[str, Any] | None:
        """The record of ``run_id``, or None if it is not stored."""
        with self._connection() as con:
            row = con.execute("SELECT * FROM runs WHERE run_id = ?", (run_id,)).fetchone()
        return None if row is None else _decode(row)

    def has_finished(self, run_id: str) -> bool:
        """True if the run is stored with status ``ok`` or ``failed`` (a sweep skips it on
        resume; a ``running`` record left by a killed worker is run again)."""
        with self._connection() as con:
            row = con.execute("SELECT status FROM runs WHERE run_id = ?", (run_id,)).fetchone()
        return row is not None and row["status"] in ("ok", "failed")

    def configs(self, *, status: Iterable[str]) -> Iterator[tuple[str, dict[str, Any]]]:
        """``(run_id, config)`` of every record with one of these statuses, read a thousand rows
        at a time, so that asking which of a grid's runs are finished costs the store's size
        in time and a thousand rows in memory. Records without a readable configuration are
        left out (no grid can name them)."""
        statuses = list(status)
        sql = f"SELECT run_id, config FROM runs WHERE status IN ({', '.join('?' for _ in statuses)})"
        with self._connection() as con:
            cursor = con.execute(sql, statuses)
            while rows := cursor.fetchmany(1000):
                for row in rows:
                    try:
                        config = json.loads(row["config"]) if row["config"] else None
                    except ValueError:
                        continue
                    if isinstance(config, dict):
                        yield row["run_id"], {**config, "run_id": row["run_id"]}

    def check(self) -> None:
        """Read every page of the file (``PRAGMA quick_check``: a tenth of a second for 40 MB)
        and raise :class:`StoreError` when any is damaged. A sweep asks before its first run, so
        a damaged store is said at once rather than when a record lands on a bad page hours later."""
        with self._connection() as con:
            problems = [str(row[0]) for row in con.execute("PRAGMA quick_check(3)")]
        if problems != ["ok"]:
            # one row may hold several lines, the first naming the database ("*** in database main ***")
            lines = [line for p in problems for line in p.splitlines() if line.strip() and not line.startswith("***")]
            first = lines[0] if lines else problems[0]
            raise StoreError(f"results store {self.path}: the file is damaged (SQLite's check: {first}); "
                             "restore it from a backup or give another store path; spmlkit leaves this file as it is")

    def __contains__(self, run_id: object) -> bool:
        with self._connection() as con:
            return con.execute("SELECT 1 FROM runs WHERE run_id = ?", (run_id,)).fetchone() is not None

    def __len__(self) -> int:
        with self._connection() as con:
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
        with self._connection() as con:
            return [_decode(r) for r in con.execute(sql, params).fetchall()]

    def to_dataframe(self, *, expand_hparams: bool = True, **filters: Any) -> pandas.DataFrame:
        """All (or the filtered) records as a DataFrame, one row per run.

        JSON columns hold decoded Python objects (``history`` a list of dicts, ...).
        With ``expand_hparams`` every hyperparameter becomes a column ``hp.<name>`` (NaN where
        a run does not set it), next to the ``hparams`` dict; ``test_metrics`` is always
        expanded to ``test.<name>`` columns. Runs of a sweep with a weight-decay axis add a
        ``weight_decay`` column (NaN for runs without one).
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
        if any("weight_decay" in (r.get("config") or {}) for r in recs):  # a sweep's weight-decay axis
            extra_cols["weight_decay"] = [(r.get("config") or {}).get("weight_decay", math.nan) for r in recs]
        names = sorted({k for r in recs for k in (r.get("test_metrics") or {})})
        for n in names:
            extra_cols[f"test.{n}"] = [(r.get("test_metrics") or {}).get(n, math.nan) for r in recs]
        if extra_cols:
            df = pd.concat([df, pd.DataFrame(extra_cols, index=df.index)], axis=1)
        return df

