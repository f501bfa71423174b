#!/usr/bin/env python3
# Scripts/chaos.d/report.py: the figures of a Scripts/chaos run, from what the script saved in its work folder
# (Python 3 standard library only). Prints them (text, or JSON with --json) on stdout; exits 1 when something
# was lost (an accepted update missing or not broadcast, work left in the outbox, an update the feed gave up).
#
#   report.py --work DIR --mode kill|pg-restart|pg-stop --events N --interval S [--json]
#
# DIR holds: faults.tsv (index, fault epoch, back epoch, settled epoch, outbox rows claimed just after), end (epoch), broadcasts.csv
# (channel id, event id, epoch of each broadcast APNs accepted), channels.csv (channel id, event id: the
# events' open channels), updates.csv (id, event id, action, disposition), events.csv (id, latest update id),
# accepted.csv (update ids with an accepted broadcast delivery), outbox (row count), feed.jsonl, feed-summary.json,
# simulator-accepted (broadcasts the APNs simulator answered 200, from its log).
#
# A channel's freeze at a fault: the gap between its last accepted broadcast before the fault and its first
# one at or after it (from deliveries.sent_at). A channel with none after it by the end counts as frozen
# until the end ("unrecovered").
import argparse
import bisect
import csv
import json
import os
import statistics
import sys
import time

FROZEN = 10.0  # seconds: the threshold of "froze longer than"


def read_csv(path):
    with open(path, newline="") as f:
        return [row for row in csv.reader(f) if row]


def clock(epoch):
    return time.strftime("%H:%M:%S", time.localtime(epoch))


