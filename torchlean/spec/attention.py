"""attention family (in progress)."""

__all__: list[str] = []
