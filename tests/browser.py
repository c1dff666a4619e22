"""Headless Chromium for the HTML reports' browser tests: Debian's `chromium` driven
over the DevTools protocol on a pipe (stdlib only), and the scripts that read back
how each chart was laid out."""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import subprocess
import time
from pathlib import Path
from typing import Any

CHROMIUM = Path("/usr/bin/chromium")


class DevTools:
    """Chromium's DevTools protocol over --remote-debugging-pipe (fd 3 in, fd 4 out)."""

    def __init__(self, profile: Path) -> None:
        to_chrome_r, self._to_chrome = os.pipe()
        self._from_chrome, from_chrome_w = os.pipe()

        def wire() -> None:  # in the child: the pipe ends where Chromium expects them
            # Moved above 10 first, so neither lands on the other's target number.
            read_end = fcntl.fcntl(to_chrome_r, fcntl.F_DUPFD, 10)
            write_end = fcntl.fcntl(from_chrome_w, fcntl.F_DUPFD, 10)
            os.dup2(read_end, 3)
            os.dup2(write_end, 4)

        self.proc = subprocess.Popen(
            [
                str(CHROMIUM),
                "--headless",
                "--no-sandbox",
                "--disable-gpu",
                "--disable-quic",
                "--no-first-run",
                "--disable-background-networking",
                "--disable-component-update",
                "--disable-sync",
                "--disable-extensions",
                f"--user-data-dir={profile}",
                "--window-size=1280,1600",
                "--remote-debugging-pipe",
                "about:blank",  # not the new-tab page, which loads chrome:// resources
            ],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            preexec_fn=wire,
            # 3 and 4 stay open past the close-fds step that follows preexec_fn.
            pass_fds=(3, 4, to_chrome_r, from_chrome_w),
        )
        os.close(to_chrome_r)
        os.close(from_chrome_w)
        self._buf = b""
        self._next = 0
        self.events: list[dict[str, Any]] = []
        self.session: str | None = None

    def _read(self, deadline: float) -> dict[str, Any]:
        while b"\0" not in self._buf:
            if time.monotonic() > deadline:
                raise TimeoutError("Chromium did not answer in time")
            chunk = os.read(self._from_chrome, 1 << 16)
            if not chunk:
                raise RuntimeError(f"Chromium closed the pipe (exit {self.proc.poll()})")
            self._buf += chunk
        msg, _, self._buf = self._buf.partition(b"\0")
        return dict(json.loads(msg))

    def call(self, method: str, timeout: float = 30.0, **params: Any) -> dict[str, Any]:
        self._next += 1
        msg: dict[str, Any] = {"id": self._next, "method": method, "params": params}
        if self.session and not method.startswith(("Target.", "Browser.")):
            msg["sessionId"] = self.session
        os.write(self._to_chrome, json.dumps(msg).encode() + b"\0")
        deadline = time.monotonic() + timeout
        while True:
            reply = self._read(deadline)
            if reply.get("id") == self._next:
                if "error" in reply:
                    raise RuntimeError(f"{method}: {reply['error']}")
                return dict(reply.get("result", {}))
            self.events.append(reply)

    def wait_for(self, method: str, timeout: float = 30.0) -> None:
        deadline = time.monotonic() + timeout
        while not any(e.get("method") == method for e in self.events):
            self.events.append(self._read(deadline))

    def evaluate(self, expression: str) -> Any:
        res = self.call("Runtime.evaluate", expression=expression, returnByValue=True)
        assert "exceptionDetails" not in res, res
        return res["result"]["value"]

    def attach(self) -> None:
        """To the browser's page, with the events a check reads switched on."""
        targets = self.call("Target.getTargets")["targetInfos"]
        page = next(t for t in targets if t["type"] == "page")
        attached = self.call("Target.attachToTarget", targetId=page["targetId"], flatten=True)
        self.session = attached["sessionId"]
        for domain in ("Runtime", "Log", "Network", "Page"):
            self.call(f"{domain}.enable")

    def errors(self) -> list[dict[str, Any]]:
        """Exceptions, console errors and logged errors among the events so far."""
        return [
            e["params"]
            for e in self.events
            if e.get("method") == "Runtime.exceptionThrown"
            or (e.get("method") == "Runtime.consoleAPICalled" and e["params"]["type"] == "error")
            or (e.get("method") == "Log.entryAdded" and e["params"]["entry"]["level"] == "error")
        ]

    def requests(self, url: str) -> list[str]:
        """Every URL the page at `url` asked for."""
        return [
            e["params"]["request"]["url"]
            for e in self.events
            if e.get("method") == "Network.requestWillBeSent" and e["params"]["documentURL"] == url
        ]

    def close(self) -> None:
        with contextlib.suppress(RuntimeError, TimeoutError, OSError):
            self.call("Browser.close", timeout=10)
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        os.close(self._to_chrome)
        os.close(self._from_chrome)


# For each chart: its size on screen, how many marks it has, and whether the
# browser hit-tests its first mark there once scrolled into view (laid out and painted);
# for the quality charts, whether a Pareto front line is drawn and what the caption says.
CHARTS_JS = """
Array.from(document.querySelectorAll('svg.chart')).map(svg => {
  const marks = svg.querySelectorAll('g.point, g.box, g.bar');
  let hit = false;
  if (marks.length) {
    marks[0].scrollIntoView({block: 'center'});
    const r = marks[0].getBoundingClientRect();
    const el = document.elementFromPoint(r.x + r.width / 2, r.y + r.height / 2);
    hit = el !== null && (el === marks[0] || marks[0].contains(el) || el.closest('svg') === svg);
  }
  const box = svg.getBoundingClientRect();
  const next = svg.nextElementSibling;
  return {id: svg.id, width: box.width, height: box.height, marks: marks.length, hit: hit,
          front: svg.querySelectorAll('.winner-ring').length,
          pareto: svg.querySelectorAll('.pareto-front').length,
          titled: Array.from(marks).every(m => m.querySelector(':scope > title') !== null),
          caption: next && next.matches('p.note') ? next.textContent : ''};
})
"""

# Every <text> of every chart that the browser lays out past its SVG's box (1 px
# tolerance): a label the SVG's edge cuts off.
TEXT_OUTSIDE_JS = """
Array.from(document.querySelectorAll('svg.chart')).flatMap(svg => {
  const box = svg.getBoundingClientRect();
  return Array.from(svg.querySelectorAll('text')).filter(t => {
    const r = t.getBoundingClientRect();
    return r.left < box.left - 1 || r.right > box.right + 1 ||
           r.top < box.top - 1 || r.bottom > box.bottom + 1;
  }).map(t => ({chart: svg.id, text: t.textContent}));
})
"""


def look_at(page: Path, profile: Path) -> dict[str, Any]:
    """Load `page` and say what a reader would hit: its charts as laid out
    (CHARTS_JS), labels past a chart's edge, errors on the console, and every
    request it made (a self-contained page makes one: itself)."""
    url = page.resolve().as_uri()
    chrome = DevTools(profile)
    try:
        chrome.attach()
        chrome.call("Page.navigate", url=url)
        chrome.wait_for("Page.loadEventFired")
        seen = {"charts": chrome.evaluate(CHARTS_JS), "outside": chrome.evaluate(TEXT_OUTSIDE_JS)}
        chrome.call("Runtime.evaluate", expression="0")  # drain events that are still due
    finally:
        chrome.close()
    seen["errors"] = chrome.errors()
    seen["requests"] = chrome.requests(url)
    return seen
