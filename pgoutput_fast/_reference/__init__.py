"""Pure-Python reference implementation (the oracle the native core is tested against).

Selected with ``PGOUTPUT_FAST_IMPL=python``. Same API and results as
``pgoutput_fast._native``, including the offset and message type of every
``DecodeError``.
"""

from .decode import decode_message
from .decoder import DecoderCore, MessageBatch, EVENT_SCHEMA

__all__ = ["decode_message", "DecoderCore", "MessageBatch", "EVENT_SCHEMA"]
