// The dashboard page: polls /api/snapshot, /api/instances, /api/inbox and /api/traced, follows
// /api/logs/tail (SSE).
// Everything is built with textContent, never innerHTML: topic names, mail subjects and log
// lines come from outside.

import { barChart, formatBytes, formatCount, formatNumber, formatTime, lineChart } from "./charts.js";

const DEFAULT_REFRESH_MS = 2000;
const TAIL_LINES = 100;
const TAIL_BACKLOG = 20;

const $ = (selector) => document.querySelector(selector);

function el(tag, attrs = {}, ...children) {
  const node = document.createElement(tag);
  for (const [name, value] of Object.entries(attrs)) {
    if (value === null || value === undefined || value === false) continue;
    if (name === "class") node.className = value;
    else node.setAttribute(name, value === true ? "" : String(value));
  }
  for (const child of children) {
    if (child === null || child === undefined) continue;
    node.append(child instanceof Node ? child : String(child));
  }
  return node;
}

// A numeric cell: human text, the raw value in data-value for tests and tooltips.
function numCell(col, value, text = formatCount(value), extra = {}) {
  return el("td", { "data-col": col, "data-value": value ?? "", class: "num", ...extra }, text);
}

function rateText(value) {
  return value === null || value === undefined ? "–" : `${formatNumber(value)}/s`;
}

// -- header ---------------------------------------------------------------------------------

function renderHeader(snap) {
  const totals = snap.cluster.totals;
  const totalLag = snap.groups.reduce((sum, g) => sum + (g.lag ?? 0), 0);
  // "2 of 3" while a broker the dashboard has seen (or a replica names) is down.
  const down = (snap.problems ?? []).filter((p) => p.kind === "broker").length;
  const live = snap.cluster.brokers.length;
  $("#sum-brokers").textContent = down ? `${live} of ${live + down}` : live || "–";
  $("#sum-brokers").className = down ? "lag-positive" : "";
  $("#sum-topics").textContent = formatNumber(totals.topics);
  $("#sum-partitions").textContent = formatNumber(totals.partitions);
  $("#sum-messages").textContent = formatNumber(totals.messages);
  $("#sum-in").textContent = rateText(totals.in_rate);
  $("#sum-groups").textContent = formatNumber(snap.groups.length);
  $("#sum-lag").textContent = formatNumber(totalLag);
  $("#updated").textContent = snap.updated_at
    ? `updated ${formatTime(Date.parse(snap.updated_at))}`
    : "waiting for the first snapshot…";
  setStale(snap.stale, snap.error);
}

// -- problems: what needs a person's attention, at the top ------------------------------------

function ago(iso) {
  const seconds = Math.max(0, Math.round((Date.now() - Date.parse(iso)) / 1000));
  if (seconds < 120) return `${seconds} s`;
  if (seconds < 7200) return `${Math.round(seconds / 60)} min`;
  return `${Math.round(seconds / 3600)} h`;
}

function renderProblems(problems) {
  const box = $("[data-testid=problems]");
  box.hidden = problems.length === 0;
  const items = problems.map((p) =>
    el(
      "li",
      { "data-problem": p.kind, "data-subject": p.subject },
      p.text,
      el("span", { class: "since", title: p.since }, `since ${formatTime(Date.parse(p.since))} (${ago(p.since)})`),
    ),
  );
  box.querySelector("ul").replaceChildren(...items);
}

function setStale(stale, error) {
  $("#stale").hidden = !stale;
  const box = $("#error");
  box.hidden = !error;
  box.textContent = error ?? "";
}

// -- cluster --------------------------------------------------------------------------------

function partitionsTitle(topic) {
  return topic.partition_details
    .map((p) => {
      const size = p.size_bytes === null ? "" : `, ${formatBytes(p.size_bytes)}`;
      const isr = `replicas ${p.replicas.join(",")}, ISR ${p.isr.join(",")}`;
      return `p${p.partition}: offsets ${p.start_offset ?? "?"}–${p.end_offset ?? "?"}${size} (leader ${p.leader}, ${isr})`;
    })
    .join("\n");
}

