"""What every door shares: TorchServe's header map split, and the answer's status and body."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class Response:
    """One request's answer: HTTP status, reason phrase and JSON body."""

    status: int
    phrase: str
    body: str


@dataclass(frozen=True, slots=True)
class Headers:
    """TorchServe's header map for one request, split.

    Attributes:
        request: request headers (and form fields or gRPC keys, once a door maps them in), names
            in lower case.
        parts: per item key, the part's own Content-Type (multipart; `''` for plain fields).
    """

    request: dict[str, str]
    parts: dict[str, str]

    @classmethod
    def of(cls, headers: Mapping[str, object]) -> Headers:
        """From `context.get_all_request_header(idx)`: str values are request headers, dict
        values `{"content-type": ...}` of an item key."""
        request = {str(k).lower(): v for k, v in headers.items() if isinstance(v, str)}
        parts = {str(k): _part_type(v) for k, v in headers.items() if isinstance(v, Mapping)}
        return cls(request, parts)


def _part_type(value: Mapping[object, object]) -> str:
    found = value.get("content-type")
    return found if isinstance(found, str) else ""
