"""Dependencies written once: settings, the model host, auth, raw JSON bodies."""

from __future__ import annotations

import hmac
from typing import Annotated, Any, TypeVar

from fastapi import Depends, HTTPException, Request, Security
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer
from pydantic import BaseModel

from ..hosting import ModelHost
from ..parsing import BodyValidationError, PayloadTooLarge, check_count, validate_json
from ..settings import Settings

__all__ = [
    "BodyValidationError",
    "HostDep",
    "PayloadTooLarge",
    "ReadAuth",
    "SettingsDep",
    "WriteAuth",
    "check_count",
    "json_body",
    "key_allows",
    "read_body",
    "validate_json",
]

M = TypeVar("M", bound=BaseModel)


async def get_settings_dep(request: Request) -> Settings:
    return request.app.state.settings


async def get_host(request: Request) -> ModelHost:
    return request.app.state.host


SettingsDep = Annotated[Settings, Depends(get_settings_dep)]
HostDep = Annotated[ModelHost, Depends(get_host)]


def _bearer(header: str) -> str | None:
    scheme, _, token = header.partition(" ")
    if scheme.lower() != "bearer" or not token:
        return None
    return token.strip()


def _matches(token: str, keys: frozenset[str]) -> bool:
    # compare_digest against every key: the time taken does not depend on which matched.
    found = False
    for key in keys:
        found |= hmac.compare_digest(token.encode(), key.encode())
    return found


def key_allows(authorization: str, settings: Settings, write: bool) -> bool:
    """Whether an ``Authorization`` header value carries a key allowed to write
    (``write``) or to read; the route's dependency words the refusals."""
    token = _bearer(authorization)
    if token is None:
        return False
    if _matches(token, settings.write_key_set()):
        return True
    return not write and _matches(token, settings.read_key_set())


def _authorize(request: Request, settings: Settings, write: bool) -> None:
    if not settings.auth_enabled:
        return
    token = _bearer(request.headers.get("authorization", ""))
    if token is None:
        raise HTTPException(401, "Missing bearer token: send 'Authorization: Bearer <key>'.",
                            headers={"WWW-Authenticate": "Bearer"})
    if _matches(token, settings.write_key_set()):
        return
    if _matches(token, settings.read_key_set()):
        if write:
            raise HTTPException(403, "This key may read and score but not write.")
        return
    raise HTTPException(401, "Invalid API key.", headers={"WWW-Authenticate": "Bearer"})


# Declared so that the OpenAPI document has a bearer scheme (Swagger's "Authorize"
# button); the check itself is _authorize's.
_bearer_scheme = HTTPBearer(auto_error=False, scheme_name="bearer",
                            description="a key of AUCSTREAM_API_KEYS (or, to read and "
                            "score, AUCSTREAM_READ_KEYS); needed only when keys are set")
Bearer = Annotated[HTTPAuthorizationCredentials | None, Security(_bearer_scheme)]


async def require_read(request: Request, settings: SettingsDep, _: Bearer) -> None:
    _authorize(request, settings, write=False)


async def require_write(request: Request, settings: SettingsDep, _: Bearer) -> None:
    _authorize(request, settings, write=True)


ReadAuth = Depends(require_read)
WriteAuth = Depends(require_write)


async def read_body(request: Request, limit: int) -> bytes:
    """The raw body, refusing more than ``limit`` bytes (413) before reading them all.

    /learn and /score parse the raw bytes themselves (a numba fast path, else pydantic's
    JSON parser): FastAPI's default body handling is the slowest part of a 500-event batch.
    """
    declared = request.headers.get("content-length")
    if declared is not None and declared.isdigit() and int(declared) > limit:
        raise PayloadTooLarge(f"Request body of {declared} bytes exceeds the limit of {limit}.")
    chunks = []
    size = 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > limit:
            raise PayloadTooLarge(f"Request body exceeds the limit of {limit} bytes.")
        chunks.append(chunk)
    return b"".join(chunks)


def json_body(model: type[BaseModel]) -> dict[str, Any]:
    """``openapi_extra`` documenting a JSON body that the handler parses itself."""
    return {
        "requestBody": {
            "required": True,
            "content": {
                "application/json": {
                    "schema": {"$ref": f"#/components/schemas/{model.__name__}"}
                }
            },
        }
    }
