"""Secrets at rest (Hub tokens): Fernet, i.e. AES-128-CBC with an HMAC-SHA256, from `cryptography`.

The key comes from NBL_SECRET_KEY (one Fernet key, or several comma-separated: the first encrypts,
all decrypt, so a key can be rotated). Without it, the embedded default generates one key file,
$NBL_HOME/secret.key, mode 0600, shared by the API and the worker of that home. A deployment with
workers on other machines must set NBL_SECRET_KEY everywhere (`nbl admin gen-secret-key`), or the
worker cannot read what the API stored.

Only ciphertext is stored; plaintext exists in the API process while a request is handled and in the
worker while it publishes. Nothing here logs.
"""

from __future__ import annotations

import os
from pathlib import Path

from cryptography.fernet import Fernet, InvalidToken, MultiFernet

from service.core.settings import Settings

KEY_FILE = "secret.key"


class SecretError(RuntimeError):
    """A secret cannot be decrypted: the key changed, or the value was tampered with."""


def generate_key() -> str:
    return Fernet.generate_key().decode()


def key_file(path: Path) -> bytes:
    """Read the key file, creating it (0600, exclusively: two processes starting at once agree) if absent."""
    try:
        return path.read_bytes().strip()
    except FileNotFoundError:
        pass
    path.parent.mkdir(parents=True, exist_ok=True)
    key = Fernet.generate_key()
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    except FileExistsError:
        return path.read_bytes().strip()
    with os.fdopen(fd, "wb") as f:
        f.write(key + b"\n")
    return key


def _fernet(settings: Settings) -> MultiFernet:
    if settings.secret_key is not None:
        keys = [k.strip() for k in settings.secret_key.get_secret_value().split(",") if k.strip()]
    else:
        keys = [key_file(settings.home / KEY_FILE).decode()]
    try:
        return MultiFernet([Fernet(k) for k in keys])
    except ValueError:
        raise ValueError(
            "NBL_SECRET_KEY must be Fernet keys (32 url-safe base64 bytes each, comma-separated); "
            "`nbl admin gen-secret-key` prints one"
        ) from None


def encrypt(settings: Settings, plaintext: str) -> str:
    return _fernet(settings).encrypt(plaintext.encode()).decode()


def decrypt(settings: Settings, ciphertext: str) -> str:
    try:
        return _fernet(settings).decrypt(ciphertext.encode()).decode()
    except InvalidToken:
        raise SecretError(
            "a stored secret cannot be decrypted with this server's key: NBL_SECRET_KEY (or "
            "$NBL_HOME/secret.key) differs from the one it was stored with"
        ) from None
