"""Placeholder while the family is being written (issue 2)."""

__all__: list[str] = []
