"""The connection string of ``capture``: where it comes from, how it is checked, and how
it is shown in messages without its password.

``resolve_dsn`` takes it from ``--dsn``, else ``--dsn-file PATH``, else the environment
variable ``PGOUTPUT_FAST_DSN``, else ``""``: libpq then fills every key the string lacks
from its own environment (``PGHOST``, ``PGPORT``, ``PGUSER``, ``PGDATABASE``,
``PGPASSWORD``, ``PGPASSFILE``, ``PGSERVICE``) and defaults, as it does for any key a
non-empty string lacks. A password is best kept out of the command line (where ``ps``
shows it): in the ``--dsn-file``, ``PGPASSWORD`` or a password file (``~/.pgpass``).

No function here puts a password, or a fragment of a malformed string, into a message:
``check_dsn`` says *what kind* of mistake a malformed string has, never where (libpq's
own message quotes the text around it), ``describe`` shows host, port, database and
user only, ``redact`` replaces the password (and ``PGPASSWORD``'s value) by ``***`` in
any text, and ``connect_error`` turns a failed connection into one such line.
"""

from __future__ import annotations

import os
import re
import urllib.parse

from .errors import CaptureError, ConnectError, ServerRefused

__all__ = ["DSN_ENV", "resolve_dsn", "check_dsn", "describe", "redact", "connect_error"]

#: the environment variable read when neither ``--dsn`` nor ``--dsn-file`` is given
DSN_ENV = "PGOUTPUT_FAST_DSN"

_HOW = ("write it as key=value pairs separated by spaces (host=db.example port=5432 "
        "dbname=app user=capture; a value with spaces or quotes in single quotes, with \\' "
        "and \\\\ inside) or as a URI (postgresql://capture@db.example:5432/app, "
        "%-encoding reserved characters)")

# libpq's reasons for a malformed string, each without the quoted fragment libpq adds
_MALFORMED = (
    ('missing "="', "a word without '=' (a value with spaces must be in single quotes)"),
    ("invalid connection option", "an unknown key"),
    ("unterminated quoted string", "a single quote that is not closed"),
    ("percent-encoded", "a bad %-escape"),
    ("IPv6", "an IPv6 address without its closing ']'"),
    ("URI query parameter", "a bad ?key=value parameter in the URI"),
    ("URI", "text that is not a valid URI"),
)

_URI_PREFIXES = ("postgresql://", "postgres://")


def resolve_dsn(dsn: str | None = None, dsn_file: str | None = None,
                environ=None) -> str:
    """The connection string: ``dsn`` (``--dsn``), else the stripped content of
    ``dsn_file`` (``--dsn-file``), else ``$PGOUTPUT_FAST_DSN``, else ``""`` (libpq's
    own environment and defaults). Raises ``CaptureError`` when both are given or the
    file cannot be read; its message names the file, never its content."""
    environ = os.environ if environ is None else environ
    if dsn is not None and dsn_file is not None:
        raise CaptureError("both --dsn and --dsn-file are given: use one of them")
    if dsn is not None:
        return dsn
    if dsn_file is not None:
        path = os.fspath(dsn_file)
        try:
            with open(path, "rb") as f:
                raw = f.read(1 << 20)
        except OSError as exc:
            reason = exc.strerror or type(exc).__name__
            raise CaptureError(f"cannot read the --dsn-file {path!r}: {reason}: give a "
                               "readable file holding the connection string") from None
        try:
            text = raw.decode("utf-8")
        except UnicodeDecodeError:
            raise CaptureError(f"the --dsn-file {path!r} is not UTF-8 text: it must hold "
                               "the connection string") from None
        text = text.strip()
        if not text:
            raise CaptureError(f"the --dsn-file {path!r} is empty: it must hold the "
                               "connection string (or leave out --dsn-file to use libpq's "
                               "PG* environment variables)")
        return text
    return environ.get(DSN_ENV, "") or ""


def _psycopg2():
    try:
        import psycopg2
        import psycopg2.extensions
    except ImportError:
        raise CaptureError("capture needs psycopg2: pip install 'pgoutput-fast[capture]'") from None
    return psycopg2


def _parse(dsn: str) -> dict:
    return _psycopg2().extensions.parse_dsn(dsn)


def check_dsn(dsn: str) -> dict:
    """The keys of ``dsn`` (``psycopg2.extensions.parse_dsn``). A malformed string
    raises ``CaptureError`` saying what kind of mistake it holds and how to write one;
    the message holds no fragment of the string (it may hold a password)."""
    psycopg2 = _psycopg2()
    try:
        return psycopg2.extensions.parse_dsn(dsn)
    except psycopg2.Error as exc:
        text = str(exc)
    kind = "a mistake"
    for needle, words in _MALFORMED:
        if needle in text:
            kind = words
            break
    raise CaptureError(f"the connection string is malformed ({kind}; not shown, it may "
                       f"hold a password): {_HOW}")


# -- showing it -----------------------------------------------------------------------

def _quote(value: str) -> str:
    if value and not re.search(r"[\s'\\]", value):
        return value
    return "'" + value.replace("\\", "\\\\").replace("'", "\\'") + "'"


