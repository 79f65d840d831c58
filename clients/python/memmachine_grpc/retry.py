"""When a failed call is tried again: jittered exponential backoff, bounded attempts."""

from __future__ import annotations

import random
from dataclasses import dataclass, field

import grpc

from .errors import MemMachineError

_RETRYABLE = frozenset({grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.RESOURCE_EXHAUSTED})


@dataclass(frozen=True)
class RetryPolicy:
    """Applies to reads and adds only (adds carry idempotency keys); never to deletes."""

    # Tries in all, the first included; 1 disables retries.
    attempts: int = 4
    initial_backoff: float = 0.1
    max_backoff: float = 2.0
    multiplier: float = 2.0
    codes: frozenset[grpc.StatusCode] = field(default=_RETRYABLE)

    def backoff(self, attempt: int, error: MemMachineError | None = None) -> float:
        """The wait after failed try number `attempt` (from 0): full jitter, at least
        what the server asked for (RetryInfo or grpc-retry-pushback-ms)."""
        cap = min(self.max_backoff, self.initial_backoff * self.multiplier**attempt)
        wait = random.uniform(cap / 2, cap)
        if error is not None:
            hint = error.retry_delay
            if hint is None and error.pushback_ms is not None and error.pushback_ms > 0:
                hint = error.pushback_ms / 1000
            if hint is not None:
                wait = max(wait, hint)
        return wait

    def delay(self, attempt: int, error: MemMachineError) -> float | None:
        """Seconds to wait before trying again after failed try `attempt`; None: give up."""
        if error.code not in self.codes or attempt + 1 >= self.attempts:
            return None
        if error.pushback_ms is not None and error.pushback_ms < 0:
            return None  # the server says waiting will not help
        return self.backoff(attempt, error)


def policy(retries: RetryPolicy | int) -> RetryPolicy:
    """`retries` as given to a client: a policy, or how many retries after the first try."""
    if isinstance(retries, RetryPolicy):
        return retries
    return RetryPolicy(attempts=max(0, retries) + 1)
