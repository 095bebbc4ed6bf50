"""Exceptions: every non-2xx answer of the API is a GantryError carrying the error envelope's
error_code and error_message and the HTTP status."""
from __future__ import annotations

from typing import Any, Optional


class GantryError(Exception):
    """A non-2xx answer: `status` (HTTP), `error_code` (stable lower_snake code, e.g.
    invalid_parameter, task_not_found), `error_message`, `retry_after` (seconds, 429/503)."""

    def __init__(self, status: int, error_code: str, error_message: str, retry_after: Optional[float] = None) -> None:
        super().__init__(f"{status} {error_code}: {error_message}")
        self.status = status
        self.error_code = error_code
        self.error_message = error_message
        self.retry_after = retry_after


class TaskFailedError(GantryError):
    """run_and_wait on a task that ended failed or cancelled: `task` is the task record."""

    def __init__(self, task: Any, message: str) -> None:
        status = task.get("task_status", "failed") if isinstance(task, dict) else "failed"
        super().__init__(0, f"task_{status}", message)
        self.task = task
