#!/usr/bin/env python3
# Scripts/chaos.d/load.py: the HTTP side of Scripts/chaos (Python 3 standard library only; 127.0.0.1 only).
#
#   load.py create --port P --key K --app A --type NAME --count N --run ID
#       creates N live events (startsAt a minute ago, endsAt in 2 h) and prints their ids, one a line
#   load.py feed --port P --key K --events FILE --interval S --run ID --log FILE --summary FILE --stop-file FILE
#       every event posts its whole content state every S seconds (jittered +-25%) to
#       POST /v1/events/{id}/updates, each with a fresh Idempotency-Key, and retries it (same key, same body)
#       until it is answered 202, serve down or not. An event's next update waits for its last one's 202.
#       When the stop file appears, no new update starts; those under way are retried until accepted
#       (at most --drain seconds), then it writes the summary and exits (0, or 1 if an update was given up).
#       SIGTERM: exit at once (the summary is written). Log: one JSON line per accepted update
#       ({"t": "ok", ...}) and one per answer that was not a 202 ({"t": "err", ...}).
import argparse
import heapq
import http.client
import json
import os
import random
import signal
import sys
import threading
import time

HOST = "127.0.0.1"
# serve closes a keep-alive connection idle for 10 s (HTTP1Server.requestReadTimeout); one idle longer than
# this is reopened before use, so that connection errors come from the faults, not from that race.
IDLE_REOPEN = 7.0


def request(conn_box, port, method, path, key, body=None, idempotency_key=None, timeout=10):
    """One HTTP request on a kept-alive connection (conn_box: [connection or None, time of last use];
    reopened after any failure or a long idle spell): (status, body bytes)."""
    headers = {"Authorization": "Bearer " + key}
    data = None
    if body is not None:
        data = json.dumps(body, separators=(",", ":")).encode()
        headers["Content-Type"] = "application/json"
    if idempotency_key is not None:
        headers["Idempotency-Key"] = idempotency_key
    if conn_box[0] is not None and time.monotonic() - conn_box[1] > IDLE_REOPEN:
        conn_box[0].close()
        conn_box[0] = None
    if conn_box[0] is None:
        conn_box[0] = http.client.HTTPConnection(HOST, port, timeout=timeout)
    conn = conn_box[0]
    try:
        conn.request(method, path, body=data, headers=headers)
        response = conn.getresponse()
        payload = response.read()
        conn_box[1] = time.monotonic()
        if response.getheader("Connection", "").lower() == "close":
            conn.close()
            conn_box[0] = None
        return response.status, payload
    except BaseException:
        conn.close()
        conn_box[0] = None
        raise


def create(args):
    box = [None, 0.0]
    now = time.time()
    iso = lambda t: time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(t))
    for index in range(args.count):
        body = {
            "app": args.app, "externalId": f"chaos-{args.run}-{index}", "kind": "match",
            "attributeType": args.type, "attributes": {"name": f"chaos match {index}"},
            "contentState": {"seq": 0, "minute": 0, "homeScore": 0, "awayScore": 0},
            "startsAt": iso(now - 60), "endsAt": iso(now + 7200),
        }
        status, payload = request(box, args.port, "POST", "/v1/events", args.key, body,
                                  idempotency_key=f"chaos-{args.run}-event-{index}")
        if status != 201:
            print(f"chaos: POST /v1/events answered {status}: {payload[:300]!r}", file=sys.stderr)
            return 1
        print(json.loads(payload)["id"])
    return 0


