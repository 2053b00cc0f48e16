"""Verifies one delivered webhook request as a receiver would, with the
standardwebhooks library (symmetric v1) and cryptography (Ed25519 v1a).

Reads {"body", "headers", "secrets": [whsec_...], "public_keys": [whpk_...]}
on stdin; prints {"secrets": [bool, ...], "public_keys": [bool, ...]}: for
each secret or key, whether the request verifies with it.
"""

import base64
import json
import sys

from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey
from standardwebhooks.webhooks import Webhook, WebhookVerificationError


def verifies_hmac(secret, body, headers):
    try:
        Webhook(secret).verify(body, headers)
        return True
    except WebhookVerificationError:
        return False


def verifies_ed25519(public_key, body, headers):
    key = Ed25519PublicKey.from_public_bytes(base64.b64decode(public_key.removeprefix("whpk_")))
    signed = f"{headers['webhook-id']}.{headers['webhook-timestamp']}.{body}".encode()
    for entry in headers["webhook-signature"].split(" "):
        version, signature = entry.split(",", 1)
        if version != "v1a":
            continue
        try:
            key.verify(base64.b64decode(signature), signed)
            return True
        except InvalidSignature:
            pass
    return False


request = json.load(sys.stdin)
body, headers = request["body"], request["headers"]
print(json.dumps({
    "secrets": [verifies_hmac(s, body, headers) for s in request["secrets"]],
    "public_keys": [verifies_ed25519(k, body, headers) for k in request["public_keys"]],
}))
