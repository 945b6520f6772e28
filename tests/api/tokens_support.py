"""Google-style ID tokens signed by a key made here, and a certs endpoint that serves it.

The verifier under test is google-auth's, unchanged; only the certificates come from here
instead of Google (the tests run offline).
"""

from __future__ import annotations

import json
import time
from collections.abc import Mapping
from typing import Any

from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import rsa
from google.auth import crypt, jwt, transport

from ackloop.api.tokens import IdTokenVerifier


def _key() -> rsa.RSAPrivateKey:
    return rsa.generate_private_key(public_exponent=65537, key_size=2048)


class _Response(transport.Response):
    def __init__(self, data: bytes) -> None:
        self._data = data

    @property
    def status(self) -> int:
        return 200

    @property
    def headers(self) -> Mapping[str, str]:
        return {"content-type": "application/json"}

    @property
    def data(self) -> bytes:
        return self._data


class CertsEndpoint(transport.Request):
    """Answers the certs URL with this issuer's public keys, by key id."""

    def __init__(self, keys: dict[str, rsa.RSAPrivateKey]) -> None:
        self.keys = keys
        self.calls = 0

    def __call__(self, url: str, method: str = "GET", body: Any = None, headers: Any = None,
                 timeout: Any = None, **kwargs: Any) -> transport.Response:
        self.calls += 1
        certs = {kid: key.public_key().public_bytes(
            serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
        ).decode() for kid, key in self.keys.items()}
        return _Response(json.dumps(certs).encode())


class Issuer:
    """Signs tokens the way Google's issuer does (RS256, ``kid`` header)."""

    def __init__(self) -> None:
        self.key = _key()
        self.certs = CertsEndpoint({"test-kid": self.key})

    def verifier(self, emails: tuple[str, ...] = ()) -> IdTokenVerifier:
        return IdTokenVerifier(emails=emails, request=self.certs)

    def token(self, audience: str, *, key: rsa.RSAPrivateKey | None = None,
              **claims: Any) -> str:
        now = int(time.time())
        payload = {"iss": "https://accounts.google.com", "aud": audience, "sub": "1234",
                   "email": "caller@example.com", "email_verified": True,
                   "iat": now, "exp": now + 600} | claims
        pem = (key or self.key).private_bytes(
            serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption())
        signer = crypt.RSASigner.from_string(pem, key_id="test-kid")
        return jwt.encode(signer, payload).decode()

    @staticmethod
    def other_key() -> rsa.RSAPrivateKey:
        return _key()


def as_forwarded_by_cloud_run(token: str) -> str:
    """The token as the app sees it behind Cloud Run IAM: Cloud Run verified it, then replaced
    its signature."""
    header, claims, _signature = token.split(".")
    return f"{header}.{claims}.SIGNATURE_REMOVED_BY_GOOGLE"
