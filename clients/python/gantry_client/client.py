"""The Gantry API over httpx: Gantry (sync) and AsyncGantry (asyncio), the same methods.

    from gantry_client import Gantry
    gantry = Gantry("http://127.0.0.1:8080", "sk-...")         # or GANTRY_URL / GANTRY_API_KEY
    run = gantry.run_and_wait("my-workflow", {"prompt": "a red fox"})
    gantry.download(run["result"]["download_url"], "output.png")

Requests are built from routes.ROUTES and response fields are read through routes.field(), so the
contract test can hold the client to the node's OpenAPI document."""
from __future__ import annotations

import json
import mimetypes
import os
import re
import time
import asyncio
from typing import Any, AsyncIterator, Callable, Dict, Iterator, Optional, Tuple, Union, cast
from urllib.parse import urljoin

import httpx

from .errors import GantryError, TaskFailedError
from .routes import ERROR_READS, RESPONSE_HEADERS, ROUTES, TERMINAL_EVENTS, field, path_of
from .types import PresignedUpload, RunAccepted, RunResult, Task, TaskEvent, TaskResult, Workflow

API_PREFIX = "/api/v1"
DEFAULT_URL = "http://127.0.0.1:8080"
_UUID = re.compile(r"^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$", re.I)

FileSource = Union[str, "os.PathLike[str]", bytes, bytearray]
OnEvent = Callable[[TaskEvent], Any]


def _split_url(url: str) -> Tuple[str, str]:
    """(origin, API base) from a node URL with or without /api/v1."""
    u = url.rstrip("/")
    if u.endswith(API_PREFIX):
        u = u[: -len(API_PREFIX)]
    return u, u + API_PREFIX


def _error_of(resp: httpx.Response) -> GantryError:
    """A GantryError from a non-2xx answer (its body must have been read)."""
    code, message = f"http_{resp.status_code}", resp.reason_phrase or f"HTTP {resp.status_code}"
    try:
        body = resp.json()
    except ValueError:
        body = None
    if isinstance(body, dict):
        got_code, got_message = (body.get(k) for k in ERROR_READS)
        if isinstance(got_code, str):
            code = got_code
        if isinstance(got_message, str):
            message = got_message
    retry_after: Optional[float] = None
    raw = resp.headers.get(RESPONSE_HEADERS[0])
    try:
        retry_after = float(raw) if raw is not None and float(raw) > 0 else None
    except ValueError:
        retry_after = None
    return GantryError(resp.status_code, code, message, retry_after)


def _check(resp: httpx.Response) -> httpx.Response:
    if resp.status_code < 200 or resp.status_code > 299:
        raise _error_of(resp)
    return resp


class _SseParser:
    """text/event-stream lines -> TaskEvent messages (id, event, JSON data)."""

    def __init__(self) -> None:
        self._id: Optional[str] = None
        self._event: Optional[str] = None
        self._data: list = []

    def line(self, raw: str) -> Optional[TaskEvent]:
        line = raw.rstrip("\r\n")
        if line == "":
            if not self._data and self._event is None:
                self._id = None
                return None
            text = "\n".join(self._data)
            try:
                data = json.loads(text)
            except ValueError:
                data = {"message": text}
            ev: TaskEvent = {"id": self._id, "event": self._event or "message", "data": data if isinstance(data, dict) else {"value": data}}
            self._id, self._event, self._data = None, None, []
            return ev
        if line.startswith(":"):
            return None  # a comment (keep-alive)
        name, _, value = line.partition(":")
        if value.startswith(" "):
            value = value[1:]
        if name == "id":
            self._id = value
        elif name == "event":
            self._event = value
        elif name == "data":
            self._data.append(value)
        return None


def _file_parts(source: FileSource, file_name: Optional[str], content_type: Optional[str]) -> Tuple[bytes, str, str]:
    if isinstance(source, (bytes, bytearray)):
        if not file_name:
            raise ValueError("upload_file: file_name is required for bytes")
        data = bytes(source)
    else:
        path = os.fspath(source)
        with open(path, "rb") as f:
            data = f.read()
        file_name = file_name or os.path.basename(path)
    ctype = content_type or mimetypes.guess_type(file_name)[0] or "application/octet-stream"
    return data, file_name, ctype


