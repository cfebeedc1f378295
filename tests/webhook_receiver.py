"""A real HTTP receiver for webhooks on 127.0.0.1 (allowlisted by the tests that use it): records every
POST and answers with scripted statuses. Shared by the webhook tests and the canary test of publishing."""

from __future__ import annotations

import threading
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