function renderTopics(cluster) {
  const rows = cluster.topics.map((t) =>
    el(
      "tr",
      { "data-topic": t.name, class: t.internal ? "internal" : null, title: partitionsTitle(t) },
      el("td", { "data-col": "name" }, t.name),
      numCell("partitions", t.partitions),
      numCell("start", t.start_offset),
      numCell("end", t.end_offset),
      numCell("messages", t.messages),
      numCell("size", t.size_bytes, formatBytes(t.size_bytes), { class: t.size_bytes === null ? "num unknown" : "num" }),
      numCell("in-rate", t.in_rate, rateText(t.in_rate)),
    ),
  );
  $("[data-testid=topics-table] tbody").replaceChildren(...rows);
}

function replicaState(p) {
  if (p.offline) return ["offline", "lag-positive"];
  if (p.under_replicated) return ["under-replicated", "lag-positive"];
  return ["in sync", null];
}

function renderReplication(cluster) {
  const totals = cluster.totals;
  const controller = cluster.active_controller;
  $("#repl-controller").textContent = controller === null ? "unknown" : `broker ${controller}`;
  $("#repl-controller").title = `from ${cluster.controller_source}`;
  $("#repl-urp").textContent = formatNumber(totals.under_replicated);
  $("#repl-urp").className = totals.under_replicated ? "lag-positive" : "";
  $("#repl-offline").textContent = formatNumber(totals.offline);
  $("#repl-offline").className = totals.offline ? "lag-positive" : "";
  // The bundled broker's log.durability; a cluster without it (Apache Kafka) shows "not reported".
  $("#repl-durability").textContent = cluster.durability === null ? "not reported" : cluster.durability;
  const rows = [];
  for (const t of cluster.topics) {
    if (t.internal) continue;
    for (const p of t.partition_details) {
      const [state, cls] = replicaState(p);
      rows.push(
        el(
          "tr",
          { "data-topic": t.name, "data-partition": String(p.partition) },
          el("td", { "data-col": "name" }, t.name),
          numCell("partition", p.partition),
          el("td", { class: "num", "data-col": "leader" }, p.leader < 0 ? "none" : String(p.leader)),
          el("td", { "data-col": "replicas" }, p.replicas.join(", ")),
          el("td", { "data-col": "isr" }, p.isr.join(", ")),
          el("td", { "data-col": "state", class: cls }, state),
        ),
      );
      if (cls) rows[rows.length - 1].classList.add("affected");
    }
  }
  $("[data-testid=replication-table] tbody").replaceChildren(...rows);
  // Opened by itself while partitions are affected (unless the user closed it meanwhile).
  const details = $("[data-testid=replication-details]");
  const affected = totals.under_replicated + totals.offline > 0;
  if (affected && !replicationClosedByUser) details.open = true;
  if (!affected) replicationClosedByUser = false;
}

// (A module script runs once the page is parsed: the element is there.)
let replicationClosedByUser = false;
$("[data-testid=replication-details]").addEventListener("toggle", (event) => {
  if (!event.target.open) replicationClosedByUser = true;
});

// -- groups ---------------------------------------------------------------------------------

// A group without members may be a job that commits without joining (the Spark job): its
// commits say which process, when, and how often it commits while running.
function committerLine(c) {
  return el(
    "div",
    { class: "assignment committer", "data-testid": "committer" },
    el("span", { class: "who" }, `job ${c.job} · ${c.client}`),
    ` · last commit ${formatNumber(c.age_s)} s ago, every ${formatNumber(c.every_s)} s`,
    c.batch_age_s === null ? "" : ` · last batch ${formatNumber(c.batch_age_s)} s ago`,
    " · ",
    el("span", { class: c.alive ? "alive" : "lag-positive" }, c.alive ? "alive" : "not committing"),
  );
}

function stateText(group) {
  const c = group.committer;
  if (group.members.length > 0 || !c) return [group.state, group.state];
  return c.alive ? ["Committing", "Stable"] : [`${group.state} (job stopped)`, group.state];
}

// Which group protocol the group uses, as ListGroups says (nothing from a broker too old to say).
function typeBadge(group) {
  const type = group.group_type;
  if (!type) return null;
  const assignor = group.protocol ? ` (assignor ${group.protocol})` : "";
  const [text, title] =
    type === "consumer"
      ? ["consumer protocol", `new consumer group protocol: the broker assigns the partitions${assignor}`]
      : type === "classic"
        ? ["classic", `classic group protocol: a member assigns the partitions${assignor}`]
        : type === "share"
          ? ["share group", `share group (a queue): its members share the partitions, each record acknowledged${assignor}`]
          : [type, `${type} group`];
  return el("span", { class: `badge badge-type type-${type}`, "data-testid": "group-type", title }, text);
}

