"""Retries of the calls an attempt id makes safe to send again. A purchase or a cancel whose
answer was lost (a timeout, a dropped connection, a failover in progress) is sent again with
the same attempt id until a definite answer, with jittered exponential backoff, for as long as
the caller allows; then the caller gets ``OutcomeUnknownError`` with the id, and can ask
``bought`` what happened, or ``UnavailableError`` when no send of it ever reached a server
(then it did not happen). The same rules as the Rust crate's ``retry.rs``."""

from __future__ import annotations

import random
import time
from dataclasses import dataclass
from typing import Any

import redis

from ._effects import Effect, Operation, Sleep
from ._health import NotSentError
from ._observe import retried
from .errors import OutcomeUnknownError, UnavailableError

# MOVED and ASK are the redis-py cluster client's to follow; one that reaches the package ran
# nothing, and the next send goes where the client has learned since.
#: NOREPLICAS: a master under min-replicas-to-write refused the write (its replicas are away,
#: as after a failover until one resynchronises); nothing ran. UNBLOCKED: a blocked call (a
#: lock's wait, a WAIT) was let go without its answer, as a master turning replica does.
_RETRYABLE_CODES = ("TRYAGAIN", "CLUSTERDOWN", "LOADING", "READONLY", "MASTERDOWN", "NOREPLICAS", "UNBLOCKED",
                    "MOVED", "ASK")


@dataclass(frozen=True)
class RetryPolicy:
    """How long and how often a call with an attempt id is tried again: ``deadline_s`` from
    the first send, waits from ``first_backoff_s`` doubling up to ``max_backoff_s``. The
    default, 40 s, outlasts a replica's promotion after its master died on a cluster with
    Redis's default ``cluster-node-timeout`` of 15 s (about 19 s measured; size it as twice
    the node timeout plus 10 s: docs/clients.md, "Retries")."""

    deadline_s: float = 40.0
    first_backoff_s: float = 0.01
    max_backoff_s: float = 1.0

    @classmethod
    def none(cls) -> "RetryPolicy":
        """No retries: the first failure is the answer."""
        return cls(deadline_s=0.0)


def may_have_run(error: BaseException) -> bool:
    """Whether a call that failed with ``error`` may have run: it was written to a connection
    that then failed or timed out, or its write answered and the wait after it was refused by
    a master turned replica since (``turned_replica``). A call never sent (``NotSentError``) or
    refused by the server without running (TRYAGAIN, MOVED, ...: an error reply) did not."""
    if turned_replica(error):
        return True
    return isinstance(error, (redis.exceptions.ConnectionError, redis.exceptions.TimeoutError)) and not isinstance(
        error, NotSentError
    )


def turned_replica(error: BaseException) -> bool:
    """A WAIT (or WAITAOF) refused because its node turned replica after the write it follows
    answered (a failover between the two: Redis and Valkey answer ``ERR WAIT cannot be used
    with replica instances``): the write ran, and whether the new master has it, the same write
    sent again under its attempt id tells."""
    return isinstance(error, redis.exceptions.ResponseError) and "cannot be used with replica instances" in str(error)


def is_retryable(error: BaseException) -> bool:
    """Whether the call may have run or not, and sending it again may get an answer: the
    connection failed or timed out, or the cluster is moving a slot or electing a master."""
    if isinstance(error, (redis.exceptions.ConnectionError, redis.exceptions.TimeoutError)) or turned_replica(error):
        return True
    retryable_types = tuple(
        getattr(redis.exceptions, name)
        # AskError: MOVED too (its subclass), raised by the lock's own connections.
        for name in ("ClusterDownError", "TryAgainError", "ReadOnlyError", "MasterDownError", "AskError")
        if hasattr(redis.exceptions, name)
    )
    if isinstance(error, retryable_types):
        return True
    # The cluster client lost a node and could not reach any to learn the slots again (a
    # master just killed): the call may have run; once a replica is promoted it answers.
    if isinstance(error, redis.exceptions.RedisClusterException) and "cannot be connected" in str(error):
        return True
    return isinstance(error, redis.exceptions.ResponseError) and str(error).startswith(_RETRYABLE_CODES)


class Retrier:
    """The retries of one call under one attempt id, all within one deadline."""

    def __init__(self, policy: RetryPolicy, attempt_id: str) -> None:
        self.policy = policy
        self.attempt_id = attempt_id
        self._start = time.monotonic()
        self._next = policy.first_backoff_s
        self.retries = 0
        #: Whether a send of the call may have run (see ``may_have_run``).
        self.may_have_run = False

    def backoff(self, failure: BaseException, of_the_call: bool = True) -> float:
        """The wait before trying again after ``failure`` (a random time in the upper half of
        the current backoff, so clients that failed together do not come back together), or,
        past the deadline, ``OutcomeUnknownError`` (``UnavailableError`` when no send of the
        call may have run). ``of_the_call``: the failure was the call's own send (not a step
        between two sends, such as a borrow, that runs nothing of it)."""
        self.may_have_run |= of_the_call and may_have_run(failure)
        ceiling = self._next
        self._next = min(self._next * 2, self.policy.max_backoff_s)
        wait = ceiling / 2 + random.random() * ceiling / 2
        if time.monotonic() - self._start + wait > self.policy.deadline_s:
            if not self.may_have_run:
                raise UnavailableError(self.attempt_id, failure) from failure
            raise OutcomeUnknownError(self.attempt_id, failure) from failure
        self.retries += 1
        retried()
        return wait


def retried_effect(retrier: Retrier, effect: Effect) -> Operation[Any]:
    """``effect`` under ``retrier``: a retryable failure is sent again after a backoff while the
    deadline allows, then becomes ``OutcomeUnknownError``."""
    while True:
        try:
            return (yield effect)
        except Exception as error:  # noqa: BLE001 - sorted right below
            if not is_retryable(error):
                raise
            yield Sleep(retrier.backoff(error))
