"""The capture CLI in a child process, for the tests that kill, stop or refuse it."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import threading
import time

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


class CliProcess:
    """A child process whose stderr a thread collects line by line (capture's progress
    lines are JSON on stderr)."""

    def __init__(self, args, env=None):
        self.p = subprocess.Popen(args, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                                  env=dict(os.environ, **(env or {})))
        self.lines: list[str] = []
        self._th = threading.Thread(target=self._read, daemon=True)
        self._th.start()

    def _read(self):
        for raw in self.p.stderr:
            self.lines.append(raw.decode(errors="replace"))

    def text(self) -> str:
        return "".join(self.lines)

    def events(self, name) -> list[dict]:
        """The JSON progress records whose ``event`` is ``name``, in order."""
        out = []
        for line in list(self.lines):
            try:
                rec = json.loads(line)
            except ValueError:
                continue
            if isinstance(rec, dict) and rec.get("event") == name:
                out.append(rec)
        return out

    def wait_for(self, text, timeout=120):
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if any(text in line for line in list(self.lines)):
                return
            if self.p.poll() is not None:
                time.sleep(0.2)
                raise AssertionError(f"capture exited ({self.p.returncode}) before {text!r}: "
                                     f"{self.text()[-2000:]}")
            time.sleep(0.05)
        raise AssertionError(f"no {text!r} in {timeout} s: {self.text()[-2000:]}")

    def wait(self, timeout=300):
        """The exit status; a child still running after ``timeout`` seconds is killed and
        the test fails with its last output. (300 s by default: on a loaded 2-core
        machine a restart waits for the killed walsender to release its slot.)"""
        try:
            rc = self.p.wait(timeout)
        except subprocess.TimeoutExpired:
            self.p.kill()
            self.p.wait()
            raise AssertionError(f"capture still running after {timeout} s: {self.text()[-2000:]}")
        self._th.join(10)
        return rc

    def stop(self):
        """SIGTERM, then SIGKILL if it has not exited within 60 s."""
        if self.p.poll() is None:
            self.p.send_signal(signal.SIGTERM)
            try:
                self.p.wait(60)
            except subprocess.TimeoutExpired:
                self.p.kill()
                self.p.wait()


def wait_until(pred, timeout=120, what="condition"):
    """``pred()``'s first true value, polled every 50 ms; AssertionError naming
    ``what`` after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        v = pred()
        if v:
            return v
        time.sleep(0.05)
    raise AssertionError(f"timed out waiting for {what}")
