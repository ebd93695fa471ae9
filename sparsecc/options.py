"""Everything that changes generated code, in one frozen object with a stable key."""

from __future__ import annotations

from dataclasses import asdict, dataclass

from .errors import SparseccError


@dataclass(frozen=True, slots=True)
class Options:
    """``opt_level``: LLVM optimization level (0-3).  ``cpu``: target CPU name for LLVM
    (``None``: this machine's CPU and features)."""

    opt_level: int = 3
    cpu: str | None = None

    def __post_init__(self):
        if self.opt_level not in (0, 1, 2, 3):
            raise SparseccError(f"opt_level must be 0, 1, 2 or 3, got {self.opt_level!r}")

    def key(self) -> str:
        return ",".join(f"{k}={v}" for k, v in sorted(asdict(self).items()))


DEFAULT = Options()
