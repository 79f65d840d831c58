"""A Python client for memmachine's gRPC API: `Memory` (sync) and `AsyncMemory`."""

from .aio import AsyncMemory, AsyncWatch
from .client import Memory, Stubs, Watch
from .cursor import CursorStore, FileCursorStore, MemoryCursorStore
from .errors import (
    Aborted,
    AlreadyExists,
    Cancelled,
    DeadlineExceeded,
    FailedPrecondition,
    Internal,
    InvalidArgument,
    MemMachineError,
    NotFound,
    OutOfRange,
    PermissionDenied,
    ResourceExhausted,
    Unauthenticated,
    Unavailable,
    Unimplemented,
)
from .models import (
    AddResult,
    Change,
    ChangeKind,
    Episode,
    Feature,
    ForgetProject,
    ForgetReceipt,
    ImportFailure,
    ImportSummary,
    Message,
    ScoredEpisode,
    ScoreParts,
    SearchResult,
)
from .retry import RetryPolicy

__version__ = "0.1.0"

__all__ = [
    "Aborted", "AddResult", "AlreadyExists", "AsyncMemory", "AsyncWatch", "Cancelled",
    "Change", "ChangeKind", "CursorStore", "DeadlineExceeded", "Episode",
    "FailedPrecondition", "Feature", "FileCursorStore", "ForgetProject", "ForgetReceipt",
    "ImportFailure", "ImportSummary", "Internal", "InvalidArgument", "MemMachineError",
    "Memory", "MemoryCursorStore", "Message", "NotFound", "OutOfRange", "PermissionDenied",
    "ResourceExhausted", "RetryPolicy", "ScoreParts", "ScoredEpisode", "SearchResult",
    "Stubs", "Unauthenticated", "Unavailable", "Unimplemented", "Watch",
]