class _Base:
    def __init__(self, base_url: Optional[str], token: Optional[str], team_id: Optional[str]) -> None:
        self.origin, self.base_url = _split_url(base_url or os.environ.get("GANTRY_URL") or DEFAULT_URL)
        self.token = token if token is not None else os.environ.get("GANTRY_API_KEY")
        self.team_id = team_id

    def _headers(self, extra: Optional[Dict[str, str]] = None) -> Dict[str, str]:
        h: Dict[str, str] = {}
        if self.token:
            h["Authorization"] = f"Bearer {self.token}"
        if self.team_id:
            h["X-Team-ID"] = self.team_id
        h.update(extra or {})
        return h

    def _url(self, name: str, **params: str) -> str:
        return self.base_url + path_of(name, **params)

    def _absolute(self, url: str) -> str:
        return urljoin(self.origin + "/", url)

    def _workflow_route(self, ref: str) -> Tuple[str, str]:
        """(route, url) of GET workflow for a UUID or a slug."""
        if _UUID.match(ref):
            return "get_workflow", self._url("get_workflow", workflowId=ref)
        return "get_workflow_by_slug", self._url("get_workflow_by_slug", workflowSlug=ref)

    def _run_request(self, ref: str, parameters: Optional[Dict[str, Any]], dispatch_target: Optional[str], idempotency_key: Optional[str]) -> Tuple[str, str, Dict[str, Any], Dict[str, str]]:
        if _UUID.match(ref):
            name, url = "run", self._url("run", workflowId=ref)
        else:
            name, url = "run_by_slug", self._url("run_by_slug", workflowSlug=ref)
        body: Dict[str, Any] = {"parameters": parameters or {}}
        if dispatch_target:
            body["dispatch_target"] = dispatch_target
        assert set(body) <= set(ROUTES[name].body)
        headers = self._headers({"Idempotency-Key": idempotency_key} if idempotency_key else None)
        return name, url, body, headers

    def _events_headers(self, last: Optional[str]) -> Dict[str, str]:
        return self._headers({"Accept": "text/event-stream", **({"Last-Event-ID": last} if last is not None else {})})

    @staticmethod
    def _failed(task_id: str, task: Task) -> Optional[TaskFailedError]:
        status = field("get_task", cast(dict, task), "task_status")
        if status == "completed":
            return None
        err = field("get_task", cast(dict, task), "task_error")
        return TaskFailedError(task, f"task {task_id} {status}" + (f": {err}" if err else ""))

    @staticmethod
    def _upload_target(p: PresignedUpload, file_name: str) -> Tuple[str, Dict[str, str]]:
        url = field("presign", cast(dict, p), "upload_url")
        if not url:
            raise GantryError(413, "multipart_required", f"{file_name} is above the single-part upload cap: multipart uploads (/uploads/multipart/*) need a user session")
        return url, dict(field("presign", cast(dict, p), "upload_headers"))


STREAM_TIMEOUT = httpx.Timeout(30.0, read=120.0)  # keep-alive comments arrive every 15 s


