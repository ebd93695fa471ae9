"""sparsecc.ops: structural."""

__all__: list[str] = []
