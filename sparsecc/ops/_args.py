"""Argument helpers shared by the op library."""

from __future__ import annotations

from ..errors import OperandError

_MISSING = object()


def dim_or_axis(axis, dim, op: str, default=_MISSING):
    """The dimension argument of ``op``, given as ``axis`` (NumPy's name) or ``dim``
    (torch's name): passing both is an error, and so is passing neither when there is no
    ``default``.  Checking the value itself is the caller's job."""
    if axis is not None and dim is not None:
        raise OperandError(f"{op}: pass the dimension as axis= (NumPy) or dim= (torch), not both "
                           f"(got axis={axis!r}, dim={dim!r})")
    value = axis if axis is not None else dim
    if value is None:
        if default is _MISSING:
            raise OperandError(f"{op}: a dimension is required (dim= or axis=)")
        return default
    return value


def required(value, name: str, op: str):
    """``value`` of an argument that only has a default so that ``axis=`` can replace the
    positional ``dim`` before it."""
    if value is None:
        raise OperandError(f"{op}: missing the argument {name!r}")
    return value
