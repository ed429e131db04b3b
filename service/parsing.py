"""Request bodies as data: validation and size limits, shared by the HTTP API and the
stream ingester (neither knows the other)."""

from __future__ import annotations

from typing import TypeVar

from pydantic import BaseModel, ValidationError

__all__ = ["BodyValidationError", "PayloadTooLarge", "check_count", "validate_json"]

M = TypeVar("M", bound=BaseModel)


class PayloadTooLarge(Exception):
    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


class BodyValidationError(Exception):
    def __init__(self, exc: ValidationError) -> None:
        super().__init__(str(exc))
        self.errors = exc.errors(include_url=False)


def check_count(n: int, noun: str, limit: int) -> None:
    """Refuse (413) a request carrying more than ``limit`` events or items."""
    if n > limit:
        raise PayloadTooLarge(f"{n} {noun} exceed the limit of {limit} per request.")


def validate_json(body: bytes, model: type[M]) -> M:
    """``body`` validated as ``model``; a 422 naming every bad field otherwise."""
    try:
        return model.model_validate_json(body)
    except ValidationError as exc:
        raise BodyValidationError(exc) from None