class Feed:
    def __init__(self, args, events):
        self.args = args
        self.events = events
        self.seq = {event: 0 for event in events}
        self.rng = random.Random(args.seed)
        self.lock = threading.Lock()
        self.cond = threading.Condition(self.lock)
        start = time.time()
        # Every event's first update is spread over the first interval.
        self.heap = [(start + self.rng.uniform(0, args.interval), event) for event in events]
        heapq.heapify(self.heap)
        self.stopping = False
        self.drain_deadline = None
        self.log = open(args.log, "a", buffering=1)
        self.counts = {"accepted": 0, "retried": 0, "attempts": 0, "given_up": 0, "refused": 0,
                       "answers": {}, "errors": {}, "longest_retry_s": 0.0}
        self.in_flight = 0

    def write(self, record):
        with self.lock:
            self.log.write(json.dumps(record, separators=(",", ":")) + "\n")

    def jitter(self):
        with self.lock:
            return self.args.interval * self.rng.uniform(0.75, 1.25)

    def next_event(self):
        with self.cond:
            while True:
                if self.stopping or not self.heap:
                    return None
                due, event = self.heap[0]
                wait = due - time.time()
                if wait <= 0:
                    heapq.heappop(self.heap)
                    self.in_flight += 1
                    return due, event
                self.cond.wait(min(wait, 0.5))

    def reschedule(self, event, due):
        with self.cond:
            self.in_flight -= 1
            # Not behind by a backlog: after a long retry the next update goes at once, then on schedule.
            heapq.heappush(self.heap, (max(due, time.time()), event))
            self.cond.notify()

    def post(self, box, event):
        self.seq[event] += 1
        seq = self.seq[event]
        body = {"contentState": {"seq": seq, "minute": seq % 90, "homeScore": seq // 40, "awayScore": seq // 55,
                                 "lastEvent": f"update {seq}"}}
        key = f"chaos-{self.args.run}-{event}-{seq}"
        path = f"/v1/events/{event}/updates"
        first = time.time()
        attempts = 0
        delay = 0.1
        while True:
            attempts += 1
            sent = time.time()
            status, error = None, None
            try:
                status, payload = request(box, self.args.port, "POST", path, self.args.key, body, key)
            except (OSError, http.client.HTTPException) as failure:
                error = type(failure).__name__
            now = time.time()
            with self.lock:
                self.counts["attempts"] += 1
                if status is not None:
                    self.counts["answers"][str(status)] = self.counts["answers"].get(str(status), 0) + 1
                else:
                    self.counts["errors"][error] = self.counts["errors"].get(error, 0) + 1
            if status == 202:
                update = json.loads(payload)["update"]
                self.write({"t": "ok", "event": event, "seq": seq, "update": update["id"],
                            "disposition": update.get("disposition"), "first": round(first, 3),
                            "accepted": round(now, 3), "attempts": attempts})
                with self.lock:
                    self.counts["accepted"] += 1
                    if attempts > 1:
                        self.counts["retried"] += 1
                    self.counts["longest_retry_s"] = max(self.counts["longest_retry_s"], round(now - first, 3))
                return True
            detail = {"t": "err", "event": event, "seq": seq, "at": round(sent, 3), "took": round(now - sent, 3)}
            if status is not None:
                detail["status"] = status
                detail["body"] = payload[:200].decode("utf-8", "replace")
            else:
                detail["error"] = error
            self.write(detail)
            if status is not None and status < 500 and status not in (408, 429):
                with self.lock:
                    self.counts["refused"] += 1
                return False
            with self.lock:
                deadline = self.drain_deadline
            if now - first > self.args.give_up or (deadline is not None and now > deadline):
                with self.lock:
                    self.counts["given_up"] += 1
                return False
            time.sleep(delay * random.uniform(0.5, 1.0))
            delay = min(delay * 2, 1.0)

    def worker(self):
        box = [None, 0.0]
        while True:
            picked = self.next_event()
            if picked is None:
                return
            due, event = picked
            self.post(box, event)
            self.reschedule(event, due + self.jitter())

    def run(self):
        threads = [threading.Thread(target=self.worker, daemon=True) for _ in range(min(len(self.events), 64))]
        for thread in threads:
            thread.start()
        while not os.path.exists(self.args.stop_file):
            time.sleep(0.2)
        with self.cond:
            self.stopping = True
            self.drain_deadline = time.time() + self.args.drain
            self.cond.notify_all()
        for thread in threads:
            thread.join()
        return self.finish()

    def finish(self):
        with self.lock:
            counts = dict(self.counts)
            self.log.flush()
        with open(self.args.summary + ".tmp", "w") as out:
            json.dump(counts, out)
        os.replace(self.args.summary + ".tmp", self.args.summary)
        return 0 if counts["given_up"] == 0 and counts["refused"] == 0 else 1


def feed(args):
    with open(args.events) as f:
        events = [int(line) for line in f if line.strip()]
    runner = Feed(args, events)

    def terminate(signum, frame):
        runner.finish()
        os._exit(143)

    signal.signal(signal.SIGTERM, terminate)
    return runner.run()


def main():
    parser = argparse.ArgumentParser(prog="load.py")
    commands = parser.add_subparsers(dest="command", required=True)
    c = commands.add_parser("create")
    c.add_argument("--port", type=int, required=True)
    c.add_argument("--key", required=True)
    c.add_argument("--app", type=int, required=True)
    c.add_argument("--type", required=True)
    c.add_argument("--count", type=int, required=True)
    c.add_argument("--run", required=True)
    f = commands.add_parser("feed")
    f.add_argument("--port", type=int, required=True)
    f.add_argument("--key", required=True)
    f.add_argument("--events", required=True)
    f.add_argument("--interval", type=float, required=True)
    f.add_argument("--run", required=True)
    f.add_argument("--log", required=True)
    f.add_argument("--summary", required=True)
    f.add_argument("--stop-file", required=True)
    f.add_argument("--drain", type=float, default=120)
    f.add_argument("--give-up", type=float, default=300, help="seconds of retrying one update before giving up")
    f.add_argument("--seed", type=int, default=7)
    args = parser.parse_args()
    return create(args) if args.command == "create" else feed(args)


if __name__ == "__main__":
    sys.exit(main())
