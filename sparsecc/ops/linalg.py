"""sparsecc.ops: linalg."""

__all__: list[str] = []