def _params(dsn: str) -> dict | None:
    """The keys of ``dsn`` with an expanded ``dbname`` (a connection string or URI in
    ``dbname`` counts as libpq's ``expand_dbname``); None if malformed."""
    try:
        params = _parse(dsn)
    except Exception:   # malformed (or no psycopg2)
        return None
    db = params.get("dbname")
    if db and ("=" in db or db.startswith(_URI_PREFIXES)):
        inner = _params(db)
        if inner is None:
            params = {k: v for k, v in params.items() if k != "dbname"}
        else:
            params = {**{k: v for k, v in params.items() if k != "dbname"}, **inner}
    return params


def describe(dsn: str, environ=None) -> str:
    """A one-line description of where ``dsn`` connects, safe for messages: host, port,
    dbname and user (from the string, else from ``PGHOST``/``PGPORT``/``PGDATABASE``/
    ``PGUSER``; libpq's defaults are left out), and the service. Never the password."""
    environ = os.environ if environ is None else environ
    params = _params(dsn or "")
    if params is None:
        return "the connection string (malformed, not shown)"
    parts = []
    for key, env in (("service", "PGSERVICE"), ("host", "PGHOST"), ("hostaddr", "PGHOSTADDR"),
                     ("port", "PGPORT"), ("dbname", "PGDATABASE"), ("user", "PGUSER")):
        value = params.get(key) or environ.get(env) or ""
        if value:
            parts.append(f"{key}={_quote(value)}")
    if not parts:
        return "the server of libpq's defaults (local socket, user and database named " \
               "after the system user)"
    return " ".join(parts)


def _raw_passwords(dsn: str) -> list:
    """The password as written in ``dsn``, also when the string is malformed: the value
    of every ``password=`` key, and the URI's user-info password (up to the first and
    to the last ``@``: an unencoded ``@`` in a password)."""
    out = []
    for m in re.finditer(r"(?:^|\s)password\s*=\s*('(?:[^'\\]|\\.)*'?|\S+)", dsn):
        v = m.group(1)
        if v.startswith("'"):
            v = v[1:-1] if len(v) > 1 and v.endswith("'") else v[1:]
            out.append(re.sub(r"\\(.)", r"\1", v))
        out.append(v)
    for prefix in _URI_PREFIXES:
        if dsn.startswith(prefix):
            rest = dsn[len(prefix):]
            hostpart = rest.split("/", 1)[0]
            if "@" in hostpart:
                for userinfo in (hostpart.split("@", 1)[0], hostpart.rsplit("@", 1)[0]):
                    if ":" in userinfo:
                        pw = userinfo.split(":", 1)[1]
                        out.append(pw)
                        out.append(urllib.parse.unquote(pw))
            query = rest.split("?", 1)[1] if "?" in rest else ""
            for item in query.split("&"):
                k, _, v = item.partition("=")
                if k == "password" and v:
                    out.append(v)
                    out.append(urllib.parse.unquote(v))
    return out


def _secrets(dsn: str, environ) -> list:
    found = list(_raw_passwords(dsn or ""))
    params = _params(dsn or "") if dsn else {}
    if params:
        pw = params.get("password")
        if pw:
            found += [pw, urllib.parse.quote(pw, safe=""), urllib.parse.quote(pw)]
        db = None
        try:
            db = _parse(dsn).get("dbname")
        except Exception:
            pass
        if db and ("=" in db or db.startswith(_URI_PREFIXES)):
            found += _raw_passwords(db)
    env_pw = environ.get("PGPASSWORD")
    if env_pw:
        found.append(env_pw)
    # longest first: a password that holds another is replaced whole
    return sorted({s for s in found if s}, key=len, reverse=True)


_KV_PASSWORD = re.compile(r"(\bpassword\s*=\s*)('(?:[^'\\]|\\.)*'?|[^\s'\"]+)", re.I)
_URI_PASSWORD = re.compile(r"(\bpostgres(?:ql)?://[^:/@\s]*:)([^\s/]*)@", re.I)


def redact(text: str, dsn: str | None, environ=None) -> str:
    """``text`` with every occurrence of the password of ``dsn`` (key/value and URI
    form, as written, decoded and %-encoded), of ``PGPASSWORD``'s value, and of any
    ``password=...`` or ``postgresql://user:...@`` replaced by ``***``; the whole
    ``dsn``, where it appears, by ``describe(dsn)``."""
    environ = os.environ if environ is None else environ
    text = str(text)
    if dsn and dsn in text:
        text = text.replace(dsn, describe(dsn, environ))
    for secret in _secrets(dsn or "", environ):
        text = text.replace(secret, "***")
    text = _KV_PASSWORD.sub(lambda m: m.group(1) + "***", text)
    text = _URI_PASSWORD.sub(lambda m: m.group(1) + "***@", text)
    return text


# -- failed connections -----------------------------------------------------------------

