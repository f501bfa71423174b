"""Loads the status page in headless Chromium through the DevTools protocol (a websocket, standard library only)
and holds what it shows to the API's JSON. Run by Scripts/page-test, which starts serve with data first.

  check_page.py BASE_URL STATUS_KEY EXPECTED.json SCREENSHOT_DIR

EXPECTED.json names what the data must show: {"xssEvent": id, "xssExternalId": "...", "runEvent": id}.
Exits 1 naming every check that failed."""

import base64
import json
import os
import shutil
import socket
import struct
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request


class DevTools:
    """A DevTools protocol session over one websocket: send a command, wait for its answer; events are kept."""

    def __init__(self, url):
        host_port, path = url[len("ws://"):].split("/", 1)
        host, port = host_port.split(":")
        self.sock = socket.create_connection((host, int(port)), timeout=60)
        key = base64.b64encode(os.urandom(16)).decode()
        self.sock.sendall(
            (f"GET /{path} HTTP/1.1\r\nHost: {host_port}\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
             f"Sec-WebSocket-Key: {key}\r\nSec-WebSocket-Version: 13\r\n\r\n").encode())
        response = b""
        while b"\r\n\r\n" not in response:
            chunk = self.sock.recv(4096)
            if not chunk:
                raise RuntimeError("the DevTools websocket closed during the handshake")
            response += chunk
        if b" 101 " not in response.split(b"\r\n", 1)[0]:
            raise RuntimeError(f"the DevTools websocket refused: {response[:200]!r}")
        self.buffer = response.split(b"\r\n\r\n", 1)[1]
        self.next_id = 0
        self.events = []

    def _read(self, count):
        while len(self.buffer) < count:
            chunk = self.sock.recv(1 << 20)
            if not chunk:
                raise RuntimeError("the DevTools websocket closed")
            self.buffer += chunk
        data, self.buffer = self.buffer[:count], self.buffer[count:]
        return data

    def _receive(self):
        message = b""
        while True:
            first, second = self._read(2)
            length = second & 0x7F
            if length == 126:
                length = struct.unpack(">H", self._read(2))[0]
            elif length == 127:
                length = struct.unpack(">Q", self._read(8))[0]
            mask = self._read(4) if second & 0x80 else None
            payload = self._read(length)
            if mask:
                payload = bytes(byte ^ mask[index % 4] for index, byte in enumerate(payload))
            opcode = first & 0x0F
            if opcode == 8:
                raise RuntimeError("the DevTools websocket closed")
            if opcode in (0, 1, 2):
                message += payload
                if first & 0x80:
                    return json.loads(message)

    def send(self, method, **params):
        self.next_id += 1
        command = self.next_id
        payload = json.dumps({"id": command, "method": method, "params": params}).encode()
        header = bytes([0x81])
        if len(payload) < 126:
            header += bytes([0x80 | len(payload)])
        elif len(payload) < 1 << 16:
            header += bytes([0x80 | 126]) + struct.pack(">H", len(payload))
        else:
            header += bytes([0x80 | 127]) + struct.pack(">Q", len(payload))
        mask = os.urandom(4)
        self.sock.sendall(header + mask + bytes(byte ^ mask[index % 4] for index, byte in enumerate(payload)))
        while True:
            message = self._receive()
            if message.get("id") == command:
                if "error" in message:
                    raise RuntimeError(f"{method}: {message['error']}")
                return message.get("result", {})
            self.events.append(message)
            if message.get("method") == "Page.javascriptDialogOpening":
                self.send("Page.handleJavaScriptDialog", accept=True)

    def evaluate(self, expression):
        result = self.send("Runtime.evaluate", expression=expression, returnByValue=True, awaitPromise=True)
        if "exceptionDetails" in result:
            raise RuntimeError(f"{expression[:80]}...: {result['exceptionDetails']}")
        return result["result"].get("value")

    def wait_for(self, expression, timeout=30):
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            value = self.evaluate(expression)
            if value:
                return value
            time.sleep(0.1)
        raise RuntimeError(f"timed out waiting for {expression}")


