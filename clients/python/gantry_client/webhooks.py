"""Webhook signature verification, exactly as Gantry signs deliveries: the X-Webhook-Signature-256
header is "sha256=" + the hex HMAC-SHA256 of the raw request body, keyed with the webhook's signing
secret (src/events/dispatcher.ts signBody). Compare over the raw bytes, in constant time."""
from __future__ import annotations

import hashlib
import hmac
from typing import Optional, Union

SIGNATURE_HEADER = "X-Webhook-Signature-256"


def sign_webhook_body(secret: Union[str, bytes], raw_body: Union[str, bytes]) -> str:
    """The header value Gantry sends for this body (useful for tests of a receiver)."""
    key = secret.encode() if isinstance(secret, str) else secret
    body = raw_body.encode() if isinstance(raw_body, str) else raw_body
    return "sha256=" + hmac.new(key, body, hashlib.sha256).hexdigest()


def verify_webhook_signature(secret: Union[str, bytes], raw_body: Union[str, bytes], signature: Optional[str]) -> bool:
    """True when `signature` (the X-Webhook-Signature-256 header) signs `raw_body` (the exact bytes
    received, before any JSON parsing) with `secret`."""
    if not signature or not isinstance(signature, str):
        return False
    want = sign_webhook_body(secret, raw_body)
    got = signature.strip()
    if got[:7].lower() == "sha256=":
        got = "sha256=" + got[7:].lower()
    return hmac.compare_digest(want.encode(), got.encode())
