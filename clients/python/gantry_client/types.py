"""TypedDicts of the resources the client returns, one per component schema of the node's OpenAPI
document (SCHEMAS maps each to its component). tests/test_openapi_contract.py checks every key
against the document: a key the document lacks, or a required key the document calls optional,
fails it."""
from __future__ import annotations

from typing import Any, Dict, List, Literal, Optional, TypedDict, Union

TaskStatus = Literal["pending", "waiting", "provisioning", "queued", "running", "completed", "failed", "cancelled"]


class TaskProgress(TypedDict):
    progress: float
    step_current: int
    step_total: int
    current_node: str


class Task(TypedDict):
    task_id: str
    workflow_id: str
    workflow_slug: str
    workflow_version: int
    task_status: TaskStatus
    dispatch_target: Literal["agent", "comfy_cloud"]
    agent_id: Optional[str]
    parameters: Dict[str, Any]
    progress: Optional[TaskProgress]
    attempt: int
    parent_task_id: Optional[str]
    retry_task_id: Optional[str]
    task_error: Optional[str]
    created_at: Optional[str]
    updated_at: Optional[str]
    queued_at: Optional[str]
    started_at: Optional[str]
    finished_at: Optional[str]


class TaskResult(TypedDict):
    task_id: str
    task_status: Literal["completed"]
    download_url: Optional[str]
    download_urls: Optional[Dict[str, str]]
    output: Dict[str, Any]
    expires_at: str


class RunAccepted(TypedDict):
    task_id: str


class _PresignedUploadRequired(TypedDict):
    file_key: str
    upload_url: Optional[str]
    upload_headers: Dict[str, str]


class PresignedUpload(_PresignedUploadRequired, total=False):
    upload_mode: Literal["single", "multipart"]


class _WorkflowRequired(TypedDict):
    id: str
    workflow_slug: str
    display_name: str
    description: str
    parameters: List[Dict[str, Any]]
    tool_type: Literal["comfyui", "nerfstudio"]
    required_labels: List[str]
    task_timeout: int
    max_retries: int
    preferred_gpu: str
    default_dispatch_target: Literal["agent", "comfy_cloud"]
    min_vram_gb: float
    required_models: List[str]
    version: int
    workflow_status: Literal["active", "archived"]
    created_at: str
    updated_at: str


class Workflow(_WorkflowRequired, total=False):
    workflow_json: Dict[str, Any]  # omitted for sk- callers


class WebhookPayload(TypedDict):
    event_type: Literal["task.completed", "task.failed"]
    task_id: str
    task_status: str
    task_output: Dict[str, Any]
    task_error: str
    timestamp: str


class ErrorBody(TypedDict):
    error_message: str
    error_code: str


class TaskEvent(TypedDict):
    """One message of GET /r/tasks/{taskId}/events: `id` is what Last-Event-ID resumes after;
    `event` is status, progress, completed, failed, cancelled or error; `data` its JSON payload
    (components TaskEventStatus, TaskEventProgress, ... of the document's x-sse-events)."""

    id: Optional[str]
    event: str
    data: Dict[str, Any]


class RunResult(TypedDict):
    """What run_and_wait returns: the task id, the finished task and its result (download links)."""

    task_id: str
    task: Task
    result: TaskResult


# TypedDict -> the component schema it mirrors (checked against the document)
SCHEMAS: Dict[str, Any] = {
    "TaskProgress": TaskProgress,
    "Task": Task,
    "TaskResult": TaskResult,
    "RunAccepted": RunAccepted,
    "PresignedUpload": PresignedUpload,
    "Workflow": Workflow,
    "WebhookPayload": WebhookPayload,
    "Error": ErrorBody,
}

JsonValue = Union[None, bool, int, float, str, List[Any], Dict[str, Any]]