def api(base, path, key):
    request = urllib.request.Request(base + path, headers={"Authorization": f"Bearer {key}"})
    with urllib.request.urlopen(request, timeout=30) as response:
        return json.load(response)


def start_chromium(profile):
    binary = shutil.which("chromium") or shutil.which("chromium-browser")
    if not binary:
        raise RuntimeError("chromium is not installed (Scripts/page-test installs it)")
    arguments = [binary, "--headless", "--disable-gpu", "--no-first-run", "--no-default-browser-check", "--hide-scrollbars",
                 "--remote-debugging-port=0", "--remote-debugging-address=127.0.0.1", f"--user-data-dir={profile}",
                 "--font-render-hinting=none", "about:blank"]
    if os.geteuid() == 0:
        arguments.insert(1, "--no-sandbox")
    process = subprocess.Popen(arguments, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    port_file = os.path.join(profile, "DevToolsActivePort")
    deadline = time.monotonic() + 60
    while not os.path.exists(port_file) or not open(port_file).read().strip():
        if process.poll() is not None or time.monotonic() > deadline:
            process.kill()
            raise RuntimeError("chromium did not start")
        time.sleep(0.1)
    port = open(port_file).read().split()[0]
    for _ in range(100):
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/json/list", timeout=5) as response:
                pages = [target for target in json.load(response) if target.get("type") == "page"]
            if pages:
                return process, pages[0]["webSocketDebuggerUrl"]
        except (urllib.error.URLError, ConnectionError):
            pass
        time.sleep(0.1)
    process.kill()
    raise RuntimeError("chromium shows no page target")


# What the page shows, read in one go (the page redraws every 5 s).
READ_PAGE = """(() => {
  const rows = (id) => [...document.querySelectorAll(`#${id} tbody tr`)];
  const text = (node) => node ? node.textContent : null;
  const visible = (node) => !!node && !node.hidden && node.getBoundingClientRect().height > 0;
  return {
    quota: [...document.querySelectorAll('#quota li[data-app]')].map((item) => ({
      app: item.dataset.app, share: text(item.querySelector('.share')), warn: item.className,
      width: item.querySelector('.fill').getBoundingClientRect().width, track: item.querySelector('.track').getBoundingClientRect().width })),
    events: rows('events').map((row) => ({ id: row.dataset.event, cells: [...row.cells].map(text) })),
    starts: rows('starts').map((row) => ({ run: row.dataset.run, accepted: text(row.querySelector('.accepted')),
      rejected: text(row.querySelector('.rejected')), unknown: text(row.querySelector('.unknown')), skipped: text(row.querySelector('.skipped')) })),
    errors: rows('errors').map((row) => ({ reason: row.dataset.reason, count: text(row.querySelector('.count')) })),
    histogram: [...document.querySelectorAll('#latency li')].map((item) => Number(item.dataset.count)),
    broadcastCount: text(document.getElementById('broadcast-count')),
    backlog: text(document.getElementById('outbox-backlog')),
    leader: text(document.getElementById('scheduler-leader')),
    cards: [...document.querySelectorAll('main section')].map((card) => ({ id: card.id, visible: visible(card) })),
    images: document.querySelectorAll('img').length,
    overflow: document.documentElement.scrollWidth - window.innerWidth,
  };
})()"""


def number(value):
    return f"{value:,}"


def screenshot(tools, path):
    height = tools.evaluate("Math.ceil(document.documentElement.scrollHeight)")
    width = tools.evaluate("window.innerWidth")
    shot = tools.send("Page.captureScreenshot", format="png", captureBeyondViewport=True,
                      clip={"x": 0, "y": 0, "width": width, "height": height, "scale": 1})
    with open(path, "wb") as file:
        file.write(base64.b64decode(shot["data"]))


def main():
    base, key, expected_file, shots = sys.argv[1:5]
    expected = json.load(open(expected_file))
    failures = []

    def check(condition, message):
        if not condition:
            failures.append(message)

    with urllib.request.urlopen(base + "/status", timeout=30) as response:
        check(response.headers["Content-Security-Policy"] == "default-src 'self'; script-src 'self'; frame-ancestors 'none'",
              f"/status sends Content-Security-Policy {response.headers['Content-Security-Policy']!r}")
        check(response.headers["X-Content-Type-Options"] == "nosniff", "/status sends no X-Content-Type-Options: nosniff")

    profile = tempfile.mkdtemp(prefix="marquee-page-test-")
    process, url = start_chromium(profile)
    try:
        tools = DevTools(url)
        tools.send("Page.enable")
        tools.send("Runtime.enable")
        tools.send("Log.enable")
        tools.send("Emulation.setDeviceMetricsOverride", width=1366, height=900, deviceScaleFactor=1, mobile=False)
        tools.send("Page.navigate", url=base + "/")
        tools.wait_for("location.pathname === '/status' && document.body && document.body.dataset.state === 'login'")

        def enter(text):
            tools.evaluate("document.getElementById('key').focus()")
            tools.send("Input.insertText", text=text)
            tools.evaluate("document.querySelector('#login button[type=submit]').click()")

        # A key shaped like a key that the server does not know: the 401 message.
        enter("mq_000000000000_" + "A" * 43)
        tools.wait_for("document.body.dataset.state === 'refused'")
        message = tools.evaluate("document.getElementById('login-message').textContent")
        check("401" in message and "refused" in message, f"a wrong key shows {message!r}, not the 401 message")
        check(tools.evaluate("sessionStorage.length") == 0, "a refused key stays in sessionStorage")

        enter(key)
        tools.wait_for("document.body.dataset.state === 'ready'")
        check(tools.evaluate("sessionStorage.getItem('marquee.statusKey')") == key, "the key is not in sessionStorage")
        check(tools.evaluate("document.cookie") == "", "the page set a cookie")
        check(key not in tools.evaluate("location.href"), "the key is in the URL")
        # A reload keeps the key (this tab's session) and shows the board again without asking.
        tools.send("Page.reload")
        time.sleep(0.5)
        tools.wait_for("document.body && document.body.dataset.state === 'ready'")
        page = tools.evaluate(READ_PAGE)
        status = api(base, "/v1/status", key)
        board = api(base, "/v1/status/board", key)

        # Quota bars: one per app, the API's figures, the bar as wide as the share.
        check(len(page["quota"]) == len(status["apps"]) and status["apps"], f"quota bars {page['quota']} for apps {status['apps']}")
        for app in status["apps"]:
            bar = next((item for item in page["quota"] if item["app"] == str(app["app"])), None)
            if not bar:
                failures.append(f"no quota bar for app {app['app']}")
                continue
            check(bar["share"].startswith(f"{number(app['inUse'])} / {number(app['quota'])}"),
                  f"app {app['app']}'s bar says {bar['share']!r}; the API: {app['inUse']} of {app['quota']}")
            share = app["inUse"] / app["quota"]
            check(abs(bar["width"] - bar["track"] * share) <= 2, f"app {app['app']}'s bar is {bar['width']} of {bar['track']} px for {share:.3f}")
            check(("warn" in bar["warn"]) == (0.8 <= share < 0.95), f"app {app['app']} at {share:.2f} has class {bar['warn']!r}")
        # Event rows: the API's events, in its order, their external ids as text.
        check([row["id"] for row in page["events"]] == [str(event["id"]) for event in board["events"]],
              f"event rows {[row['id'] for row in page['events']]}, API {[event['id'] for event in board['events']]}")
        for event in board["events"]:
            row = next((row for row in page["events"] if row["id"] == str(event["id"])), None)
            if row:
                check(row["cells"][1] == event["externalId"], f"event {event['id']} shows {row['cells'][1]!r}, not {event['externalId']!r}")
                check(row["cells"][3] == event["status"], f"event {event['id']} shows status {row['cells'][3]!r}")
        check(len(board["events"]) >= 3, f"the data should show at least 3 events, the API has {len(board['events'])}")
        xss = next((row for row in page["events"] if row["id"] == str(expected["xssEvent"])), None)
        check(xss is not None and xss["cells"][1] == expected["xssExternalId"], f"the external id {expected['xssExternalId']!r} is not shown as text: {xss}")
        check(page["images"] == 0, f"the page holds {page['images']} img elements: markup from data was parsed")
        dialogs = [event for event in tools.events if event.get("method") == "Page.javascriptDialogOpening"]
        check(not dialogs, f"a script from the data ran: {dialogs}")
        # Fan-out counts: each open run's counts as the API gives them.
        check([row["run"] for row in page["starts"]] == [str(run["id"]) for run in board["startRuns"]],
              f"start rows {page['starts']}, API runs {[run['id'] for run in board['startRuns']]}")
        check(any(run["eventId"] == expected["runEvent"] and run["counts"]["accepted"] > 0 for run in board["startRuns"]),
              f"the data should show event {expected['runEvent']}'s run with accepted starts: {board['startRuns']}")
        for run in board["startRuns"]:
            row = next((row for row in page["starts"] if row["run"] == str(run["id"])), None)
            if row:
                counts = run["counts"]
                shown = {"accepted": counts["accepted"], "rejected": sum(counts["rejected"].values()),
                         "unknown": counts["unknown"], "skipped": sum(counts["skipped"].values())}
                for name, value in shown.items():
                    check(row[name] == number(value), f"run {run['id']} shows {name} {row[name]!r}; the API: {value}")
        # Error counts by reason.
        check(board["errorsByReason"], "the data should show APNs errors")
        check({row["reason"]: row["count"] for row in page["errors"]} == {error["reason"]: number(error["count"]) for error in board["errorsByReason"]},
              f"errors {page['errors']}; the API: {board['errorsByReason']}")
        # The histogram: per-bucket counts summing to the broadcasts accepted.
        check(sum(page["histogram"]) == board["broadcasts"]["accepted"] and board["broadcasts"]["accepted"] > 0,
              f"histogram {page['histogram']} for {board['broadcasts']['accepted']} broadcasts")
        check(page["broadcastCount"] == number(board["broadcasts"]["accepted"]), f"broadcasts shown {page['broadcastCount']!r}")
        check(page["backlog"] == number(status["outboxBacklog"]), f"backlog shown {page['backlog']!r}, API {status['outboxBacklog']}")
        check(page["leader"] == (board["scheduler"]["leader"] or "none"), f"leader shown {page['leader']!r}")
        check(all(card["visible"] for card in page["cards"]) and len(page["cards"]) >= 8, f"panels not shown: {page['cards']}")
        check(page["overflow"] <= 0, f"the desktop page is {page['overflow']} px wider than the window")
        screenshot(tools, os.path.join(shots, "status-page-desktop.png"))

        tools.send("Emulation.setDeviceMetricsOverride", width=390, height=844, deviceScaleFactor=2, mobile=True)
        time.sleep(0.5)
        phone = tools.evaluate(READ_PAGE)
        check(phone["overflow"] <= 0, f"at phone width the page is {phone['overflow']} px wider than the screen")
        check(all(card["visible"] for card in phone["cards"]), f"panels not shown on a phone: {phone['cards']}")
        screenshot(tools, os.path.join(shots, "status-page-phone.png"))

        violations = [event["params"]["entry"]["text"] for event in tools.events
                      if event.get("method") == "Log.entryAdded" and "Content Security Policy" in event["params"]["entry"].get("text", "")]
        check(not violations, f"the page breaks its own Content-Security-Policy: {violations}")
    finally:
        process.kill()
        process.wait()
        shutil.rmtree(profile, ignore_errors=True)

    if failures:
        print("page-test: the status page does not match the API:", *failures, sep="\n  ", file=sys.stderr)
        sys.exit(1)
    print(f"page-test: the status page matches the API; screenshots in {shots}/status-page-desktop.png and status-page-phone.png")


if __name__ == "__main__":
    main()
