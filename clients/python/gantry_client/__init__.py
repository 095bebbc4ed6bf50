"""gantry-client: the Python client of the Gantry API (sync Gantry, asyncio AsyncGantry), on httpx."""
from .client import AsyncGantry, Gantry
from .errors import GantryError, TaskFailedError
from .routes import ROUTES, Route
from .types import PresignedUpload, RunAccepted, RunResult, Task, TaskEvent, TaskProgress, TaskResult, TaskStatus, WebhookPayload, Workflow
from .webhooks import SIGNATURE_HEADER, sign_webhook_body, verify_webhook_signature

__version__ = "0.1.0"
__all__ = [
    "AsyncGantry",
    "Gantry",
    "GantryError",
    "TaskFailedError",
    "ROUTES",
    "Route",
    "PresignedUpload",
    "RunAccepted",
    "RunResult",
    "Task",
    "TaskEvent",
    "TaskProgress",
    "TaskResult",
    "TaskStatus",
    "WebhookPayload",
    "Workflow",
    "SIGNATURE_HEADER",
    "sign_webhook_body",
    "verify_webhook_signature",
]
