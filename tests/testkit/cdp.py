"""A headless Chromium (the Debian package) driven over the DevTools protocol, with nothing
downloaded: the browser is started with a remote-debugging port, and one page target is spoken to
over its websocket (websocket-client). Just what the dashboard's browser test needs: navigate and
wait for the load, read the document's HTTP status, evaluate an expression, take a screenshot,
save a download."""

from __future__ import annotations

import base64
import json
import os
import shutil
import subprocess
import time
import urllib.request
from pathlib import Path


def chromium_binary() -> str | None:
    for name in ("chromium", "chromium-browser", "google-chrome"):
        if path := shutil.which(name):
            return path
    return None


class Browser:
    def __init__(self, profile: Path, width: int = 1280, height: int = 900, timeout: float = 20.0):
        import websocket

        self.timeout = timeout
        self.proc = subprocess.Popen(
            [
                chromium_binary(),
                "--headless",
                "--no-sandbox",
                "--disable-gpu",
                "--disable-dev-shm-usage",
                "--no-first-run",
                "--no-default-browser-check",
                "--disable-extensions",
                "--hide-scrollbars",
                "--remote-debugging-port=0",
                "--remote-allow-origins=*",
                f"--user-data-dir={profile}",
                f"--window-size={width},{height}",
                "about:blank",
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        port_file = profile / "DevToolsActivePort"  # the browser writes its port here
        deadline = time.monotonic() + timeout
        while not (port_file.exists() and port_file.read_text().strip()):
            if time.monotonic() > deadline or self.proc.poll() is not None:
                self.close()
                raise RuntimeError("chromium did not start its DevTools endpoint")
            time.sleep(0.05)
        port = int(port_file.read_text().split()[0])
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/json/list", timeout=timeout) as r:
            page = next(t for t in json.load(r) if t["type"] == "page")
        self.ws = websocket.create_connection(page["webSocketDebuggerUrl"], timeout=timeout, suppress_origin=True)
        self._id = 0
        self.events: list[dict] = []
        self.send("Page.enable")
        self.send("Network.enable")

    def send(self, method: str, **params) -> dict:
        self._id += 1
        self.ws.send(json.dumps({"id": self._id, "method": method, "params": params}))
        while True:
            msg = json.loads(self.ws.recv())
            if msg.get("id") == self._id:
                if "error" in msg:
                    raise RuntimeError(f"{method}: {msg['error']}")
                return msg.get("result", {})
            self.events.append(msg)

    def _wait_event(self, method: str) -> dict:
        deadline = time.monotonic() + self.timeout
        while True:
            for i, ev in enumerate(self.events):
                if ev.get("method") == method:
                    return self.events.pop(i)
            if time.monotonic() > deadline:
                raise TimeoutError(f"no {method} within {self.timeout}s")
            self.events.append(json.loads(self.ws.recv()))

    def _document_status(self) -> int | None:
        statuses = [
            ev["params"]["response"]["status"]
            for ev in self.events
            if ev.get("method") == "Network.responseReceived" and ev["params"].get("type") == "Document"
        ]
        return statuses[-1] if statuses else None

    def load(self, action) -> int | None:
        """Run `action` (a navigation or a form submit), wait for the page's load event, and return
        the HTTP status of the last document response (after redirects)."""
        self.events.clear()
        action()
        self._wait_event("Page.loadEventFired")
        return self._document_status()

    def goto(self, url: str) -> int | None:
        return self.load(lambda: self.send("Page.navigate", url=url))

    def download(self, action, folder: Path) -> Path:
        """Run `action` (a click on a download link), wait until the browser has saved the file
        under `folder`, and return its path."""
        folder.mkdir(parents=True, exist_ok=True)
        self.send("Page.setDownloadBehavior", behavior="allow", downloadPath=str(folder))
        self.events.clear()
        action()
        name = self._wait_event("Page.downloadWillBegin")["params"]["suggestedFilename"]
        while True:
            state = self._wait_event("Page.downloadProgress")["params"]["state"]
            if state != "inProgress":
                break
        if state != "completed":
            raise RuntimeError(f"download {name!r}: {state}")
        return folder / name

    def eval(self, expression: str):
        res = self.send("Runtime.evaluate", expression=expression, returnByValue=True)
        if "exceptionDetails" in res:
            raise RuntimeError(f"{expression}: {res['exceptionDetails']}")
        return res["result"].get("value")

    def screenshot(self, path: Path) -> None:
        """The whole page, not only the window."""
        size = self.send("Page.getLayoutMetrics")["cssContentSize"]
        shot = self.send(
            "Page.captureScreenshot",
            format="png",
            captureBeyondViewport=True,
            clip={"x": 0, "y": 0, "width": size["width"], "height": size["height"], "scale": 1},
        )
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(base64.b64decode(shot["data"]))

    def close(self) -> None:
        if getattr(self, "ws", None) is not None:
            self.ws.close()
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


def env_without(*names: str) -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if k not in names}
