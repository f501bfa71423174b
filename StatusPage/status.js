// The status page's script: asks once for a key (kept in this tab's sessionStorage, never a cookie or the URL), then
// every few seconds reads GET /v1/status and GET /v1/status/board and draws them. Every value from the API is written
// with textContent: external ids, reasons and topics come from feeds, apps and APNs, and are shown as typed.
"use strict";

const storageKey = "marquee.statusKey";
const refreshSeconds = 5;
let timer = null;

const byId = (id) => document.getElementById(id);

/** A new element with a class and a text; the text is never parsed as markup. */
function element(tag, className, text) {
  const node = document.createElement(tag);
  if (className) node.className = className;
  if (text !== undefined && text !== null) node.textContent = String(text);
  return node;
}

/** A table cell: text, or a node. */
function cell(value, className) {
  const td = element("td", className);
  if (value instanceof Node) td.append(value);
  else td.textContent = value === null || value === undefined ? "–" : String(value);
  return td;
}

function number(value) {
  return typeof value === "number" ? value.toLocaleString("en-US") : "–";
}

function seconds(value) {
  if (typeof value !== "number") return "–";
  if (value < 1) return `${Math.round(value * 1000)} ms`;
  if (value < 120) return `${Math.round(value * 10) / 10} s`;
  if (value < 7200) return `${Math.round(value / 60)} min`;
  return `${Math.round(value / 360) / 10} h`;
}

function time(iso) {
  if (!iso) return "–";
  const date = new Date(iso);
  if (Number.isNaN(date.getTime())) return String(iso);
  const sameDay = date.toDateString() === new Date().toDateString();
  const clock = date.toLocaleTimeString("en-GB", { hour: "2-digit", minute: "2-digit" });
  return sameDay ? clock : `${date.toLocaleDateString("en-GB", { day: "numeric", month: "short" })} ${clock}`;
}

function tag(text) {
  return element("span", `tag ${String(text).replace(/[^a-z_]/g, "")}`, text);
}

/** Replaces a table's rows, or shows its empty note. */
function fillTable(tableId, emptyId, rows) {
  const body = byId(tableId).tBodies[0];
  body.replaceChildren(...rows);
  byId(tableId).hidden = rows.length === 0;
  byId(emptyId).hidden = rows.length !== 0;
}

function row(dataset, cells) {
  const tr = element("tr");
  for (const [name, value] of Object.entries(dataset)) tr.dataset[name] = String(value);
  tr.append(...cells);
  return tr;
}

// ---- drawing

function drawQuota(apps) {
  const items = apps.map((app) => {
    const share = app.quota > 0 ? app.inUse / app.quota : 0;
    const item = element("li", share >= 0.95 ? "critical" : share >= 0.8 ? "warn" : "");
    item.dataset.app = String(app.app);
    const label = element("div", "label");
    label.append(
      element("span", "name", `${app.bundleId} (${app.environment}) · app ${app.app}`),
      element("span", "share", `${number(app.inUse)} / ${number(app.quota)} · ${Math.round(share * 1000) / 10} %`),
    );
    const track = element("div", "track");
    const fill = element("div", "fill");
    fill.style.width = `${Math.min(100, share * 100)}%`;
    track.append(fill);
    item.append(label, track);
    return item;
  });
  if (items.length === 0) items.push(element("li", "empty", "No app is registered."));
  byId("quota").replaceChildren(...items);
}

function drawEvents(events) {
  fillTable(
    "events",
    "events-empty",
    events.map((event) =>
      row({ event: event.id }, [
        cell(event.id, "number"),
        cell(event.externalId, "text"),
        cell(event.app, "number"),
        cell(tag(event.status)),
        cell(time(event.startsAt)),
        cell(time(event.endsAt)),
        cell(tag(event.channelLost ? "lost" : event.channelState || "none")),
      ]),
    ),
  );
}

function drawBroadcasts(broadcasts) {
  byId("broadcast-rate").textContent = `${broadcasts.perSecond} /s`;
  byId("broadcast-count").textContent = number(broadcasts.accepted);
  const { p50, p99, buckets } = broadcasts.latency;
  const bound = (value) => (value === null ? (broadcasts.accepted > 0 ? "> 30 s" : "–") : `≤ ${seconds(value)}`);
  byId("broadcast-quantiles").textContent = `${bound(p50)} / ${bound(p99)}`;
  // Cumulative buckets to counts per bucket, and what fell past the last bound.
  const columns = buckets.map((bucket, index) => ({
    label: `≤${seconds(bucket.le)}`,
    count: bucket.count - (index > 0 ? buckets[index - 1].count : 0),
  }));
  columns.push({ label: `>${seconds(buckets.length ? buckets[buckets.length - 1].le : 0)}`, count: broadcasts.accepted - (buckets.length ? buckets[buckets.length - 1].count : 0) });
  const highest = Math.max(1, ...columns.map((column) => column.count));
  byId("latency").replaceChildren(
    ...columns.map((column) => {
      const item = element("li");
      item.dataset.count = String(column.count);
      const bar = element("div", "column");
      bar.style.height = `${(column.count / highest) * 80}%`;
      item.append(element("span", "count", column.count || ""), bar, element("span", "bound", column.label));
      return item;
    }),
  );
}