function assignmentLines(group) {
  if (group.members.length === 0 && group.committer) return [committerLine(group.committer)];
  if (group.members.length === 0) return [el("span", { class: "unknown" }, "no members")];
  return group.members.map((m) => {
    const parts = m.assignment.map((a) => `${a.topic}[${a.partitions.join(",")}]`).join(" ");
    return el(
      "div",
      { class: "assignment", title: m.member_id },
      el("span", { class: "who" }, `${m.client_id}@${m.client_host}`),
      " → ",
      parts || el("span", { class: "unknown" }, "nothing yet"),
    );
  });
}

function detailRow(group, troubled) {
  // A share group has no committed offset: its start offset is the first record it is not done with.
  const position = group.group_type === "share" ? "start offset" : "committed";
  const table = el(
    "table",
    {},
    el("thead", {}, el("tr", {}, ...["topic", "partition", "member", position, "log end", "lag"].map((h) => el("th", {}, h)))),
    el(
      "tbody",
      {},
      ...group.partitions.map((p) =>
        el(
          "tr",
          {},
          el("td", {}, p.topic),
          el("td", { class: "num" }, p.partition),
          el("td", {}, p.member ?? "–"),
          el("td", { class: "num" }, p.committed === null ? "none yet" : formatCount(p.committed)),
          el("td", { class: "num" }, formatCount(p.end_offset)),
          el("td", { class: p.lag && troubled ? "num lag-positive" : "num" }, formatCount(p.lag)),
        ),
      ),
    ),
  );
  // Collapsible; open at first for a group with few partitions.  The page is rebuilt on every
  // refresh, so what the user opened or closed is remembered here.
  const open = detailsOpen.get(group.group_id) ?? group.partitions.length <= 6;
  const details = el(
    "details",
    { open },
    el("summary", {}, `${group.partitions.length} partition${group.partitions.length === 1 ? "" : "s"}: ${position}, log end, lag`),
    table,
  );
  details.addEventListener("toggle", () => detailsOpen.set(group.group_id, details.open));
  const cell = el("td", { colspan: 8 }, group.error ? el("p", { class: "unknown" }, group.error) : null, details);
  return el("tr", { class: "detail", "data-group-detail": group.group_id }, cell);
}

const detailsOpen = new Map();

function renderGroups(groups, problems) {
  // Lag is normal for a group that is consuming (the analytics job reads in batches); it is
  // marked only for a group the banner names: no consumers left, or a job that stopped.
  const troubled = new Set(problems.filter((p) => p.kind === "group").map((p) => p.subject.slice("group ".length)));
  for (const g of groups) if (g.committer && !g.committer.alive) troubled.add(g.group_id);
  const rows = [];
  for (const g of groups) {
    rows.push(
      el(
        "tr",
        { "data-group": g.group_id },
        el("td", { "data-col": "group" }, g.group_id, " ", typeBadge(g)),
        el("td", { "data-col": "state", class: `state state-${stateText(g)[1]}` }, stateText(g)[0]),
        numCell("members", g.members.length, String(g.members.length)),
        el("td", { "data-col": "topics" }, g.topics.join(", ")),
        el("td", { "data-col": "assignments" }, ...assignmentLines(g)),
        numCell("lag", g.lag, formatCount(g.lag), { class: g.lag && troubled.has(g.group_id) ? "num lag-positive" : "num" }),
        numCell("out-rate", g.out_rate, rateText(g.out_rate)),
        numCell("rebalances", g.rebalances, String(g.rebalances)),
      ),
    );
    if (g.partitions.length > 0 || g.error) rows.push(detailRow(g, troubled.has(g.group_id)));
  }
  $("[data-testid=groups-table] tbody").replaceChildren(...rows);
}

// -- transactions ---------------------------------------------------------------------------

