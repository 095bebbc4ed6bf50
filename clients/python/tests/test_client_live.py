"""gantry-client against a real node and a simulate agent. test/clients/python.test.ts starts them
and sets GANTRY_URL, GANTRY_API_KEY (an sk-), GANTRY_TEST_WORKFLOW (a workflow with a `prompt` and a
file parameter `image`) and a webhook body signed by Gantry's own signer (GANTRY_TEST_WEBHOOK_*)."""
from __future__ import annotations

import asyncio
import os
import uuid

import httpx
import pytest

from gantry_client import AsyncGantry, Gantry, GantryError, sign_webhook_body, verify_webhook_signature

URL = os.environ.get("GANTRY_URL")
pytestmark = pytest.mark.skipif(not URL, reason="GANTRY_URL is not set: run through test/clients/python.test.ts (a real node and agent)")

PNG_SIG = b"\x89PNG\r\n\x1a\n"
TINY_PNG = bytes.fromhex(
    "89504e470d0a1a0a0000000d4948445200000001000000010806000000"
    "1f15c4890000000d49444154789c6360000002000154a24f5d0000000049454e44ae426082"
)


def workflow() -> str:
    return os.environ["GANTRY_TEST_WORKFLOW"]


class Recorder(httpx.HTTPTransport):
    """Records every request; optionally cuts the first event stream after its first message."""

    def __init__(self, cut_first_stream: bool = False) -> None:
        super().__init__()
        self.requests: list = []
        self.presigned: list = []
        self.cut = cut_first_stream

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        self.requests.append(request)
        resp = super().handle_request(request)
        if request.url.path.endswith("/r/files/presign"):
            resp.read()
            self.presigned.append(resp.json())
        if self.cut and request.url.path.endswith("/events"):
            self.cut = False
            text = resp.read().decode()
            first = text[: text.index("\n\n", text.index("data:")) + 2]
            return httpx.Response(200, headers={"content-type": "text/event-stream"}, content=first.encode())
        return resp


def test_sync_upload_run_and_wait_download(tmp_path):
    rec = Recorder()
    with Gantry(URL, os.environ["GANTRY_API_KEY"], transport=rec) as gantry:
        src = tmp_path / "in.png"
        src.write_bytes(TINY_PNG)
        file_key = gantry.upload_file(src)
        assert file_key
        # presign, then a PUT carrying every upload header verbatim and no credential
        put = next(r for r in rec.requests if r.method == "PUT")
        presign = next(r for r in rec.requests if r.url.path.endswith("/r/files/presign"))
        assert presign.headers["authorization"] == f"Bearer {os.environ['GANTRY_API_KEY']}"
        assert "authorization" not in put.headers
        assert put.content == TINY_PNG
        assert str(put.url) == rec.presigned[0]["upload_url"]
        assert rec.presigned[0]["upload_headers"], "the node signs some headers"
        for k, v in rec.presigned[0]["upload_headers"].items():
            assert put.headers.get(k) == v, (k, v, dict(put.headers))

        events = []
        run = gantry.run_and_wait(workflow(), {"prompt": "a red fox", "image": file_key}, on_event=events.append)
        assert run["task"]["task_status"] == "completed"
        assert run["task"]["parameters"]["image"] == file_key, "the run carries the staged file"
        assert events[-1]["event"] == "completed" and events[-1]["data"]["task_id"] == run["task_id"]
        assert any(e["event"] == "progress" for e in events), events
        assert all(e["id"] and e["id"].isdigit() for e in events), events
        # the result downloads: bytes, and to a file
        url = run["result"]["download_url"]
        assert url
        assert gantry.download(url)[:8] == PNG_SIG
        out = gantry.download_result(run["task_id"], tmp_path / "out.png")
        assert open(out, "rb").read()[:8] == PNG_SIG
        assert gantry.get_workflow(workflow())["workflow_slug"] == workflow()


def test_async_upload_run_and_wait_download():
    async def main():
        async with AsyncGantry(URL, os.environ["GANTRY_API_KEY"]) as gantry:
            file_key = await gantry.upload_file(TINY_PNG, file_name="async.png")
            events = []
            run = await gantry.run_and_wait(workflow(), {"prompt": "an async fox", "image": file_key}, on_event=events.append)
            assert run["task"]["task_status"] == "completed"
            assert events[-1]["event"] == "completed"
            data = await gantry.download(run["result"]["download_url"])
            assert data[:8] == PNG_SIG
            # resume after the first event (async)
            resumed = [e async for e in gantry.events(run["task_id"], last_event_id=events[0]["id"])]
            assert [e["id"] for e in resumed] == [e["id"] for e in events[1:]]
            with pytest.raises(GantryError) as e:
                await gantry.get_task(str(uuid.uuid4()))
            assert e.value.status == 404 and e.value.error_code == "task_not_found"

    asyncio.run(main())


def test_sse_resume_with_last_event_id():
    with Gantry(URL, os.environ["GANTRY_API_KEY"]) as gantry:
        task_id = gantry.run(workflow(), {"prompt": "resume"})["task_id"]
        full = list(gantry.events(task_id))
        assert full[-1]["event"] == "completed" and len(full) >= 3, full
        # an explicit Last-Event-ID replays what follows it, nothing twice
        resumed = list(gantry.events(task_id, last_event_id=full[0]["id"]))
        assert [e["id"] for e in resumed] == [e["id"] for e in full[1:]]
    # a dropped stream reconnects with Last-Event-ID of the last event seen
    rec = Recorder(cut_first_stream=True)
    with Gantry(URL, os.environ["GANTRY_API_KEY"], transport=rec) as flaky:
        via_drop = list(flaky.events(task_id, last_event_id=full[0]["id"], reconnect_delay=0.01))
    sent = [r.headers.get("last-event-id") for r in rec.requests if r.url.path.endswith("/events")]
    assert sent == [full[0]["id"], via_drop[0]["id"]], sent
    assert [e["id"] for e in via_drop] == [e["id"] for e in resumed], "the same events, none twice"


def test_errors_are_exceptions_with_error_code():
    with Gantry(URL, os.environ["GANTRY_API_KEY"]) as gantry:
        with pytest.raises(GantryError) as e:
            gantry.run(workflow(), {"no_such_parameter": 1})
        assert e.value.status == 400 and e.value.error_code and e.value.error_message
        with pytest.raises(GantryError) as e:
            gantry.get_task(str(uuid.uuid4()))
        assert (e.value.status, e.value.error_code) == (404, "task_not_found")
    with Gantry(URL, "sk-not-a-real-credential") as bad:
        with pytest.raises(GantryError) as e:
            bad.get_task(str(uuid.uuid4()))
        assert e.value.status == 401 and e.value.error_code == "credential_invalid"


def test_webhook_signature_from_gantrys_signer():
    secret = os.environ["GANTRY_TEST_WEBHOOK_SECRET"]
    body = os.environ["GANTRY_TEST_WEBHOOK_BODY"].encode()
    signature = os.environ["GANTRY_TEST_WEBHOOK_SIGNATURE"]  # src/events signBody
    assert verify_webhook_signature(secret, body, signature)
    assert verify_webhook_signature(secret, body.decode(), signature)
    assert sign_webhook_body(secret, body) == signature
    assert not verify_webhook_signature("another-secret", body, signature)
    assert not verify_webhook_signature(secret, body + b" ", signature)
    assert not verify_webhook_signature(secret, body, None)
    assert not verify_webhook_signature(secret, body, "sha256=" + "0" * 64)
