"""Typed exceptions for gRPC failures, with the google.rpc.Status details decoded."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import TypeVar

import grpc
from google.protobuf import any_pb2
from google.protobuf.message import Message as ProtoMessage
from google.rpc import error_details_pb2, status_pb2

_DETAIL_TYPES: tuple[type[ProtoMessage], ...] = (
    error_details_pb2.ErrorInfo,
    error_details_pb2.BadRequest,
    error_details_pb2.RetryInfo,
    error_details_pb2.QuotaFailure,
    error_details_pb2.PreconditionFailure,
    error_details_pb2.ResourceInfo,
    error_details_pb2.RequestInfo,
    error_details_pb2.DebugInfo,
    error_details_pb2.Help,
    error_details_pb2.LocalizedMessage,
)

_M = TypeVar("_M", bound=ProtoMessage)


class MemMachineError(Exception):
    """A call failed. `code` is the gRPC status, `details` the decoded google.rpc details."""

    code: grpc.StatusCode = grpc.StatusCode.UNKNOWN

    def __init__(
        self,
        text: str,
        *,
        code: grpc.StatusCode | None = None,
        details: Sequence[ProtoMessage] = (),
        pushback_ms: int | None = None,
    ) -> None:
        super().__init__(text)
        self.message = text
        if code is not None:
            self.code = code
        self.details: tuple[ProtoMessage, ...] = tuple(details)
        # grpc-retry-pushback-ms (gRFC A6): the server's wait; negative: do not retry.
        self.pushback_ms = pushback_ms

    def __str__(self) -> str:
        return f"{self.code.name}: {self.message}"

    def detail(self, kind: type[_M]) -> _M | None:
        """The first detail of this type (e.g. `error_details_pb2.ErrorInfo`), or None."""
        for d in self.details:
            if isinstance(d, kind):
                return d
        return None

    @property
    def reason(self) -> str | None:
        """ErrorInfo.reason, when the server sent one."""
        info = self.detail(error_details_pb2.ErrorInfo)
        return info.reason if info is not None else None

    @property
    def error_metadata(self) -> dict[str, str]:
        """ErrorInfo.metadata (e.g. `resume_after` for a pruned cursor)."""
        info = self.detail(error_details_pb2.ErrorInfo)
        return dict(info.metadata) if info is not None else {}

    @property
    def field_violations(self) -> list[tuple[str, str]]:
        """(field, description) of every BadRequest violation."""
        bad = self.detail(error_details_pb2.BadRequest)
        if bad is None:
            return []
        return [(v.field, v.description) for v in bad.field_violations]

    @property
    def retry_delay(self) -> float | None:
        """RetryInfo.retry_delay in seconds, when the server said when to retry."""
        info = self.detail(error_details_pb2.RetryInfo)
        if info is None or not info.HasField("retry_delay"):
            return None
        return info.retry_delay.seconds + info.retry_delay.nanos / 1e9


class Cancelled(MemMachineError):
    code = grpc.StatusCode.CANCELLED


class InvalidArgument(MemMachineError):
    code = grpc.StatusCode.INVALID_ARGUMENT


class DeadlineExceeded(MemMachineError):
    code = grpc.StatusCode.DEADLINE_EXCEEDED


class NotFound(MemMachineError):
    code = grpc.StatusCode.NOT_FOUND


class AlreadyExists(MemMachineError):
    code = grpc.StatusCode.ALREADY_EXISTS


class PermissionDenied(MemMachineError):
    code = grpc.StatusCode.PERMISSION_DENIED


class ResourceExhausted(MemMachineError):
    code = grpc.StatusCode.RESOURCE_EXHAUSTED


class FailedPrecondition(MemMachineError):
    code = grpc.StatusCode.FAILED_PRECONDITION


class Aborted(MemMachineError):
    code = grpc.StatusCode.ABORTED


class OutOfRange(MemMachineError):
    code = grpc.StatusCode.OUT_OF_RANGE


class Unimplemented(MemMachineError):
    code = grpc.StatusCode.UNIMPLEMENTED


class Internal(MemMachineError):
    code = grpc.StatusCode.INTERNAL


class Unavailable(MemMachineError):
    code = grpc.StatusCode.UNAVAILABLE


class Unauthenticated(MemMachineError):
    code = grpc.StatusCode.UNAUTHENTICATED


_BY_CODE: dict[grpc.StatusCode, type[MemMachineError]] = {
    cls.code: cls
    for cls in (
        Cancelled, InvalidArgument, DeadlineExceeded, NotFound, AlreadyExists,
        PermissionDenied, ResourceExhausted, FailedPrecondition, Aborted, OutOfRange,
        Unimplemented, Internal, Unavailable, Unauthenticated,
    )
}


def _unpack(any_detail: any_pb2.Any) -> ProtoMessage:
    for kind in _DETAIL_TYPES:
        if any_detail.TypeName() == kind.DESCRIPTOR.full_name:
            out = kind()
            any_detail.Unpack(out)
            return out
    return any_detail  # an unknown type stays packed


def from_status(
    code: grpc.StatusCode,
    text: str,
    trailers: Iterable[tuple[str, str | bytes]] | None,
) -> MemMachineError:
    """The typed exception for a status and its trailing metadata."""
    details: list[ProtoMessage] = []
    pushback: int | None = None
    for key, value in trailers or ():
        if key == "grpc-status-details-bin" and isinstance(value, bytes):
            status = status_pb2.Status.FromString(value)
            details.extend(_unpack(d) for d in status.details)
        elif key == "grpc-retry-pushback-ms":
            try:
                pushback = int(value)
            except ValueError:
                pass
    cls = _BY_CODE.get(code, MemMachineError)
    return cls(text, code=code, details=details, pushback_ms=pushback)


def from_rpc_error(error: grpc.RpcError) -> MemMachineError:
    """Converts a grpc error (sync `grpc.Call` or `grpc.aio.AioRpcError`) to a typed one."""
    if isinstance(error, grpc.aio.AioRpcError):
        return from_status(error.code(), error.details() or "", error.trailing_metadata())
    if isinstance(error, grpc.Call):
        return from_status(error.code(), error.details() or "", error.trailing_metadata())
    return MemMachineError(str(error))