def main():
    parser = argparse.ArgumentParser(prog="report.py")
    parser.add_argument("--work", required=True)
    parser.add_argument("--mode", required=True)
    parser.add_argument("--events", type=int, required=True)
    parser.add_argument("--interval", type=float, required=True)
    parser.add_argument("--apns-latency", default="0")
    parser.add_argument("--aimed", action="store_true")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    path = lambda name: os.path.join(args.work, name)

    faults = []
    with open(path("faults.tsv")) as f:
        for line in f:
            index, at, back, settled, claimed = line.split()
            faults.append({"index": int(index), "at": float(at), "back": float(back), "settled": float(settled),
                           "claimed": int(claimed)})
    with open(path("end")) as f:
        end = float(f.read().strip())
    with open(path("start")) as f:
        start = float(f.read().strip())

    channels = {int(c): int(e) for c, e in read_csv(path("channels.csv"))}
    sends = {channel: [] for channel in channels}
    for c, _, t in read_csv(path("broadcasts.csv")):
        if int(c) in sends:
            sends[int(c)].append(float(t))
    for times in sends.values():
        times.sort()

    # The feed's side: accepted updates and the answers that were not 202.
    accepted, errors = [], []
    with open(path("feed.jsonl")) as f:
        for line in f:
            record = json.loads(line)
            (accepted if record["t"] == "ok" else errors).append(record)
    with open(path("feed-summary.json")) as f:
        feed = json.load(f)

    def freeze(times, at):
        i = bisect.bisect_left(times, at)
        before = times[i - 1] if i > 0 else None
        after = times[i] if i < len(times) else None
        prev = before if before is not None else at
        return (after if after is not None else end) - prev, after is None

    report = {"mode": args.mode, "events": args.events, "channels": len(channels), "update_interval_s": args.interval,
              "apns_latency_ms": args.apns_latency, "faults_aimed_at_sends_in_flight": args.aimed, "faults": []}
    # Before the first fault: the usual gap, for comparison.
    first_fault = faults[0]["at"] if faults else end
    baseline = 0.0
    for times in sends.values():
        warm = [t for t in times if start + args.interval * 2 <= t < first_fault]
        baseline = max([baseline] + [b - a for a, b in zip(warm, warm[1:])])
    report["before_faults_longest_gap_s"] = round(baseline, 3)

    for fault in faults:
        at = fault["at"]
        results = [freeze(times, at) for times in sends.values()]
        frozen = sorted(({"channel": c, "event": channels[c], "freeze_s": round(gap, 3), "recovered": not open_ended}
                         for c, (gap, open_ended) in zip(sends, results) if gap > FROZEN),
                        key=lambda f: -f["freeze_s"])
        gaps = [gap for gap, _ in results]
        window = [e for e in errors if at - 1 <= e["at"] <= fault["settled"]]
        by_answer = {}
        for e in window:
            label = str(e["status"]) if "status" in e else e["error"]
            by_answer[label] = by_answer.get(label, 0) + 1
        delayed = [a["accepted"] - a["first"] for a in accepted if at - args.interval * 2 <= a["first"] <= fault["settled"]]
        report["faults"].append({
            "index": fault["index"], "at": round(at, 3), "at_offset_s": round(at - start, 1),
            "back_after_s": round(fault["back"] - at, 3),
            "outbox_rows_claimed_at_fault": fault["claimed"] if fault["claimed"] >= 0 else None,
            "longest_freeze_s": round(max(gaps), 3) if gaps else None,
            "median_freeze_s": round(statistics.median(gaps), 3) if gaps else None,
            "channels_frozen_over_10s": sum(1 for g in gaps if g > FROZEN),
            "channels_unrecovered": sum(1 for _, open_ended in results if open_ended),
            "frozen_over_10s": frozen[:50],
            "feed_non_202": by_answer,
            "feed_longest_202_wait_s": round(max(delayed), 3) if delayed else None,
        })
    longest = max((f["longest_freeze_s"] for f in report["faults"] if f["longest_freeze_s"] is not None), default=None)
    report["longest_freeze_s"] = longest

    # Nothing lost: every accepted update is in the database, none pending, the outbox empty, and every
    # event's newest accepted update was broadcast (disposition and an accepted delivery).
    updates = {int(i): (int(e), a, d) for i, e, a, d in read_csv(path("updates.csv"))}
    latest = {int(i): (int(u) if u else None) for i, u in read_csv(path("events.csv"))}
    delivered = {int(row[0]) for row in read_csv(path("accepted.csv"))}
    with open(path("outbox")) as f:
        outbox = int(f.read().strip())
    newest = {}
    for a in accepted:
        if a["event"] not in newest or a["seq"] > newest[a["event"]]["seq"]:
            newest[a["event"]] = a
    missing = sorted({a["update"] for a in accepted} - set(updates))
    pending = sorted(i for i, (_, _, d) in updates.items() if d == "pending")
    not_broadcast, not_latest = [], []
    for event, a in sorted(newest.items()):
        row = updates.get(a["update"])
        if row is None:
            continue
        if row[2] != "broadcast" or a["update"] not in delivered:
            not_broadcast.append({"event": event, "update": a["update"], "disposition": row[2],
                                  "accepted_delivery": a["update"] in delivered})
        if latest.get(event) != a["update"]:
            not_latest.append({"event": event, "update": a["update"], "latest_update_id": latest.get(event)})
    rows_per_event, accepted_per_event = {}, {}
    for _, (e, action, _) in updates.items():
        if action == "update":
            rows_per_event[e] = rows_per_event.get(e, 0) + 1
    for a in accepted:
        accepted_per_event[a["event"]] = accepted_per_event.get(a["event"], 0) + 1
    extra = sum(max(0, rows_per_event.get(e, 0) - accepted_per_event.get(e, 0)) for e in set(rows_per_event))
    silent = sorted(set(channels.values()) - set(newest))
    lost = {
        "accepted_updates": len(accepted), "update_rows": sum(rows_per_event.values()),
        "missing_from_database": missing[:20], "missing_count": len(missing),
        "pending": len(pending), "outbox_rows": outbox,
        "newest_not_broadcast": not_broadcast[:20], "newest_not_broadcast_count": len(not_broadcast),
        "newest_not_latest_state": not_latest[:20], "extra_update_rows": extra,
        "events_without_accepted_update": len(silent),
        "feed_given_up": feed.get("given_up", 0), "feed_refused": feed.get("refused", 0),
    }
    ok = (not missing and not pending and outbox == 0 and not not_broadcast and not not_latest and extra == 0
          and not silent and lost["feed_given_up"] == 0 and lost["feed_refused"] == 0)
    lost["ok"] = ok
    report["feed"] = feed
    try:
        with open(path("simulator-accepted")) as f:
            simulator_accepted = int(f.read().strip())
    except (OSError, ValueError):
        simulator_accepted = None
    report["apns"] = {"simulator_accepted_broadcasts": simulator_accepted,
                      "recorded_accepted_broadcasts": sum(len(t) for t in sends.values())}
    report["loss_check"] = lost
    report["ok"] = ok

    if args.json:
        json.dump(report, sys.stdout, indent=2)
        print()
        return 0 if ok else 1

    what = {"kill": "SIGKILL of serve, a new serve on the same port", "pg-restart": "PostgreSQL restarted -m immediate",
            "pg-stop": "PostgreSQL stopped -m fast, then started again"}
    print(f"chaos {args.mode}: {args.events} events ({len(channels)} open channels), {len(faults)} fault{'s' if len(faults) != 1 else ''} "
          f"({what.get(args.mode, args.mode)}{', each while a broadcast was in flight' if args.aimed else ''}), "
          f"a whole state per event every {args.interval:g} s (jittered), APNs latency {args.apns_latency} ms")
    print(f"before the first fault: longest gap between a channel's accepted broadcasts {baseline:.1f} s")
    for f in report["faults"]:
        back = "serve back" if args.mode == "kill" else "PostgreSQL back"
        unrecovered = f", {f['channels_unrecovered']} never broadcast again" if f["channels_unrecovered"] else ""
        print(f"fault {f['index']} at {clock(f['at'])} (+{f['at_offset_s']:.0f} s; {back} after {f['back_after_s']:.1f} s): "
              f"longest freeze {f['longest_freeze_s']:.1f} s, median {f['median_freeze_s']:.1f} s, "
              f"{f['channels_frozen_over_10s']} of {len(channels)} channels froze > {FROZEN:.0f} s{unrecovered}")
        answers = ", ".join(f"{n} x {label}" for label, n in sorted(f["feed_non_202"].items())) or "none"
        wait = f"{f['feed_longest_202_wait_s']:.1f} s" if f["feed_longest_202_wait_s"] is not None else "-"
        claimed = f["outbox_rows_claimed_at_fault"]
        claimed = "?" if claimed is None else claimed
        print(f"  outbox rows under a claim just after the fault: {claimed}; feed around it: answers other than 202: "
              f"{answers}; longest wait for a 202 {wait}")
    if longest is not None:
        worst = max(report["faults"], key=lambda f: f["longest_freeze_s"])
        print(f"overall: longest freeze {longest:.1f} s (fault {worst['index']})")
    answers = ", ".join(f"{n} x {s}" for s, n in sorted(feed.get("answers", {}).items()))
    errors_text = ", ".join(f"{n} x {s}" for s, n in sorted(feed.get("errors", {}).items())) or "none"
    print(f"feed: {feed.get('accepted', 0)} updates accepted, {feed.get('retried', 0)} of them after retries "
          f"(longest {feed.get('longest_retry_s', 0):.1f} s); answers {answers}; connection errors {errors_text}")
    apns = report["apns"]
    if apns["simulator_accepted_broadcasts"] is not None:
        unrecorded = apns["simulator_accepted_broadcasts"] - apns["recorded_accepted_broadcasts"]
        print(f"APNs: the simulator accepted {apns['simulator_accepted_broadcasts']} broadcasts, serve recorded "
              f"{apns['recorded_accepted_broadcasts']} accepted ({unrecorded} accepted but never recorded)")
    if ok:
        print(f"nothing lost: {len(accepted)} accepted updates, {lost['update_rows']} in the database, 0 pending, "
              f"outbox empty; every event's newest accepted update ({len(newest)} of {len(channels)}) was broadcast")
    else:
        print("LOST: " + json.dumps({k: v for k, v in lost.items() if v and k not in ("accepted_updates", "update_rows", "ok")}))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
