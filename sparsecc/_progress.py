"""A small progress bar on stderr, without dependencies (``sc.explore`` uses it).

Drawn only on a terminal (``progress=True``) or always (``progress="always"``); one line,
redrawn in place with ``\\r``, finished with a newline.
"""

from __future__ import annotations

import sys
import time


def wanted(progress, stream=None) -> bool:
    """Whether to draw: ``"always"``, or ``True`` and ``stream`` (stderr) is a terminal."""
    if progress == "always":
        return True
    if not progress:
        return False
    stream = stream if stream is not None else sys.stderr
    try:
        return bool(stream.isatty())
    except (AttributeError, ValueError):     # a closed or unusual stream
        return False


class Progress:
    """``with Progress(12, enabled) as bar: bar.step("csr, dense")`` draws
    ``explore [#####.......]  5/12  3.1s  csr, dense``."""

    def __init__(self, total: int, enabled: bool, stream=None, width: int = 24, label: str = "explore"):
        self.total = max(int(total), 1)
        self.enabled = enabled
        self.stream = stream if stream is not None else sys.stderr
        self.width = width
        self.label = label
        self.done = 0
        self.start = time.monotonic()
        self._last_len = 0

    def _draw(self, text: str) -> None:
        if not self.enabled:
            return
        filled = self.width * self.done // self.total
        bar = "#" * filled + "." * (self.width - filled)
        line = (f"{self.label} [{bar}] {self.done:>{len(str(self.total))}}/{self.total} "
                f"{time.monotonic() - self.start:6.1f}s  {text}")
        line = line[:118]
        pad = " " * max(0, self._last_len - len(line))
        self._last_len = len(line)
        try:
            self.stream.write("\r" + line + pad)
            self.stream.flush()
        except (OSError, ValueError):
            self.enabled = False

    def show(self, text: str) -> None:
        """Redraw with ``text`` (what is running now) without advancing."""
        self._draw(text)

    def step(self, text: str = "") -> None:
        """One item finished."""
        self.done = min(self.done + 1, self.total)
        self._draw(text)

    def close(self, text: str = "done") -> None:
        if self.enabled:
            self._draw(text)
            try:
                self.stream.write("\n")
                self.stream.flush()
            except (OSError, ValueError):
                pass
            self.enabled = False

    def __enter__(self):
        self._draw("")
        return self

    def __exit__(self, *exc):
        self.close("done" if exc[0] is None else "interrupted")
        return False