function renderTransactions(txns) {
  $("[data-testid=transactions-unknown]").hidden = txns?.known !== false;
  const rows = (txns?.open ?? []).map((t) =>
    el(
      "tr",
      { "data-transaction": t.transactional_id },
      el("td", { "data-col": "id" }, t.transactional_id),
      el("td", { "data-col": "state" }, t.state),
      numCell("producer", t.producer_id, `${t.producer_id} / ${t.producer_epoch}`),
      numCell("age", t.age_s, t.age_s == null ? "–" : `${t.age_s.toFixed(1)} s`),
      numCell("timeout", t.timeout_ms, `${(t.timeout_ms / 1000).toFixed(0)} s`),
      el(
        "td",
        { "data-col": "partitions" },
        t.partitions.map((p) => `${p.topic}-${p.partition} (${formatCount(p.lso_lag)})`).join(", "),
      ),
      numCell("lso-lag", t.lso_lag, formatCount(t.lso_lag), { class: t.lso_lag ? "num lag-positive" : "num" }),
    ),
  );
  $("[data-testid=transactions-table] tbody").replaceChildren(...rows);
  $("[data-testid=transactions-none]").hidden = txns?.known === false || rows.length > 0;
}

// -- history charts -------------------------------------------------------------------------

function seriesFromHistory(history, field) {
  const byName = new Map();
  for (const point of history) {
    for (const [name, value] of Object.entries(point[field])) {
      if (!byName.has(name)) byName.set(name, []);
      byName.get(name).push([point.t, value]);
    }
  }
  return [...byName.entries()].sort(([a], [b]) => a.localeCompare(b)).map(([name, points]) => ({ name, points }));
}

function renderHistory(history) {
  lineChart($("[data-testid=chart-messages-in]"), seriesFromHistory(history, "messages_in"), {
    format: (v) => formatNumber(v),
    empty: "collecting… (a rate needs two snapshots)",
  });
  lineChart($("[data-testid=chart-lag]"), seriesFromHistory(history, "lag"), { empty: "no consumer groups yet" });
}

// -- analytics ------------------------------------------------------------------------------

function metricSeries(analytics, metric, suffix = "") {
  const byLabel = analytics.series[metric] ?? {};
  return Object.keys(byLabel)
    .sort()
    .map((label) => ({ name: label + suffix, points: byLabel[label] }));
}

function renderAnalytics(analytics) {
  $("#metrics-topic").textContent = analytics.topic;
  const status = $("[data-testid=analytics-status]");
  if (analytics.state === "ready") {
    status.textContent = `${formatNumber(analytics.metrics)} metrics, latest window ${formatTime(analytics.latest_window_ms, false)}`;
  } else if (analytics.topic_found) {
    status.textContent = "waiting for the analytics job… (its topic has no metric yet)";
  } else {
    status.textContent = `waiting for the analytics job… (no topic ${analytics.topic} yet: start it with streamshop analytics run)`;
  }
  const bad = $("#analytics-undecodable");
  bad.hidden = analytics.undecodable === 0;
  bad.textContent = `${analytics.undecodable} undecodable record${analytics.undecodable === 1 ? "" : "s"} skipped`;
  bad.title = analytics.last_undecodable ?? "";

  const waiting = "waiting for the analytics job…";
  const opts = { withSeconds: false, empty: waiting, minSpanMs: 5 * 60_000 };
  lineChart($("[data-testid=chart-orders]"), metricSeries(analytics, "orders.count"), opts);
  // One axis for every currency, logarithmic: 1,000 JPY and 7 EUR both keep their shape.
  lineChart($("[data-testid=chart-revenue]"), metricSeries(analytics, "orders.revenue"), { ...opts, logScale: true });
  barChart(
    $("[data-testid=funnel]"),
    analytics.funnel.map((f) => ({ name: f.status, value: f.count })),
    { empty: waiting, rowAttribute: "data-stage" },
  );
  lineChart($("[data-testid=chart-otp-success]"), metricSeries(analytics, "otp.success_rate"), {
    ...opts,
    yMax: 1,
    format: (v) => `${Math.round(v * 100)}%`,
  });
  lineChart(
    $("[data-testid=chart-otp-latency]"),
    [...metricSeries(analytics, "otp.latency_p50", " p50"), ...metricSeries(analytics, "otp.latency_p95", " p95")],
    { ...opts, format: (v) => `${formatNumber(v)} ms` },
  );
  const quarantined = logsQuarantined(analytics);
  lineChart($("[data-testid=chart-errors]"), metricSeries(analytics, "logs.errors"), {
    ...opts,
    empty: quarantined > 0 ? `no log metrics: the job could not decode ${formatNumber(quarantined)} logs.* records` : waiting,
  });
}

