"""sparsecc.ops: reductions."""

__all__: list[str] = []
