"""Real HTTP receivers for webhooks on 127.0.0.1 (allowlisted by the tests that use it): `Receiver`
records every POST and answers with scripted statuses (shared by the webhook tests and the canary
test of publishing); `Trickler` answers too slowly ever to finish."""

from __future__ import annotations

import select
import socket
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


class Receiver:
    """Records every POST (headers, body) and answers with the scripted statuses (the last repeats)."""

    def __init__(self, statuses=(200,)):
        self.statuses, self.requests = list(statuses), []
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self):
                data = self.rfile.read(int(self.headers.get("content-length", 0)))
                outer.requests.append(({k.lower(): v for k, v in self.headers.items()}, data.decode()))
                status = outer.statuses.pop(0) if len(outer.statuses) > 1 else outer.statuses[0]
                self.send_response(status)
                self.send_header("content-length", "2")
                self.end_headers()
                self.wfile.write(b"ok")

            def log_message(self, *args):
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.port = self.server.server_address[1]
        self.url = f"http://127.0.0.1:{self.port}/hooks/nbl?source=ci"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self):
        self.server.shutdown()
        self.server.server_close()


class Trickler:
    """A hostile receiver on 127.0.0.1: reads the request, then answers an endless header one byte
    every `every_s` seconds, so that no single read ever waits long but the answer never ends (for
    at most `max_s` seconds a connection, so a client with no total deadline is freed in the end).
    Counts connections: open now, the most open at once, and those the client hung up on."""

    def __init__(self, every_s: float = 0.2, max_s: float = 60.0):
        self.every_s, self.max_s = every_s, max_s
        self.open = self.most_open = self.accepted = self.hung_up = 0
        self._lock, self._stop = threading.Lock(), threading.Event()
        self.sock = socket.create_server(("127.0.0.1", 0))
        self.sock.settimeout(0.1)
        self.port = self.sock.getsockname()[1]
        self.url = f"http://127.0.0.1:{self.port}/hooks/slow"
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self):
        while not self._stop.is_set():
            try:
                conn, _ = self.sock.accept()
            except OSError:
                continue
            with self._lock:
                self.accepted += 1
                self.open += 1
                self.most_open = max(self.most_open, self.open)
            threading.Thread(target=self._trickle, args=(conn,), daemon=True).start()

    def _trickle(self, conn: socket.socket):
        answer = b"HTTP/1.1 200 OK\r\nx-slow: " + b"a" * 1_000_000
        start = time.monotonic()
        try:
            for i in range(len(answer)):
                # Between bytes, watch the connection: the client's hang-up is seen at once.
                readable, _, _ = select.select([conn], [], [], self.every_s)
                if readable and not conn.recv(65536):
                    raise ConnectionResetError("the client closed the connection")
                if self._stop.is_set() or time.monotonic() - start > self.max_s:
                    break
                conn.sendall(answer[i : i + 1])
        except OSError:
            with self._lock:
                self.hung_up += 1
        finally:
            conn.close()
            with self._lock:
                self.open -= 1

    def close(self):
        self._stop.set()
        self.sock.close()
