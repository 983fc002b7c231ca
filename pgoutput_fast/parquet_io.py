"""Reading Parquet files the same way everywhere in the package.

``pyarrow.parquet.read_table`` goes through the dataset scanner, whose background
threads can outlive the read; a process that exits right after one (``pgoutput-fast
inspect``) then dies at interpreter teardown with ``terminate called without an active
exception`` (apache/arrow#34314). The files read here are a capture's segments and
small tables: ``ParquetFile.read`` on the calling thread reads them as fast and leaves
no thread behind.
"""

from __future__ import annotations

__all__ = ["read_parquet"]


def read_parquet(source, columns=None, *, verify_checksums: bool = False):
    """The table in ``source`` (a path, a file object or a ``pa.BufferReader``),
    ``columns`` only if given, read on the calling thread. ``verify_checksums`` checks
    each page's CRC as it is read."""
    import pyarrow.parquet as pq

    with pq.ParquetFile(source, page_checksum_verification=verify_checksums) as f:
        return f.read(columns=columns, use_threads=False)