class Gantry(_Base):
    """Synchronous client. `base_url`: the node (http://host:8080, with or without /api/v1; default
    $GANTRY_URL); `token`: an sk- integration credential, a dk- device credential or a user JWT
    (default $GANTRY_API_KEY); `team_id`: X-Team-ID for JWT callers."""

    def __init__(self, base_url: Optional[str] = None, token: Optional[str] = None, *, team_id: Optional[str] = None, timeout: float = 30.0, transport: Optional[httpx.BaseTransport] = None) -> None:
        super().__init__(base_url, token, team_id)
        self._http = httpx.Client(timeout=timeout, transport=transport) if transport is not None else httpx.Client(timeout=timeout)

    def close(self) -> None:
        self._http.close()

    def __enter__(self) -> "Gantry":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def get_workflow(self, ref: str) -> Workflow:
        _, url = self._workflow_route(ref)
        return cast(Workflow, _check(self._http.get(url, headers=self._headers())).json())

    def run(self, workflow: str, parameters: Optional[Dict[str, Any]] = None, *, dispatch_target: Optional[str] = None, idempotency_key: Optional[str] = None) -> RunAccepted:
        """Runs a workflow by UUID or slug (slug@version pins a snapshot): {task_id} (202: committed)."""
        _, url, body, headers = self._run_request(workflow, parameters, dispatch_target, idempotency_key)
        return cast(RunAccepted, _check(self._http.post(url, json=body, headers=headers)).json())

    def get_task(self, task_id: str) -> Task:
        return cast(Task, _check(self._http.get(self._url("get_task", taskId=task_id), headers=self._headers())).json())

    def get_result(self, task_id: str) -> TaskResult:
        return cast(TaskResult, _check(self._http.get(self._url("get_result", taskId=task_id), headers=self._headers())).json())

    def cancel(self, task_id: str) -> None:
        _check(self._http.post(self._url("cancel", taskId=task_id), headers=self._headers()))

    def events(self, task_id: str, *, last_event_id: Optional[str] = None, max_reconnects: int = 5, reconnect_delay: float = 1.0) -> Iterator[TaskEvent]:
        """The task's events (SSE) until the terminal one. A dropped stream is resumed with
        Last-Event-ID from the last event seen, up to max_reconnects times."""
        last, reconnects = last_event_id, 0
        url = self._url("events", taskId=task_id)
        while True:
            try:
                with self._http.stream("GET", url, headers=self._events_headers(last), timeout=STREAM_TIMEOUT) as resp:
                    if resp.status_code < 200 or resp.status_code > 299:
                        resp.read()
                        raise _error_of(resp)
                    parser = _SseParser()
                    for line in resp.iter_lines():
                        ev = parser.line(line)
                        if ev is None:
                            continue
                        if ev["id"] is not None:
                            last = ev["id"]
                        yield ev
                        if ev["event"] in TERMINAL_EVENTS:
                            return
            except httpx.TransportError:
                if reconnects >= max_reconnects:
                    raise
            else:
                if reconnects >= max_reconnects:
                    raise GantryError(0, "stream_ended", "the event stream closed before the task finished")
            reconnects += 1
            time.sleep(reconnect_delay)

    def wait(self, task_id: str, *, on_event: Optional[OnEvent] = None) -> Task:
        """Follows the task's events to the end, then returns the task record."""
        for ev in self.events(task_id):
            if on_event is not None:
                on_event(ev)
        return self.get_task(task_id)

    def run_and_wait(self, workflow: str, parameters: Optional[Dict[str, Any]] = None, *, on_event: Optional[OnEvent] = None, dispatch_target: Optional[str] = None, idempotency_key: Optional[str] = None) -> RunResult:
        """Runs and waits: {task_id, task, result}. A failed or cancelled task raises TaskFailedError."""
        task_id = field("run", cast(dict, self.run(workflow, parameters, dispatch_target=dispatch_target, idempotency_key=idempotency_key)), "task_id")
        task = self.wait(task_id, on_event=on_event)
        failed = self._failed(task_id, task)
        if failed is not None:
            raise failed
        return {"task_id": task_id, "task": task, "result": self.get_result(task_id)}

    def upload_file(self, source: FileSource, *, file_name: Optional[str] = None, content_type: Optional[str] = None) -> str:
        """Stages an input file (presign, then PUT with every upload header verbatim): returns the
        file_key, the value of a file parameter in run()."""
        data, name, ctype = _file_parts(source, file_name, content_type)
        body = {"file_name": name, "file_size": len(data), "content_type": ctype}
        p = cast(PresignedUpload, _check(self._http.post(self._url("presign"), json=body, headers=self._headers())).json())
        url, headers = self._upload_target(p, name)
        _check(self._http.put(self._absolute(url), content=data, headers=headers))
        return field("presign", cast(dict, p), "file_key")

    def download(self, url: str, dest: Optional[Union[str, "os.PathLike[str]"]] = None) -> Union[bytes, str]:
        """Fetches a result's download URL (signed: no credential is sent). With dest, writes the
        file there and returns its path; else returns the bytes."""
        if dest is None:
            return _check(self._http.get(self._absolute(url))).content
        path = os.fspath(dest)
        with self._http.stream("GET", self._absolute(url)) as resp:
            if resp.status_code < 200 or resp.status_code > 299:
                resp.read()
                raise _error_of(resp)
            with open(path, "wb") as f:
                for chunk in resp.iter_bytes():
                    f.write(chunk)
        return path

    def download_result(self, task_id: str, dest: Optional[Union[str, "os.PathLike[str]"]] = None) -> Union[bytes, str]:
        """The task's primary output (GET result, then its download_url)."""
        url = field("get_result", cast(dict, self.get_result(task_id)), "download_url")
        if not url:
            raise GantryError(404, "no_download", f"task {task_id} has no single download_url")
        return self.download(url, dest)