// Records of the logs.* topics the job could not decode, summed over the windows kept: says
// why the errors chart is empty when it is.
function logsQuarantined(analytics) {
  const byTopic = analytics.series["analytics.quarantined"] ?? {};
  return Object.entries(byTopic)
    .filter(([topic]) => topic.startsWith("logs."))
    .reduce((sum, [, points]) => sum + points.reduce((s, p) => s + p[1], 0), 0);
}

// -- polling --------------------------------------------------------------------------------

let refreshMs = DEFAULT_REFRESH_MS;
// The trace viewer's page of a trace ("{trace_id}" for the id), from the snapshot; null: no viewer.
let traceLink = null;

function render(snap) {
  const problems = snap.problems ?? [];
  renderHeader(snap);
  renderProblems(problems);
  renderTopics(snap.cluster);
  renderReplication(snap.cluster);
  renderGroups(snap.groups, problems);
  renderTransactions(snap.transactions);
  renderHistory(snap.history);
  renderAnalytics(snap.analytics);
  document.body.dataset.updated = snap.updated_at ?? "";
}

async function refreshSnapshot() {
  try {
    const response = await fetch("/api/snapshot", { cache: "no-store" });
    if (!response.ok) throw new Error(`HTTP ${response.status}`);
    const snap = await response.json();
    refreshMs = Math.max(500, Math.round((snap.refresh_interval ?? 2) * 1000));
    traceLink = typeof snap.trace_link === "string" ? snap.trace_link : null;
    render(snap);
  } catch (error) {
    setStale(true, `the dashboard does not answer: ${error.message}`);
  } finally {
    setTimeout(refreshSnapshot, refreshMs);
  }
}

// The JSON answer of one of the dashboard's own routes; its error message when it is not 2xx.
async function getJson(path) {
  const response = await fetch(path, { cache: "no-store" });
  const body = await response.json();
  if (!response.ok) throw new Error(body.message ?? `HTTP ${response.status}`);
  return body;
}

async function refreshInbox() {
  const status = $("#inbox-status");
  try {
    const body = await getJson("/api/inbox");
    status.textContent = body.total === 0 ? "no mail yet" : `${body.total} mail${body.total === 1 ? "" : "s"} received`;
    const items = body.items.map((m) =>
      el(
        "li",
        { "data-mail": m.id },
        el("span", { class: "time", title: m.received_at }, formatTime(Date.parse(m.received_at))),
        el("span", { class: "subject" }, m.subject ?? "(no subject)"),
        el("span", { class: "to" }, `to ${(m.to ?? []).join(", ")}`),
      ),
    );
    $("[data-testid=inbox]").replaceChildren(...items);
  } catch (error) {
    status.textContent = `inbox unavailable: ${error.message}`;
  } finally {
    setTimeout(refreshInbox, refreshMs);
  }
}

// An instance with no log line for this long is marked quiet (stopped, hung, or idle and silent).
const QUIET_AFTER_MS = 60_000;

async function refreshInstances() {
  const status = $("#instances-status");
  try {
    const body = await getJson("/api/instances");
    const services = new Set(body.items.map((i) => i.service));
    status.textContent =
      body.items.length === 0
        ? "no instance has logged in the last five minutes"
        : `${body.items.length} instance${body.items.length === 1 ? "" : "s"} of ${services.size} service${services.size === 1 ? "" : "s"}`;
    const rows = body.items.map((i) => {
      const quiet = Date.now() - Date.parse(i.last_seen) > QUIET_AFTER_MS;
      return el(
        "tr",
        { "data-instance": i.instance, class: quiet ? "quiet" : "" },
        el("td", {}, i.service),
        el("td", {}, i.instance, quiet ? el("span", { class: "badge badge-warn" }, "quiet") : ""),
        el("td", { class: "num" }, formatNumber(i.requests)),
        el("td", { class: i.errors > 0 ? "num errors-positive" : "num" }, formatNumber(i.errors)),
        el("td", { class: "num" }, formatNumber(i.lines)),
        el("td", { title: i.last_seen }, `${ago(i.last_seen)} ago`),
      );
    });
    $("[data-testid=instances-table] tbody").replaceChildren(...rows);
  } catch (error) {
    status.textContent = `instances unavailable: ${error.message}`;
  } finally {
    setTimeout(refreshInstances, Math.max(refreshMs, 5000));
  }
}

