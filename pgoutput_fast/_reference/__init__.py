"""Pure-Python reference implementation (the oracle the native core is tested against).

Selected with ``PGOUTPUT_FAST_IMPL=python``. Same API and results as
``pgoutput_fast._native``, including the offset and message type of every
``DecodeError``.
"""

from .decode import decode_message

__all__ = ["decode_message"]
