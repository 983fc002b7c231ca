"""Where a capture directory is read from: a local path, or a URI on any file system
pyarrow reaches (``s3://``, ``gs://``, ``abfss://``, ``hdfs://``; ``file://`` is a
local path).

``Store.of(path, storage_options=None, filesystem=None)`` gives ``(store, path)``: the
``Store`` reads whole files, sizes and listings; ``path`` is what errors name (the
URI itself, without any user:password part). A local path (or ``file://`` URI) is read
with ``os``, exactly as before; a URI through a ``pyarrow.fs.FileSystem``: the one
given (``filesystem=``), or one made from the URI and ``storage_options``, which takes
the keys delta-rs takes where they mean the same thing:

* S3 (``s3://``, ``s3a://``): ``AWS_ACCESS_KEY_ID``, ``AWS_SECRET_ACCESS_KEY``,
  ``AWS_SESSION_TOKEN``, ``AWS_REGION`` (or ``AWS_DEFAULT_REGION``),
  ``AWS_ENDPOINT_URL`` (or ``AWS_ENDPOINT``), ``AWS_ALLOW_HTTP``. A key not in
  ``storage_options`` is taken from the environment variable of the same name, as
  delta-rs does. Keys are case-insensitive, and the ``aws_`` prefix is optional.
* Azure (``abfs://``, ``abfss://``, ``az://``): ``AZURE_STORAGE_ACCOUNT_NAME``,
  ``AZURE_STORAGE_ACCOUNT_KEY`` (pyarrow's ``AzureFileSystem``; else its defaults).
* anything else (``gs://``, ``hdfs://``, ...): ``pyarrow.fs.FileSystem.from_uri``,
  credentials from that file system's own environment (``storage_options`` ignored).

Keys a file system here does not use (``AWS_S3_ALLOW_UNSAFE_RENAME``, ...) are
ignored: one dict serves the segments and the Delta tables.

A ``Store`` pickles (Spark tasks rebuild the file system from it) and never shows its
options: its ``repr`` names the scheme only, and an error of the file system is
reported as ``StorageError`` with every secret value of the options blanked out.
"""

from __future__ import annotations

import os
import re
from urllib.parse import unquote, urlsplit

from .errors import UserError

__all__ = ["Store", "StorageError", "is_uri", "parse_storage_options", "LOCAL"]

_URI_RE = re.compile(r"^[A-Za-z][A-Za-z0-9+.\-]*://")
_SECRET_WORDS = ("SECRET", "TOKEN", "KEY", "PASSWORD", "SAS", "CREDENTIAL")


class StorageError(UserError, OSError):
    """A file system could not be reached or read (no such bucket, no network, access
    denied). One line, no secret."""

    exit_code = 1

    def __str__(self):          # OSError's str would print the args tuple
        return self.args[0] if self.args else ""


def is_uri(path) -> bool:
    """True for ``scheme://...`` (``file://`` included), False for a plain path."""
    return isinstance(path, str) and bool(_URI_RE.match(path))


def _display(uri: str) -> str:
    """The URI without a ``user:password@`` part (S3 URIs may carry keys)."""
    parts = urlsplit(uri)
    if "@" in parts.netloc and parts.scheme not in ("abfs", "abfss"):
        host = parts.netloc.rsplit("@", 1)[1]
        return parts._replace(netloc=host, query="").geturl()
    return parts._replace(query="").geturl() if parts.query else uri


def parse_storage_options(pairs) -> dict | None:
    """``["KEY=VALUE", ...]`` (the command line's ``--storage-option``) as a dict."""
    out = {}
    for p in pairs or ():
        key, sep, value = p.partition("=")
        if not sep or not key.strip():
            raise UserError(f"--storage-option {key.strip() or p!r}: expected KEY=VALUE")
        out[key.strip()] = value
    return out or None


def _norm(options) -> dict:
    return {str(k).upper(): str(v) for k, v in (options or {}).items()}


def _get(opts: dict, *names, env=True):
    for n in names:
        for k in (n, n[4:] if n.startswith("AWS_") else None):
            if k and k in opts:
                return opts[k]
    if env:
        for n in names:
            if os.environ.get(n):
                return os.environ[n]
    return None


def _truthy(v) -> bool:
    return str(v).strip().lower() in ("1", "true", "yes", "on")


