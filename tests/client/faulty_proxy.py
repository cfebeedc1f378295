"""A TCP proxy in front of the real API that breaks its event stream in one of several ways, so the
client's fallback to polling is tested against real faults of the network (not a fake client).

Every request is forwarded one per connection (`Connection: close` upstream); the requests to
`/events/stream` meet the fault:
- "reset": the stream's head and its first `keep` body bytes, then a TCP reset (SO_LINGER 0);
- "stall": the stream's head, then nothing (the connection stays open);
- "silent": nothing at all, not even the head;
- "busy": a 503 with Retry-After: 1 (the HTTP layer retries those).
"""

from __future__ import annotations

import socket
import struct
import threading

FAULTS = ("reset", "stall", "silent", "busy")


def _read_head(sock: socket.socket) -> bytes:
    data = b""
    while b"\r\n\r\n" not in data:
        chunk = sock.recv(65536)
        if not chunk:
            break
        data += chunk
    return data


def _close_upstream(head: bytes) -> bytes:
    """The request head with `Connection: close`, so one request is all a connection carries."""
    lines = [line for line in head.split(b"\r\n") if not line.lower().startswith(b"connection:")]
    return b"\r\n".join(lines[:1] + [b"Connection: close"] + lines[1:])


class FaultyProxy:
    def __init__(self, upstream: str, fault: str, keep: int = 200):
        assert fault in FAULTS
        host, port = upstream.removeprefix("http://").split(":")
        self.upstream, self.fault, self.keep = (host, int(port)), fault, keep
        self.streams = 0  # stream requests that met the fault
        self._listener = socket.create_server(("127.0.0.1", 0))
        self._open: list[socket.socket] = []
        self._stop = threading.Event()
        threading.Thread(target=self._accept, daemon=True).start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self._listener.getsockname()[1]}"

    def close(self) -> None:
        self._stop.set()
        self._listener.close()
        for s in self._open:
            s.close()

    def _accept(self) -> None:
        while not self._stop.is_set():
            try:
                client, _ = self._listener.accept()
            except OSError:
                return
            self._open.append(client)
            threading.Thread(target=self._serve, args=(client,), daemon=True).start()

    def _serve(self, client: socket.socket) -> None:
        try:
            head = _read_head(client)  # GETs only: no body follows
            if b"/events/stream" in head.split(b"\r\n", 1)[0]:
                self.streams += 1
                self._fault(client, head)
            else:
                self._forward(client, head)
        except OSError:
            pass
        finally:
            if not self._stop.is_set() and self.fault not in ("stall", "silent"):
                client.close()

    def _forward(self, client: socket.socket, head: bytes, limit: int | None = None) -> None:
        with socket.create_connection(self.upstream) as up:
            up.sendall(_close_upstream(head))
            sent, body_at = b"", None
            while chunk := up.recv(65536):
                sent += chunk
                if limit is not None and body_at is None and b"\r\n\r\n" in sent:
                    body_at = sent.index(b"\r\n\r\n") + 4
                if limit is not None and body_at is not None and len(sent) >= body_at + limit:
                    client.sendall(sent[: body_at + limit])
                    return
                if limit is None:
                    client.sendall(chunk)
                    sent = b""
            client.sendall(sent)  # a stream shorter than the limit: all of it

    def _fault(self, client: socket.socket, head: bytes) -> None:
        if self.fault == "busy":
            client.sendall(
                b"HTTP/1.1 503 Service Unavailable\r\nRetry-After: 1\r\nContent-Type: application/json\r\n"
                b"Content-Length: 2\r\nConnection: close\r\n\r\n{}"
            )
        elif self.fault == "reset":
            self._forward(client, head, self.keep)
            client.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        elif self.fault == "stall":
            self._forward(client, head, 0)  # the head only; the socket stays open until close()
