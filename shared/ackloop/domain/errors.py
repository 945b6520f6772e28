"""The error tree. Its type decides what happens to the Pub/Sub message that caused it.

- :class:`RetryableError`: the step handler answers non-2xx, Pub/Sub redelivers, and the next
  delivery tries again (model 429/5xx, timeouts, Firestore contention, a lease held by another).
- :class:`PermanentError`: the message is acknowledged and the failure is recorded on the run
  (or in the poison collection when no run can be named). Redelivery could not help.
- Tool failures are neither: they become the tool's result, for the model to read.
"""

from __future__ import annotations


class AckloopError(Exception):
    """Base of every error ackloop raises on purpose."""


class DecisionRefused(AckloopError):
    """A decision or an event that cannot be recorded. ``reason`` says why (``not_found``: no
    such run or step, or another owner's; ``already_decided``, ``not_waiting``, ``run_ended``,
    ``already_received``, ``too_many_events``, ``event_gone``: the run is past it;
    ``reserved_event``: the name is the engine's), the message what to fix. Neither retryable
    nor permanent: the caller that asked is told, and nothing is recorded. ``waiting``: the
    wait a step has when the decision was for another kind (which the engine names in that
    kind's words)."""

    def __init__(self, reason: str, message: str, *, waiting: object = None) -> None:
        super().__init__(message)
        self.reason = reason
        self.waiting = waiting


class RetryableError(AckloopError):
    """Redelivery may succeed. ``retry_after`` (seconds) is honoured when known."""

    def __init__(self, message: str, *, retry_after: float | None = None) -> None:
        super().__init__(message)
        self.retry_after = retry_after


class PermanentError(AckloopError):
    """Redelivery cannot help: acknowledge and record ``reason`` where the user will look."""

    def __init__(self, message: str, *, reason: str = "failed") -> None:
        super().__init__(message)
        self.reason = reason


class PoisonMessage(PermanentError):
    """A message that cannot be decoded or validated. Acknowledged and kept in ``poison``."""

    def __init__(self, message: str) -> None:
        super().__init__(message, reason="poison_message")


class UnknownRun(PermanentError):
    """A step message names a run that does not exist."""

    def __init__(self, run_id: str) -> None:
        super().__init__(f"run {run_id!r} does not exist", reason="unknown_run")


class StepConflict(PermanentError):
    """A delivery found a different step recorded at its key: histories must never mix."""

    def __init__(self, message: str) -> None:
        super().__init__(message, reason="step_conflict")


class StepBusy(RetryableError):
    """Another delivery holds a live lease on this step; try again after it expires.

    ``holder`` is the step record as read (its lease, ``not_before`` and the holder's message id).
    """

    def __init__(
        self, message: str, *, retry_after: float | None = None, holder: object = None
    ) -> None:
        super().__init__(message, retry_after=retry_after)
        self.holder = holder


class StepHeldElsewhere(AckloopError):
    """A duplicate delivery of a step that another delivery holds with a live lease.

    Not a failure: the holder's own message stays unacknowledged until it finishes (and is
    redelivered if it dies), so this one is acknowledged instead of being nacked as a timer.
    """


class LeaseLost(RetryableError):
    """Our lease was taken over (it expired); our result must not be committed."""


class StepTaken(AckloopError):
    """An unclaimed step's commit found the step recorded by another delivery (``step``, as
    read): this delivery's result is not recorded; the other's stands."""

    def __init__(self, step: object) -> None:
        super().__init__(f"step {getattr(step, 'key', '?')} was recorded by another delivery")
        self.step = step


class StaleRead(AckloopError):
    """A commit's precondition failed on a document other than the step (the run, the
    conversation or a transcript chunk changed since it was read): read again and decide again."""


class RunKeptChanging(RetryableError):
    """A step read the run again after each commit a change of the run refused, and it kept
    changing: the delivery is tried again later (nothing was written)."""


class ConversationBusy(RetryableError):
    """The conversation has a run in progress; a new turn waits until it ends."""


class ConversationNotStarted(RetryableError):
    """A query continues the conversation of a run (its id is a run id) that does not exist
    yet: its own query has not arrived. The follow-up waits for it (Pub/Sub redelivers), and
    then queues behind that run; the HTTP API answers ``conversation_not_found`` instead."""


class IdempotencyMismatch(PermanentError):
    """A request id was reused with a different body."""

    def __init__(self, message: str) -> None:
        super().__init__(message, reason="idempotency_mismatch")


class ModelRetryableError(RetryableError):
    """The model call may succeed later (429, 5xx, timeout, connection error). ``status``: the
    HTTP status the model answered, when it answered."""

    def __init__(self, message: str, *, retry_after: float | None = None,
                 status: int | None = None) -> None:
        super().__init__(message, retry_after=retry_after)
        self.status = status

    @property
    def quota_exhausted(self) -> bool:
        """A 429: the model's quota (or Vertex AI's shared pool) had no room for the call."""
        return self.status == 429


class ModelPermanentError(PermanentError):
    """The model call cannot succeed as sent (400, safety block, empty or malformed answer)."""

    def __init__(self, message: str, *, reason: str = "model_error") -> None:
        super().__init__(message, reason=reason)
