"""sparsecc.ops: elementwise."""

__all__: list[str] = []
