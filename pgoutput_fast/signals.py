"""SIGINT and SIGTERM of the ``pgoutput-fast`` command, installed before anything heavy
is imported.

``install(defer=True)`` (``capture``): a signal only sets the process-wide ``STOP``
event, which the capture loop polls (it finishes the current segment and exits 0); a
signal that arrives before the capture has connected makes it return at once.
``install(defer=False)`` (every other command): SIGINT and SIGTERM raise
``Interrupted`` (a ``KeyboardInterrupt``) in the main thread, which the command line
turns into one line and exit status 130 (SIGINT) or 143 (SIGTERM); ``finally`` blocks
(temp files) run. Either way ``STOP`` is set.

Python installs its own SIGINT handler at start-up and leaves SIGTERM at the default
(the process dies, status -15); both stay in place only for the few milliseconds of
``import pgoutput_fast`` and ``pgoutput_fast.cli``. Signals the parent left blocked are
unblocked once the handlers are in place (a pending one is then handled at once); a
signal the parent left ignored (SIG_IGN) stays ignored.
"""

from __future__ import annotations

import signal
import threading

__all__ = ["STOP", "Interrupted", "install", "restore", "installed"]

#: set by SIGINT/SIGTERM once ``install`` ran; the capture loop polls it
STOP = threading.Event()

SIGNALS = (signal.SIGINT, signal.SIGTERM)

_state: dict = {"defer": None}


class Interrupted(KeyboardInterrupt):
    """SIGINT or SIGTERM outside capture (``signum``; the exit status is 128 + it)."""

    def __init__(self, signum: int):
        super().__init__(signum)
        self.signum = signum

    def __str__(self):
        return "interrupted (SIGINT)" if self.signum == signal.SIGINT else "terminated (SIGTERM)"


def _handler(signum, frame):
    STOP.set()
    if not _state["defer"]:
        raise Interrupted(signum)


def installed() -> bool:
    """Whether ``install`` ran (and ``restore`` did not)."""
    return _state["defer"] is not None


def install(defer: bool) -> bool:
    """Handle SIGINT and SIGTERM as the module says; clear ``STOP``; unblock them if the
    parent left them blocked. Returns False (and does nothing) outside the main thread,
    where Python cannot install handlers. With ``defer=False`` a signal left pending by
    the parent raises ``Interrupted`` from here (``restore`` still works)."""
    if threading.current_thread() is not threading.main_thread():
        return False
    STOP.clear()
    _state["saved"] = {s: signal.getsignal(s) for s in SIGNALS}
    _state["blocked"] = None
    _state["defer"] = bool(defer)
    for s in SIGNALS:
        # an ignored signal stays ignored (``cmd &`` in a script: the terminal's Ctrl-C
        # is not for it); ``nohup`` and supervisors leave SIGINT/SIGTERM alone
        if _state["saved"][s] is not signal.SIG_IGN:
            signal.signal(s, _handler)
    if hasattr(signal, "pthread_sigmask"):
        mask = signal.pthread_sigmask(signal.SIG_BLOCK, [])
        blocked = set(mask) & set(SIGNALS)
        if blocked:
            _state["blocked"] = blocked
            signal.pthread_sigmask(signal.SIG_UNBLOCK, blocked)   # a pending one runs now
    return True


def restore() -> None:
    """Put back the handlers (and the blocked signals) ``install`` found."""
    if _state["defer"] is None or threading.current_thread() is not threading.main_thread():
        return
    _state["defer"] = True            # a signal from now on: only STOP
    blocked = _state.pop("blocked", None)
    if blocked:
        signal.pthread_sigmask(signal.SIG_BLOCK, blocked)
    for s, h in _state.pop("saved", {}).items():
        signal.signal(s, h if h is not None else signal.SIG_DFL)
    _state["defer"] = None
