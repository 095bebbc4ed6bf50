"""Every route the client calls, with what it sends and what it reads. The client builds its
requests from this table (route(...)) and reads response fields only through names declared here;
tests/test_openapi_contract.py checks the table against the node's OpenAPI document (method, path,
sk- security, request body fields, header parameters, success status, response schema, every field
read) and scans the client's source so that no field is read that the table does not declare."""
from __future__ import annotations

from typing import NamedTuple, Optional, Tuple


class Route(NamedTuple):
    method: str
    path: str  # the OpenAPI path template, below /api/v1
    status: int  # the documented success status
    response: Optional[str] = None  # component schema of the JSON answer (None: SSE)
    reads: Tuple[str, ...] = ()  # response fields the client reads
    body: Tuple[str, ...] = ()  # request body fields the client may send
    headers: Tuple[str, ...] = ()  # header parameters the client may send
    events: Tuple[str, ...] = ()  # SSE event names the client handles (x-sse-events)


ROUTES = {
    "get_workflow": Route("GET", "/r/workflows/{workflowId}", 200, "Workflow"),
    "get_workflow_by_slug": Route("GET", "/r/workflows/slug/{workflowSlug}", 200, "Workflow"),
    "run": Route("POST", "/r/workflows/{workflowId}/run", 202, "RunAccepted", reads=("task_id",), body=("parameters", "dispatch_target"), headers=("Idempotency-Key",)),
    "run_by_slug": Route("POST", "/r/workflows/slug/{workflowSlug}/run", 202, "RunAccepted", reads=("task_id",), body=("parameters", "dispatch_target"), headers=("Idempotency-Key",)),
    "get_task": Route("GET", "/r/tasks/{taskId}", 200, "Task", reads=("task_status", "task_error")),
    "get_result": Route("GET", "/r/tasks/{taskId}/result", 200, "TaskResult", reads=("download_url",)),
    "cancel": Route("POST", "/r/tasks/{taskId}/cancel", 200, "Success"),
    "events": Route("GET", "/r/tasks/{taskId}/events", 200, None, headers=("Last-Event-ID",), events=("status", "progress", "completed", "failed", "cancelled", "error")),
    "presign": Route("POST", "/r/files/presign", 200, "PresignedUpload", reads=("file_key", "upload_url", "upload_headers"), body=("file_name", "file_size", "content_type")),
}

# the error envelope of every non-2xx answer (component Error)
ERROR_SCHEMA = "Error"
ERROR_READS = ("error_code", "error_message")

# response headers the client reads (Retry-After of a 429 or 503)
RESPONSE_HEADERS = ("retry-after",)

# SSE events after which the stream ends
TERMINAL_EVENTS = ("completed", "failed", "cancelled")


def path_of(name: str, **params: str) -> str:
    """The route's path with its {placeholders} filled (each value URL-encoded)."""
    from urllib.parse import quote

    p = ROUTES[name].path
    for k, v in params.items():
        token = "{" + k + "}"
        if token not in p:
            raise KeyError(f"{name}: no path parameter {k}")
        p = p.replace(token, quote(str(v), safe=""))
    if "{" in p:
        raise KeyError(f"{name}: path parameter missing in {p}")
    return p


def field(route: str, data: dict, name: str):
    """Reads a response field the table declares for the route (KeyError for an undeclared one)."""
    if name not in ROUTES[route].reads:
        raise KeyError(f"{route}: field {name} is not declared in ROUTES")
    return data[name]