async function refreshTraced() {
  const status = $("#traced-status");
  try {
    const body = await getJson("/api/traced");
    status.textContent = body.error ?? (body.items.length === 0 ? "none yet" : "");
    const rows = body.items.map((r) => {
      const where = `${r.topic}[${r.partition}]@${r.offset}`;
      const what = r.error ? `${r.kind}: ${r.error}` : r.kind;
      return el(
        "tr",
        { "data-traced": where },
        el("td", { title: r.timestamp ?? "" }, r.timestamp ? formatTime(Date.parse(r.timestamp)) : ""),
        el("td", {}, what),
        el("td", {}, r.key ?? ""),
        el("td", { title: r.original_topic ? `from ${r.original_topic}` : "" }, where),
        el("td", {}, ...traceLinks(r.trace_id)),
      );
    });
    $("[data-testid=traced-table] tbody").replaceChildren(...rows);
  } catch (error) {
    status.textContent = `unavailable: ${error.message}`;
  } finally {
    setTimeout(refreshTraced, Math.max(refreshMs, 5000));
  }
}

// -- live log tail ---------------------------------------------------------------------------

// An access log line says what was asked and answered: "POST /orders → 201 in 4.2 ms".
function logText(record) {
  const f = record.fields ?? {};
  if (f.method && f.path) {
    const took = typeof f.duration_ms === "number" ? ` in ${formatNumber(f.duration_ms)} ms` : "";
    return `${f.method} ${f.path} → ${f.status ?? "?"}${took}`;
  }
  return record.event ?? "";
}

// A trace id as W3C trace-context writes it; anything else in a record gets no link.
const TRACE_ID = /^[0-9a-f]{32}$/;

// The links of a traced line: its trace in the viewer (when there is one), and its trace's lines here.
function traceLinks(traceId) {
  if (typeof traceId !== "string" || !TRACE_ID.test(traceId)) return [];
  const links = [" ", el("button", { type: "button", class: "link", "data-trace-logs": traceId }, "logs of this trace")];
  if (traceLink) {
    const href = traceLink.replace("{trace_id}", traceId);
    links.unshift(" ", el("a", { href, target: "_blank", rel: "noopener noreferrer", "data-trace": traceId }, "trace"));
  }
  return links;
}

function logLine(record) {
  const level = String(record.level ?? "info").toLowerCase();
  return el(
    "li",
    { "data-log-line": record.id, title: JSON.stringify(record.fields ?? {}) },
    el("span", { class: "time" }, formatTime(Date.parse(record.timestamp))),
    " ",
    el("span", { class: `level level-${level}` }, level),
    " ",
    el("span", { class: "service" }, record.service ?? "?"),
    ...traceLinks(record.trace_id), // before the text: a long line is cut at its end
    " ",
    el("span", { class: "message", "data-testid": "log-text" }, logText(record)),
  );
}

let tailSource = null;

// Follows every line, or only those of one trace (the logs service's trace_id filter).
function followLogs(traceId = null) {
  const list = $("[data-testid=log-tail]");
  const status = $("#tail-status");
  tailSource?.close();
  list.replaceChildren();
  const filter = traceId ? `&trace_id=${encodeURIComponent(traceId)}` : "";
  const live = traceId ? `trace ${traceId}: live` : "live";
  $("#tail-all").hidden = !traceId;
  // EventSource reconnects by itself, with Last-Event-ID: no line is shown twice.
  const source = new EventSource(`/api/logs/tail?backlog=${TAIL_BACKLOG}${filter}`);
  tailSource = source;
  source.onopen = () => {
    status.textContent = live;
  };
  source.onerror = () => {
    status.textContent = "logs service unavailable; retrying…";
  };
  source.addEventListener("log", (event) => {
    let record;
    try {
      record = JSON.parse(event.data);
    } catch {
      return;
    }
    list.prepend(logLine(record));
    while (list.children.length > TAIL_LINES) list.lastElementChild.remove();
  });
}

// "logs of this trace", on a log line or a record: the tail follows that trace alone.
document.addEventListener("click", (event) => {
  const traceId = event.target.closest?.("[data-trace-logs]")?.dataset.traceLogs;
  if (!traceId || !TRACE_ID.test(traceId)) return;
  followLogs(traceId);
  $("#logs").scrollIntoView();
});
$("#tail-all").addEventListener("click", () => followLogs());

// The tail starts once the first snapshot said whether there is a trace viewer to link to.
refreshSnapshot().finally(() => {
  followLogs();
  refreshTraced();
});
refreshInbox();
refreshInstances();