function drawFigures(status, board) {
  byId("outbox-backlog").textContent = number(status.outboxBacklog);
  const oldest = byId("outbox-oldest");
  oldest.textContent = status.oldestOutboxAgeSeconds === null ? "–" : seconds(status.oldestOutboxAgeSeconds);
  oldest.classList.toggle("bad", (status.oldestOutboxAgeSeconds || 0) > 30);
  const leader = byId("scheduler-leader");
  leader.textContent = board.scheduler.leader || "none";
  leader.classList.toggle("bad", !board.scheduler.leader);
  const mirroring = status.mirroring || {};
  byId("mirroring-passes").textContent = number(mirroring.passesRunning);
  const lag = byId("mirroring-lag");
  lag.textContent = mirroring.oldestPassAgeSeconds === null || mirroring.oldestPassAgeSeconds === undefined ? "–" : seconds(mirroring.oldestPassAgeSeconds);
  lag.classList.toggle("bad", (mirroring.oldestPassAgeSeconds || 0) > 60);
}

function drawStarts(runs) {
  const sum = (object) => Object.values(object || {}).reduce((total, value) => total + value, 0);
  fillTable(
    "starts",
    "starts-empty",
    runs.map((run) =>
      row({ run: run.id, event: run.eventId }, [
        cell(run.id, "number"),
        cell(run.eventId, "number"),
        cell(tag(run.state)),
        cell(number(run.counts.audience), "number"),
        cell(number(run.counts.accepted), "number accepted"),
        cell(number(sum(run.counts.rejected)), "number rejected"),
        cell(number(run.counts.unknown), "number unknown"),
        cell(number(sum(run.counts.skipped)), "number skipped"),
        cell(`${run.progress.ratePerSecond} /s`, "number"),
        cell(run.state !== "running" ? "first pass done" : run.progress.etaSeconds === null ? "–" : seconds(run.progress.etaSeconds), "number"),
      ]),
    ),
  );
}

function drawErrors(errors) {
  fillTable(
    "errors",
    "errors-empty",
    errors.map((error) =>
      row({ reason: error.reason }, [cell(error.reason, "text"), cell(error.status, "number"), cell(number(error.count), "number count"), cell(time(error.lastAt))]),
    ),
  );
}

function drawLost(lost) {
  fillTable(
    "lost",
    "lost-empty",
    lost.map((item) => row({ event: item.event }, [cell(item.event, "number"), cell(item.externalId, "text"), cell(item.app, "number"), cell(item.lastError, "text")])),
  );
}

function drawParked(apps) {
  const parked = apps.filter((app) => app.credentialsFault);
  fillTable(
    "parked",
    "parked-empty",
    parked.map((app) =>
      row({ app: app.app }, [
        cell(`${app.bundleId} (${app.app})`, "text"),
        cell(app.credentialsFault.reason, "text"),
        cell(time(app.credentialsFault.since)),
        cell(time(app.credentialsFault.retryAt)),
        cell(app.credentialsFault.strikes, "number"),
      ]),
    ),
  );
}

// ---- the key and the refresh loop

class Refused extends Error {
  constructor(status, message) {
    super(message);
    this.status = status;
  }
}

async function read(path, key) {
  const response = await fetch(path, { headers: { Authorization: `Bearer ${key}` }, cache: "no-store", credentials: "omit" });
  if (!response.ok) {
    let message = `HTTP ${response.status}`;
    try {
      const body = await response.json();
      if (body && body.error && body.error.message) message = body.error.message;
    } catch (ignored) {
      // Not JSON: keep the status.
    }
    throw new Refused(response.status, message);
  }
  return response.json();
}

function showLogin(message) {
  clearTimeout(timer);
  sessionStorage.removeItem(storageKey);
  byId("board").hidden = true;
  byId("forget").hidden = true;
  byId("problem").hidden = true;
  byId("login").hidden = false;
  byId("login-message").textContent = message || "";
  byId("updated").textContent = "";
  document.body.dataset.state = message ? "refused" : "login";
  byId("key").focus();
}

async function refresh() {
  clearTimeout(timer);
  const key = sessionStorage.getItem(storageKey);
  if (!key) return showLogin("");
  try {
    const [status, board] = await Promise.all([read("/v1/status", key), read("/v1/status/board", key)]);
    drawQuota(status.apps);
    drawEvents(board.events);
    drawBroadcasts(board.broadcasts);
    drawFigures(status, board);
    drawStarts(board.startRuns);
    drawErrors(board.errorsByReason);
    drawLost(status.lostChannels);
    drawParked(status.apps);
    byId("login").hidden = true;
    byId("problem").hidden = true;
    byId("board").hidden = false;
    byId("forget").hidden = false;
    byId("updated").textContent = `Updated ${new Date().toLocaleTimeString("en-GB")}, every ${refreshSeconds} s`;
    document.body.dataset.state = "ready";
    document.body.dataset.refreshes = String(Number(document.body.dataset.refreshes || 0) + 1);
  } catch (error) {
    if (error instanceof Refused && error.status === 401) {
      return showLogin(`The key was refused (401): ${error.message}. Check it, or make one with marquee key create --scope status.`);
    }
    if (error instanceof Refused && error.status === 403) {
      return showLogin(`This key may not read the status (403): it needs the status or admin scope.`);
    }
    // The server is restarting or unreachable: say so, keep the last picture, try again.
    byId("problem").textContent = `Could not refresh: ${error.message}. Retrying every ${refreshSeconds} s.`;
    byId("problem").hidden = false;
    document.body.dataset.state = "stale";
  }
  timer = setTimeout(refresh, refreshSeconds * 1000);
}

document.addEventListener("DOMContentLoaded", () => {
  byId("login").addEventListener("submit", (event) => {
    event.preventDefault();
    const key = byId("key").value.trim();
    byId("key").value = "";
    if (!key) return;
    sessionStorage.setItem(storageKey, key);
    byId("login-message").textContent = "";
    document.body.dataset.state = "loading";
    refresh();
  });
  byId("forget").addEventListener("click", () => showLogin(""));
  refresh();
});