# transient: a retry can succeed (checked first: libpq may report several hosts)
_TRANSIENT = (
    "server closed the connection unexpectedly",
    "the database system is starting up",
    "the database system is shutting down",
    "the database system is in recovery mode",
    "the database system is not yet accepting connections",
    "the database system is not accepting connections",
    "timeout expired",
    "too many clients",
    "remaining connection slots are reserved",
    "number of requested standby connections exceeds",
    "connection timed out",
    "could not receive data from server",
    "could not send data to server",
    "terminating connection due to administrator command",
)


def _quoted(pattern: str, text: str) -> str:
    m = re.search(pattern, text)
    return m.group(1) if m else "?"


def _reason(text: str) -> str:
    """The line of libpq's message that says why, without the "connection to server
    at ... failed:" prefix and the hint lines."""
    for line in text.splitlines():
        line = line.strip()
        if not line:
            continue
        m = re.match(r'connection to server (?:at|on socket) .*? failed: (.*)$', line)
        if m:
            line = m.group(1)
        line = re.sub(r"^(FATAL|ERROR):\s+", "", line)
        if line:
            return line
    return text.strip()


def connect_error(exc: BaseException, dsn: str, environ=None) -> CaptureError | None:
    """Classify a ``psycopg2.OperationalError`` raised while connecting with ``dsn``.

    A cause a retry cannot fix becomes a ``ConnectError`` (exit status 3) or, for a
    missing database or a role without REPLICATION, a ``ServerRefused`` (4), with one
    redacted line saying what failed, where and what to do; its ``kind`` attribute
    names the cause (``"password"``, ``"no_password"``, ``"role"``, ``"database"``,
    ``"hba"``, ``"host"``, ``"refused"``, ``"login"``, ``"replication"``, ``"ssl"``).
    ``"refused"`` (nothing listening) is permanent only at the first attempt: the
    caller decides. A transient cause (the server closed the connection, is starting
    up, shutting down or in recovery, a timeout, too many clients) or an unknown one
    returns None: retry."""
    environ = os.environ if environ is None else environ
    text = redact(str(exc), dsn, environ)
    low = text.lower()
    where = describe(dsn, environ)
    head = f"cannot connect to {where}"
    for needle in _TRANSIENT:
        if needle in low:
            return None

    def make(cls, kind, message):
        err = cls(f"{head}: {message}")
        err.kind = kind
        return err

    if "password authentication failed" in low or ("authentication failed" in low
                                                     and "password" in low):
        user = _quoted(r'for user "([^"]*)"', text)
        return make(ConnectError, "password",
                    f'password authentication failed for user "{user}": check the password '
                    "(in --dsn-file, PGPASSWORD or the password file ~/.pgpass / PGPASSFILE)")
    if "no password supplied" in low:
        return make(ConnectError, "no_password",
                    "the server asks for a password and none was given: put it in "
                    "--dsn-file, PGPASSWORD or the password file (~/.pgpass, PGPASSFILE)")
    if "authentication failed" in low:
        return make(ConnectError, "password",
                    f"{_reason(text)}: check the role's credentials and pg_hba.conf")
    m = re.search(r'role "([^"]*)" does not exist', text)
    if m:
        return make(ConnectError, "role",
                    f'role "{m.group(1)}" does not exist: check user= in the connection '
                    "string or PGUSER")
    m = re.search(r'role "([^"]*)" is not permitted to log in', text)
    if m:
        return make(ConnectError, "login",
                    f'role "{m.group(1)}" is not permitted to log in: ALTER ROLE ... LOGIN, '
                    "or connect as another role")
    m = re.search(r'database "([^"]*)" does not exist', text)
    if m:
        return make(ServerRefused, "database",
                    f'database "{m.group(1)}" does not exist: check dbname= in the '
                    "connection string or PGDATABASE (the database of the slot)")
    if "no pg_hba.conf entry" in low or "pg_hba.conf rejects connection" in low:
        detail = _reason(text)
        return make(ConnectError, "hba",
                    f"{detail}: add a line for this role to the server's pg_hba.conf (a "
                    "capture needs one for its database and one for 'replication') and "
                    "reload it, or connect from an allowed address")
    if ("permission denied to start wal sender" in low or "must be superuser or replication"
            in low or "must have replication" in low):
        return make(ServerRefused, "replication",
                    "the role may not start a replication connection: ALTER ROLE ... "
                    "REPLICATION, or connect as a role that has it")
    m = re.search(r'could not translate host name "([^"]*)"', text)
    if m:
        return make(ConnectError, "host",
                    f'cannot resolve the host name "{m.group(1)}": check host= in the '
                    "connection string or PGHOST")
    if "connection refused" in low or ("no such file or directory" in low and "socket" in low):
        return make(ConnectError, "refused",
                    "nothing accepts connections there (connection refused): is the server "
                    "running, and listening on that address and port (listen_addresses, "
                    "port)?")
    if "ssl" in low and ("required" in low or "certificate" in low or "sslmode" in low
                         or "does not support" in low):
        return make(ConnectError, "ssl",
                    f"{_reason(text)}: check sslmode and the certificates")
    if "invalid " in low and ("value for parameter" in low or "sslmode value" in low
                              or "integer value" in low or "port number" in low):
        return make(ConnectError, "option", f"{_reason(text)}: fix that connection option")
    return None