class Store:
    """Reads files of one file system: local (``os``) or a ``pyarrow.fs.FileSystem``."""

    __slots__ = ("scheme", "_options", "_given", "_fs")

    def __init__(self, scheme=None, storage_options=None, filesystem=None):
        self.scheme = scheme                 # None: local, read with os
        self._options = dict(storage_options) if storage_options else None
        self._given = filesystem
        self._fs = filesystem

    @classmethod
    def of(cls, path, storage_options=None, filesystem=None) -> tuple["Store", str]:
        """``(store, display path)`` of a local path or URI (module doc)."""
        if isinstance(path, Store):
            raise TypeError("a path or URI, not a Store")
        if filesystem is not None:
            path = os.fspath(path)
            scheme = urlsplit(path).scheme.lower() if is_uri(path) else "fs"
            return cls(scheme, None, filesystem), _display(path) if is_uri(path) else path
        if not is_uri(path):
            return LOCAL, os.fspath(path)
        scheme = urlsplit(path).scheme.lower()
        if scheme == "file":
            return LOCAL, unquote(urlsplit(path).path)
        return cls(scheme, storage_options), _display(path)

    def __reduce__(self):
        return (Store, (self.scheme, self._options, self._given))

    def __repr__(self):
        return "Store(local)" if self.scheme is None else f"Store({self.scheme})"

    @property
    def local(self) -> bool:
        return self.scheme is None

    # -- the file system ---------------------------------------------------------------
    @property
    def fs(self):
        if self._fs is None:
            self._fs = self._make()
        return self._fs

    def _make(self):
        import pyarrow.fs as pafs

        opts = _norm(self._options)
        try:
            if self.scheme in ("s3", "s3a"):
                endpoint = _get(opts, "AWS_ENDPOINT_URL", "AWS_ENDPOINT")
                kw = dict(access_key=_get(opts, "AWS_ACCESS_KEY_ID"),
                          secret_key=_get(opts, "AWS_SECRET_ACCESS_KEY"),
                          session_token=_get(opts, "AWS_SESSION_TOKEN"),
                          region=_get(opts, "AWS_REGION", "AWS_DEFAULT_REGION"),
                          endpoint_override=endpoint)
                if endpoint and endpoint.startswith("http://"):
                    kw["scheme"] = "http"
                elif _truthy(_get(opts, "AWS_ALLOW_HTTP") or "") and endpoint \
                        and "://" not in endpoint:
                    kw["scheme"] = "http"
                if not kw["access_key"] or not kw["secret_key"]:
                    kw.pop("access_key")
                    kw.pop("secret_key")
                    kw.pop("session_token")
                    if _truthy(_get(opts, "AWS_SKIP_SIGNATURE") or ""):
                        kw["anonymous"] = True
                return pafs.S3FileSystem(**{k: v for k, v in kw.items() if v is not None})
            if self.scheme in ("abfs", "abfss", "az"):
                name = _get(opts, "AZURE_STORAGE_ACCOUNT_NAME", env=True)
                key = _get(opts, "AZURE_STORAGE_ACCOUNT_KEY", env=True)
                if name:
                    return pafs.AzureFileSystem(account_name=name, account_key=key or None)
            return None         # from the URI, on first use (_fs_path)
        except (OSError, ValueError, TypeError) as exc:
            raise StorageError(f"{self.scheme}://: cannot set up the file system: "
                               f"{self._scrub(exc)}") from None

    def _fs_path(self, path: str) -> str:
        """The path inside the file system of a display path."""
        if not is_uri(path):
            return path
        parts = urlsplit(path)
        if self.scheme in ("s3", "s3a", "gs", "gcs"):
            return parts.netloc.rsplit("@", 1)[-1] + parts.path.rstrip("/")
        if self.scheme in ("abfs", "abfss", "az"):
            container = parts.netloc.split("@", 1)[0]
            return container + parts.path.rstrip("/")
        return parts.path.rstrip("/") or "/"

    def _resolve(self, path: str):
        fs = self.fs
        if fs is None:
            import pyarrow.fs as pafs

            try:
                fs, _p = pafs.FileSystem.from_uri(path)
            except (OSError, ValueError) as exc:
                raise StorageError(f"{path}: cannot reach its file system: "
                                   f"{self._scrub(exc)}") from None
            self._fs = fs
        return fs, self._fs_path(path)

    # -- errors without secrets ----------------------------------------------------------
    def _scrub(self, exc) -> str:
        text = " ".join(str(exc).split()) or type(exc).__name__
        for k, v in _norm(self._options).items():
            if v and len(v) >= 4 and any(w in k for w in _SECRET_WORDS):
                text = text.replace(v, "***")
        for n in ("AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN", "AZURE_STORAGE_ACCOUNT_KEY"):
            v = os.environ.get(n)
            if v and len(v) >= 4:
                text = text.replace(v, "***")
        return text

    def _error(self, path, exc) -> StorageError:
        return StorageError(f"{path}: cannot read it: {self._scrub(exc)}")

    # -- reading -------------------------------------------------------------------------
    def join(self, directory: str, name: str) -> str:
        if self.local:
            return os.path.join(directory, name)
        return directory.rstrip("/") + "/" + name

    def read_bytes(self, path: str) -> bytes:
        """The whole file; ``FileNotFoundError`` (``IsADirectoryError`` locally) as ``open``."""
        if self.local:
            with open(path, "rb") as f:
                return f.read()
        fs, p = self._resolve(path)
        try:
            with fs.open_input_stream(p) as f:
                return f.read()
        except FileNotFoundError:
            raise FileNotFoundError(2, "No such file or directory", path) from None
        except OSError as exc:
            raise self._error(path, exc) from None

    def size(self, path: str) -> int:
        """The size of a file; ``FileNotFoundError`` when there is none."""
        if self.local:
            return os.path.getsize(path)
        import pyarrow.fs as pafs

        fs, p = self._resolve(path)
        try:
            info = fs.get_file_info(p)
        except OSError as exc:
            raise self._error(path, exc) from None
        if info.type == pafs.FileType.NotFound:
            raise FileNotFoundError(2, "No such file or directory", path)
        return int(info.size or 0)

    def exists(self, path: str) -> bool:
        if self.local:
            return os.path.exists(path)
        try:
            self.size(path)
        except FileNotFoundError:
            return False
        return True

    def isdir(self, path: str) -> bool:
        if self.local:
            return os.path.isdir(path)
        import pyarrow.fs as pafs

        fs, p = self._resolve(path)
        try:
            return fs.get_file_info(p).type == pafs.FileType.Directory
        except OSError as exc:
            raise self._error(path, exc) from None

    def listdir(self, path: str) -> list:
        if self.local:
            return os.listdir(path)
        import pyarrow.fs as pafs

        fs, p = self._resolve(path)
        try:
            return [i.base_name for i in fs.get_file_info(pafs.FileSelector(p))]
        except FileNotFoundError:
            return []
        except OSError as exc:
            raise self._error(path, exc) from None


    # -- writing (small files: a state file) ----------------------------------------------
    def write_bytes(self, path: str, data: bytes, *, file_mode: int = 0o644) -> None:
        """Replace the file at ``path`` with ``data`` atomically: locally a temporary file,
        fsync and rename (then the directory fsynced); on an object store one PUT (an
        object is replaced whole: a reader sees the old or the new one)."""
        if self.local:
            import tempfile

            d = os.path.dirname(os.path.abspath(path))
            os.makedirs(d, exist_ok=True)
            fd, tmp = tempfile.mkstemp(prefix="." + os.path.basename(path) + ".", dir=d)
            try:
                with os.fdopen(fd, "wb") as f:
                    f.write(data)
                    f.flush()
                    os.fsync(f.fileno())
                os.chmod(tmp, file_mode)
                os.replace(tmp, path)
            except BaseException:
                try:
                    os.unlink(tmp)
                except FileNotFoundError:
                    pass
                raise
            dfd = os.open(d, os.O_RDONLY | os.O_DIRECTORY)
            try:
                os.fsync(dfd)
            finally:
                os.close(dfd)
            return
        fs, p = self._resolve(path)
        try:
            with fs.open_output_stream(p) as f:
                f.write(data)
        except OSError as exc:
            raise StorageError(f"{path}: cannot write it: {self._scrub(exc)}") from None


#: The local file system (os).
LOCAL = Store()
