"""A throwaway local PostgreSQL 15 for ``bench/journal``: durable, on loopback, gone after.

The LangGraph side is only as fair as its database: a commit is worth comparing with the
journal's only when it is on disk, so durability is set on the server's command line
(``fsync``, ``synchronous_commit``, ``full_page_writes``: above postgresql.conf and ALTER
SYSTEM) and read back with SHOW once it serves; a server that says otherwise is refused.
The data directory is on the machine's disk (its filesystem is stated, a tmpfs would make
fsync free) and the disk's own ``fdatasync`` floor is measured beside it, so a reader sees
what a commit can cost here at best.

Debian's ``postgresql`` package is installed with apt-get only when its binaries
(:data:`BIN`) are missing. ``initdb`` refuses root, so as root it and the server run as the
``postgres`` user (``runuser``), in a fresh temporary directory that user owns. The server
listens on 127.0.0.1 only, on a free port (its unix socket in that directory, not the
system's), with a generated password (scram on TCP, peer on the socket): nothing leaves the
machine. It runs in a session of its own, so a Ctrl-C reaches the benchmark, never the
server directly, and the benchmark stops it (``pg_ctl stop -m fast``) and removes the
directory on the way out, Ctrl-C included. Readiness is ``pg_isready`` polled until a
deadline (and the server's early exit noticed), never a fixed sleep.
"""

from __future__ import annotations

import contextlib
import os
import pwd
import secrets
import shutil
import signal
import socket
import statistics
import subprocess
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

BIN = Path("/usr/lib/postgresql/15/bin")
USER = "postgres"  # the OS user the server runs as when we are root, and the DB superuser
DATABASE = "bench"
# Durability, explicitly: each SHOWn after start and refused unless "on".
DURABILITY = {"fsync": "on", "synchronous_commit": "on", "full_page_writes": "on"}
# What the report states (the first four are the durability and its sync call).
SHOWN = ("fsync", "synchronous_commit", "full_page_writes", "wal_sync_method", "server_version",
         "shared_buffers", "max_wal_size", "checkpoint_timeout", "wal_level", "jit")
FSYNC_FLOOR_SAMPLES = 200


@dataclass(frozen=True)
class Server:
    """A running server: how to connect (``conninfo``, to ``database`` on 127.0.0.1;
    ``admin_conninfo``: the same to the ``postgres`` database), the postmaster's pid (its
    process tree is the server's CPU), what SHOW said, the data directory's filesystem and
    the disk's fdatasync floor (median ms of an 8 KiB write + fdatasync in that directory,
    before the server started)."""

    conninfo: str
    admin_conninfo: str
    database: str
    pid: int
    data: Path
    settings: dict[str, str]
    filesystem: str
    fsync_floor_ms: float

    def cpu_seconds(self) -> float:
        """CPU-seconds of the server so far (see :func:`tree_cpu_seconds`)."""
        return tree_cpu_seconds(self.pid)


def ensure_installed() -> None:
    """Debian's ``postgresql`` (15 on bookworm) with apt-get, only when its binaries are
    missing: a machine that has them is not touched."""
    needed = ("initdb", "pg_ctl", "pg_isready", "postgres")
    if all(os.access(BIN / name, os.X_OK) for name in needed):
        return
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    subprocess.run(["apt-get", "update"], check=True, env=env)
    subprocess.run(["apt-get", "install", "-y", "postgresql"], check=True, env=env)
    missing = [name for name in needed if not os.access(BIN / name, os.X_OK)]
    if missing:
        raise RuntimeError(f"apt-get installed postgresql but {BIN} lacks {missing}")


def tree_cpu_seconds(root: int) -> float:
    """utime+stime+cutime+cstime of ``root`` and every live descendant, from /proc: a
    backend that exited is in its parent's cutime/cstime once reaped (the postmaster
    reaps them), and a live process's cutime holds only its reaped children, so nothing is
    counted twice. Resolution: one clock tick (10 ms)."""
    stats: dict[int, tuple[int, int]] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            text = (entry / "stat").read_text()
        except OSError:  # gone meanwhile
            continue
        # after "(comm)": state ppid ... utime(14) stime cutime cstime(17), counted from 1
        fields = text[text.rindex(")") + 2:].split()
        stats[int(entry.name)] = (int(fields[1]), sum(int(x) for x in fields[11:15]))
    children: dict[int, list[int]] = {}
    for pid, (ppid, _) in stats.items():
        children.setdefault(ppid, []).append(pid)
    ticks, todo = 0, [root]
    while todo:
        pid = todo.pop()
        if pid in stats:
            ticks += stats[pid][1]
            todo.extend(children.get(pid, []))
    return ticks / os.sysconf("SC_CLK_TCK")


def filesystem(path: Path) -> str:
    """The type of the filesystem ``path`` is on (the longest mount point above it)."""
    best, kind = "", "?"
    resolved = str(path.resolve())
    for line in Path("/proc/mounts").read_text().splitlines():
        parts = line.split()
        point = parts[1]
        inside = resolved == point or resolved.startswith(point.rstrip("/") + "/")
        if inside and len(point) >= len(best):
            best, kind = point, parts[2]
    return f"{kind} ({best})"


def fsync_floor_ms(folder: Path, *, samples: int = FSYNC_FLOOR_SAMPLES) -> float:
    """Median ms of one 8 KiB write + ``fdatasync`` (the server's default WAL sync) in
    ``folder``: the least a durable commit can cost on this disk."""
    path = folder / "fsync-floor"
    block = os.urandom(8192)
    took: list[float] = []
    fd = os.open(path, os.O_WRONLY | os.O_CREAT, 0o600)
    try:
        for _ in range(samples):
            start = time.perf_counter()
            os.pwrite(fd, block, 0)
            os.fdatasync(fd)
            took.append(time.perf_counter() - start)
    finally:
        os.close(fd)
        path.unlink()
    return statistics.median(took) * 1000