class AsyncGantry(_Base):
    """The asyncio client: the same methods as Gantry, awaited (events is an async iterator)."""

    def __init__(self, base_url: Optional[str] = None, token: Optional[str] = None, *, team_id: Optional[str] = None, timeout: float = 30.0, transport: Optional[httpx.AsyncBaseTransport] = None) -> None:
        super().__init__(base_url, token, team_id)
        self._http = httpx.AsyncClient(timeout=timeout, transport=transport) if transport is not None else httpx.AsyncClient(timeout=timeout)

    async def aclose(self) -> None:
        await self._http.aclose()

    async def __aenter__(self) -> "AsyncGantry":
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    async def get_workflow(self, ref: str) -> Workflow:
        _, url = self._workflow_route(ref)
        return cast(Workflow, _check(await self._http.get(url, headers=self._headers())).json())

    async def run(self, workflow: str, parameters: Optional[Dict[str, Any]] = None, *, dispatch_target: Optional[str] = None, idempotency_key: Optional[str] = None) -> RunAccepted:
        _, url, body, headers = self._run_request(workflow, parameters, dispatch_target, idempotency_key)
        return cast(RunAccepted, _check(await self._http.post(url, json=body, headers=headers)).json())

    async def get_task(self, task_id: str) -> Task:
        return cast(Task, _check(await self._http.get(self._url("get_task", taskId=task_id), headers=self._headers())).json())

    async def get_result(self, task_id: str) -> TaskResult:
        return cast(TaskResult, _check(await self._http.get(self._url("get_result", taskId=task_id), headers=self._headers())).json())

    async def cancel(self, task_id: str) -> None:
        _check(await self._http.post(self._url("cancel", taskId=task_id), headers=self._headers()))

    async def events(self, task_id: str, *, last_event_id: Optional[str] = None, max_reconnects: int = 5, reconnect_delay: float = 1.0) -> AsyncIterator[TaskEvent]:
        last, reconnects = last_event_id, 0
        url = self._url("events", taskId=task_id)
        while True:
            try:
                async with self._http.stream("GET", url, headers=self._events_headers(last), timeout=STREAM_TIMEOUT) as resp:
                    if resp.status_code < 200 or resp.status_code > 299:
                        await resp.aread()
                        raise _error_of(resp)
                    parser = _SseParser()
                    async for line in resp.aiter_lines():
                        ev = parser.line(line)
                        if ev is None:
                            continue
                        if ev["id"] is not None:
                            last = ev["id"]
                        yield ev
                        if ev["event"] in TERMINAL_EVENTS:
                            return
            except httpx.TransportError:
                if reconnects >= max_reconnects:
                    raise
            else:
                if reconnects >= max_reconnects:
                    raise GantryError(0, "stream_ended", "the event stream closed before the task finished")
            reconnects += 1
            await asyncio.sleep(reconnect_delay)

    async def wait(self, task_id: str, *, on_event: Optional[OnEvent] = None) -> Task:
        async for ev in self.events(task_id):
            if on_event is not None:
                on_event(ev)
        return await self.get_task(task_id)

    async def run_and_wait(self, workflow: str, parameters: Optional[Dict[str, Any]] = None, *, on_event: Optional[OnEvent] = None, dispatch_target: Optional[str] = None, idempotency_key: Optional[str] = None) -> RunResult:
        task_id = field("run", cast(dict, await self.run(workflow, parameters, dispatch_target=dispatch_target, idempotency_key=idempotency_key)), "task_id")
        task = await self.wait(task_id, on_event=on_event)
        failed = self._failed(task_id, task)
        if failed is not None:
            raise failed
        return {"task_id": task_id, "task": task, "result": await self.get_result(task_id)}

    async def upload_file(self, source: FileSource, *, file_name: Optional[str] = None, content_type: Optional[str] = None) -> str:
        data, name, ctype = _file_parts(source, file_name, content_type)
        body = {"file_name": name, "file_size": len(data), "content_type": ctype}
        p = cast(PresignedUpload, _check(await self._http.post(self._url("presign"), json=body, headers=self._headers())).json())
        url, headers = self._upload_target(p, name)
        _check(await self._http.put(self._absolute(url), content=data, headers=headers))
        return field("presign", cast(dict, p), "file_key")

    async def download(self, url: str, dest: Optional[Union[str, "os.PathLike[str]"]] = None) -> Union[bytes, str]:
        if dest is None:
            return _check(await self._http.get(self._absolute(url))).content
        path = os.fspath(dest)
        async with self._http.stream("GET", self._absolute(url)) as resp:
            if resp.status_code < 200 or resp.status_code > 299:
                await resp.aread()
                raise _error_of(resp)
            with open(path, "wb") as f:
                async for chunk in resp.aiter_bytes():
                    f.write(chunk)
        return path

    async def download_result(self, task_id: str, dest: Optional[Union[str, "os.PathLike[str]"]] = None) -> Union[bytes, str]:
        url = field("get_result", cast(dict, await self.get_result(task_id)), "download_url")
        if not url:
            raise GantryError(404, "no_download", f"task {task_id} has no single download_url")
        return await self.download(url, dest)
