"""A minimal Chrome DevTools Protocol client over ``--remote-debugging-pipe`` (no dependency).

Not a test module. Chromium reads JSON commands from its file descriptor 3 and writes responses and
events to descriptor 4, each message terminated by a NUL byte. :class:`HeadlessChromium` starts the
browser with two pipes wired to those descriptors, opens one page (a flattened session) and offers
``call`` (a command, waiting for its answer) and the events received so far.
"""

from __future__ import annotations

import contextlib
import json
import os
import select
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

CANDIDATES = ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable")


def find_chromium() -> str | None:
    """The path of a Chromium/Chrome binary on PATH, or None."""
    for name in CANDIDATES:
        path = shutil.which(name)
        if path is not None:
            return path
    return None


class CDPError(RuntimeError):
    """Chromium answered a command with an error, died, or did not answer in time."""


class HeadlessChromium:
    """Headless Chromium driven over the DevTools pipe; use as a context manager."""

    def __init__(self, binary: str, profile: Path, *, timeout: float = 60.0) -> None:
        self.timeout = timeout
        self.events: list[dict[str, Any]] = []
        self._next_id = 0
        self._buffer = b""
        to_browser_read, self._to_browser = os.pipe()
        self._from_browser, from_browser_write = os.pipe()
        flags = [
            "--headless=new",
            "--remote-debugging-pipe",
            "--no-sandbox",  # the test may run as root (CI containers)
            "--disable-gpu",
            "--no-first-run",
            "--no-default-browser-check",
            "--disable-extensions",
            "--disable-background-networking",
            "--disable-component-update",
            "--disable-sync",
            "--metrics-recording-only",
            "--hide-scrollbars",
            "--force-device-scale-factor=1",
            f"--user-data-dir={profile}",
            "about:blank",
        ]
        # A Python shim puts the pipe ends on descriptors 3 and 4, then becomes Chromium.
        shim = "import os, sys; os.dup2(int(sys.argv[1]), 3); os.dup2(int(sys.argv[2]), 4); " \
            "os.execv(sys.argv[3], sys.argv[3:])"
        command = [sys.executable, "-c", shim, str(to_browser_read), str(from_browser_write), binary, *flags]
        # Chromium logs plenty (D-Bus is absent in containers): keep it in a file, never a pipe that
        # could fill up and block the browser.
        self.log_path = profile.with_name(profile.name + ".log")
        profile.mkdir(parents=True, exist_ok=True)
        with self.log_path.open("wb") as log:
            self.process = subprocess.Popen(
                command,
                pass_fds=(to_browser_read, from_browser_write),
                stdout=subprocess.DEVNULL,
                stderr=log,
            )
        os.close(to_browser_read)
        os.close(from_browser_write)
        self.session: str | None = None

    def __enter__(self) -> HeadlessChromium:
        try:
            target = self.call("Target.createTarget", {"url": "about:blank"}, session=False)["targetId"]
            self.session = self.call(
                "Target.attachToTarget", {"targetId": target, "flatten": True}, session=False
            )["sessionId"]
            for domain in ("Page", "Runtime", "Log", "Network"):
                self.call(f"{domain}.enable")
        except BaseException:
            self.__exit__()
            raise
        return self

    def __exit__(self, *exc: object) -> None:
        with contextlib.suppress(CDPError, OSError):
            self.call("Browser.close", session=False)
        try:
            self.process.wait(timeout=15)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()
        os.close(self._to_browser)
        os.close(self._from_browser)

    def _send(self, message: dict[str, Any]) -> None:
        os.write(self._to_browser, json.dumps(message).encode() + b"\0")

    def _receive(self, deadline: float) -> dict[str, Any]:
        while b"\0" not in self._buffer:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise CDPError("Chromium did not answer in time")
            ready, _, _ = select.select([self._from_browser], [], [], remaining)
            if not ready:
                continue
            chunk = os.read(self._from_browser, 1 << 20)
            if not chunk:
                raise CDPError(
                    f"Chromium closed the pipe (exit code {self.process.poll()}); log: "
                    + self.log_path.read_text(errors="replace")[-2000:]
                )
            self._buffer += chunk
        message, self._buffer = self._buffer.split(b"\0", 1)
        return dict(json.loads(message))

    def call(self, method: str, params: dict[str, Any] | None = None, *, session: bool = True) -> Any:
        """Send a command (to the page's session unless ``session=False``) and return its result."""
        self._next_id += 1
        message: dict[str, Any] = {"id": self._next_id, "method": method, "params": params or {}}
        if session:
            message["sessionId"] = self.session
        self._send(message)
        deadline = time.monotonic() + self.timeout
        while True:
            answer = self._receive(deadline)
            if answer.get("id") == self._next_id:
                if "error" in answer:
                    raise CDPError(f"{method}: {answer['error']}")
                return answer.get("result", {})
            self.events.append(answer)

    def wait_for(self, method: str) -> dict[str, Any]:
        """Wait for (and return) the first event ``method`` not seen yet."""
        deadline = time.monotonic() + self.timeout
        for event in self.events:
            if event.get("method") == method and not event.get("_seen"):
                event["_seen"] = True
                return event
        while True:
            event = self._receive(deadline)
            self.events.append(event)
            if event.get("method") == method:
                event["_seen"] = True
                return event

    def evaluate(self, expression: str) -> Any:
        """Evaluate a JavaScript expression in the page and return its value (JSON-like)."""
        result = self.call(
            "Runtime.evaluate", {"expression": expression, "returnByValue": True, "awaitPromise": True}
        )
        if "exceptionDetails" in result:
            raise CDPError(f"{expression}: {result['exceptionDetails']}")
        return result["result"].get("value")