def free_port() -> int:
    """A port free on 127.0.0.1 now (the server takes it a moment later; a clash fails
    its start, loudly)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def as_server_user(command: list[str]) -> list[str]:
    """``command`` as the ``postgres`` OS user when we are root (initdb and the server
    refuse root); as ourselves otherwise."""
    return ["runuser", "-u", USER, "--", *command] if os.geteuid() == 0 else command


def give(path: Path) -> None:
    """``path`` to the ``postgres`` user when we are root (the server's files are its)."""
    if os.geteuid() == 0:
        user = pwd.getpwnam(USER)
        os.chown(path, user.pw_uid, user.pw_gid)


def tail(path: Path, lines: int = 20) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return "(no log)"


def wait_ready(*, port: int, process: subprocess.Popen[bytes], log: Path,
               timeout: float) -> None:
    """Until ``pg_isready`` says the server accepts connections on 127.0.0.1:``port``;
    refused if the server exits first or ``timeout`` seconds pass (with its log's tail)."""
    deadline = time.monotonic() + timeout
    while True:
        ready = subprocess.run([str(BIN / "pg_isready"), "-q", "-h", "127.0.0.1", "-p",
                                str(port), "-d", "postgres", "-t", "1"], check=False)
        if ready.returncode == 0:
            return
        if process.poll() is not None:
            raise RuntimeError(f"PostgreSQL exited ({process.returncode}) before it was "
                               f"ready:\n{tail(log)}")
        if time.monotonic() > deadline:
            raise RuntimeError(f"PostgreSQL not ready in {timeout:.0f} s:\n{tail(log)}")
        time.sleep(0.05)  # the poll's pace, not a wait for readiness


def postmaster_pid(data: Path) -> int:
    """The postmaster's pid: the first line of its postmaster.pid."""
    return int((data / "postmaster.pid").read_text().splitlines()[0])


def shown(conninfo: str) -> dict[str, str]:
    """What SHOW says of :data:`SHOWN`, from a fresh connection; refused unless every
    :data:`DURABILITY` setting is what it must be."""
    import psycopg

    with psycopg.connect(conninfo, autocommit=True) as conn:
        settings: dict[str, str] = {}
        for name in SHOWN:
            row = conn.execute(f"SHOW {name}").fetchone()
            settings[name] = str(row[0]) if row else "?"
    wrong = {k: settings[k] for k, v in DURABILITY.items() if settings[k] != v}
    if wrong:
        raise RuntimeError(f"PostgreSQL is not durable as started: {wrong}")
    return settings


def stop(*, data: Path, process: subprocess.Popen[bytes]) -> None:
    """``pg_ctl stop -m fast``, waited for; an immediate shutdown (SIGQUIT) if that fails."""
    stopped = subprocess.run(as_server_user([str(BIN / "pg_ctl"), "stop", "-D", str(data),
                                             "-m", "fast", "-w", "-t", "60"]),
                             capture_output=True, check=False)
    if stopped.returncode != 0 and process.poll() is None:
        with contextlib.suppress(OSError, ValueError, IndexError):
            os.kill(postmaster_pid(data), signal.SIGQUIT)
    try:
        process.wait(timeout=60)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()


@contextlib.contextmanager
def running(*, timeout: float = 60.0) -> Iterator[Server]:
    """A fresh durable PostgreSQL 15 on 127.0.0.1 with an empty :data:`DATABASE`,
    stopped and removed when the block ends (an exception or Ctrl-C too)."""
    import psycopg

    ensure_installed()
    folder = Path(tempfile.mkdtemp(prefix="agentrun-bench-pg-"))
    process: subprocess.Popen[bytes] | None = None
    data = folder / "data"
    try:
        floor = fsync_floor_ms(folder)
        give(folder)
        password = secrets.token_urlsafe(24)
        pwfile = folder / "pwfile"
        pwfile.write_text(password + "\n")
        pwfile.chmod(0o600)
        give(pwfile)
        subprocess.run(as_server_user([
            str(BIN / "initdb"), "-D", str(data), "-U", USER, f"--pwfile={pwfile}",
            "--auth-local=peer", "--auth-host=scram-sha-256", "--encoding=UTF8",
            "--locale=C"]), check=True, capture_output=True)
        pwfile.unlink()
        port = free_port()
        options = {"listen_addresses": "127.0.0.1", "port": str(port),
                   "unix_socket_directories": str(folder), **DURABILITY}
        log = folder / "server.log"
        with log.open("wb") as out:
            process = subprocess.Popen(
                as_server_user([str(BIN / "postgres"), "-D", str(data),
                                *(f"-c{k}={v}" for k, v in options.items())]),
                stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                start_new_session=True)
        wait_ready(port=port, process=process, log=log, timeout=timeout)
        base = f"host=127.0.0.1 port={port} user={USER} password={password}"
        with psycopg.connect(f"{base} dbname=postgres", autocommit=True) as conn:
            conn.execute(f"CREATE DATABASE {DATABASE}")
        conninfo = f"{base} dbname={DATABASE}"
        yield Server(conninfo=conninfo, admin_conninfo=f"{base} dbname=postgres",
                     database=DATABASE, pid=postmaster_pid(data), data=data,
                     settings=shown(conninfo), filesystem=filesystem(data),
                     fsync_floor_ms=floor)
    finally:
        if process is not None:
            stop(data=data, process=process)
        shutil.rmtree(folder, ignore_errors=True)
