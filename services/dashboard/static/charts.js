// Small SVG charts, no library: a line chart over time with a legend, and horizontal bars.
// Every series is drawn as <path data-series="NAME">, the hook the browser tests look for.

const SVG_NS = "http://www.w3.org/2000/svg";
const WIDTH = 640;
const HEIGHT = 220;
const MARGIN = { left: 56, right: 14, top: 30, bottom: 24 };
const PALETTE = ["#2f6fdf", "#e8590c", "#2b8a3e", "#c2255c", "#7048e8", "#0b7285", "#e67700", "#5c940d", "#862e9c", "#495057"];

function svgEl(tag, attrs = {}, text = null) {
  const node = document.createElementNS(SVG_NS, tag);
  for (const [name, value] of Object.entries(attrs)) node.setAttribute(name, String(value));
  if (text !== null) node.textContent = text;
  return node;
}

// Colours go by position: series are given sorted by name, so a series keeps its colour from
// one refresh to the next unless a new one sorts before it.
export function colorAt(index) {
  return PALETTE[index % PALETTE.length];
}

export function formatNumber(value) {
  if (value === null || value === undefined || Number.isNaN(value)) return "–";
  const abs = Math.abs(value);
  if (abs >= 1e9) return (value / 1e9).toFixed(1) + "G";
  if (abs >= 1e6) return (value / 1e6).toFixed(1) + "M";
  if (abs >= 1e4) return (value / 1e3).toFixed(1) + "k";
  if (Number.isInteger(value)) return value.toLocaleString("en-US");
  return value.toLocaleString("en-US", { maximumFractionDigits: abs < 10 ? 2 : 1 });
}

// Exact counts (offsets, lag) in tables: 1,234,567 rather than 1.2M.
export function formatCount(value) {
  if (value === null || value === undefined) return "–";
  return value.toLocaleString("en-US");
}

export function formatBytes(bytes) {
  if (bytes === null || bytes === undefined) return "unknown";
  const units = ["B", "KB", "MB", "GB", "TB"];
  let value = bytes;
  let unit = 0;
  while (value >= 1024 && unit < units.length - 1) {
    value /= 1024;
    unit += 1;
  }
  return (unit === 0 ? value.toFixed(0) : value.toFixed(1)) + " " + units[unit];
}

const pad2 = (n) => String(n).padStart(2, "0");

export function formatTime(ms, withSeconds = true) {
  const d = new Date(ms);
  const hm = `${pad2(d.getHours())}:${pad2(d.getMinutes())}`;
  return withSeconds ? `${hm}:${pad2(d.getSeconds())}` : hm;
}

// A round upper bound for the y axis: 1, 2 or 5 times a power of ten.
function niceMax(value) {
  if (!(value > 0)) return 1;
  const power = 10 ** Math.floor(Math.log10(value));
  for (const step of [1, 2, 5, 10]) {
    if (value <= step * power) return step * power;
  }
  return 10 * power;
}

function clear(svg) {
  svg.replaceChildren();
  svg.setAttribute("viewBox", `0 0 ${WIDTH} ${HEIGHT}`);
}

function emptyMessage(svg, message) {
  svg.append(svgEl("text", { x: WIDTH / 2, y: HEIGHT / 2, "text-anchor": "middle", class: "empty" }, message));
}

function legend(svg, names) {
  const group = svgEl("g", { class: "legend" });
  let x = MARGIN.left;
  let y = 12;
  names.forEach((name, index) => {
    const width = 22 + name.length * 6.5;
    if (x + width > WIDTH - MARGIN.right && x > MARGIN.left) {
      x = MARGIN.left;
      y += 14;
    }
    group.append(svgEl("rect", { x, y: y - 8, width: 10, height: 10, rx: 2, fill: colorAt(index) }));
    group.append(svgEl("text", { x: x + 14, y: y + 1 }, name));
    x += width;
  });
  svg.append(group);
}

function linearAxis(top) {
  return { fraction: (v) => Math.min(v, top) / top, ticks: [0, 0.25, 0.5, 0.75, 1].map((f) => top * f) };
}

// Powers of ten from below the smallest positive value to above the largest; zero and negative
// values sit on the bottom line.
function logAxis(values) {
  const positive = values.filter((v) => v > 0);
  const low = Math.floor(Math.log10(positive.length ? Math.min(...positive) : 1));
  const high = Math.max(low + 1, Math.ceil(Math.log10(positive.length ? Math.max(...positive) : 10)));
  const fraction = (v) => (v > 0 ? Math.min(1, Math.max(0, (Math.log10(v) - low) / (high - low))) : 0);
  const ticks = [];
  for (let e = low; e <= high; e += 1) ticks.push(10 ** e);
  return { fraction, ticks };
}

/**
 * Line chart over time.
 * series: [{name, points: [[timeMs, value], ...]}];
 * options: {format(value), yMax, withSeconds, empty (text without data), minSpanMs (time axis of a
 * lone point), logScale (a logarithmic value axis: series of very different sizes, such as revenue
 * in JPY and in EUR, each keep their shape)}
 */
export function lineChart(svg, series, options = {}) {
  const { format = formatNumber, yMax = null, withSeconds = true, empty = "no data yet", minSpanMs = 60_000 } = options;
  const logScale = options.logScale ?? false;
  clear(svg);
  const drawn = series.filter((s) => s.points.length > 0);
  if (drawn.length === 0) {
    emptyMessage(svg, empty);
    return;
  }
  const all = drawn.flatMap((s) => s.points);
  // The time axis runs from the first point to the newest; a lone point gets `minSpanMs`.
  const t1 = Math.max(...all.map((p) => p[0]));
  const first = Math.min(...all.map((p) => p[0]));
  const t0 = first < t1 ? first : t1 - minSpanMs;
  const plotW = WIDTH - MARGIN.left - MARGIN.right;
  const plotH = HEIGHT - MARGIN.top - MARGIN.bottom;
  const x = (t) => MARGIN.left + ((t - t0) / (t1 - t0)) * plotW;
  const scale = logScale ? logAxis(all.map((p) => p[1])) : linearAxis(yMax ?? niceMax(Math.max(...all.map((p) => p[1]))));
  const y = (v) => MARGIN.top + plotH - scale.fraction(v) * plotH;

  const axes = svgEl("g", { "data-scale": logScale ? "log" : "linear" });
  scale.ticks.forEach((value, i) => {
    const rule = { x1: MARGIN.left, x2: WIDTH - MARGIN.right, y1: y(value), y2: y(value) };
    axes.append(svgEl("line", { ...rule, class: i === 0 ? "axis" : "grid" }));
    axes.append(svgEl("text", { x: MARGIN.left - 6, y: y(value) + 4, "text-anchor": "end" }, format(value)));
  });
  const ticks = 4;
  let previous = null;
  for (let i = 0; i <= ticks; i += 1) {
    const t = t0 + ((t1 - t0) * i) / ticks;
    const label = formatTime(t, withSeconds);
    if (label === previous) continue; // a short axis: one label per distinct time
    previous = label;
    const anchor = i === 0 ? "start" : i === ticks ? "end" : "middle";
    axes.append(svgEl("text", { x: x(t), y: HEIGHT - 6, "text-anchor": anchor, "data-tick": t }, label));
  }
  svg.append(axes);

  drawn.forEach((s, index) => {
    const color = colorAt(index);
    const points = [...s.points].sort((a, b) => a[0] - b[0]);
    const last = points[points.length - 1];
    const [lx, ly] = [x(last[0]), y(last[1])];
    // The line, then a small square on the latest point: it marks the current value, shows a
    // series that has one point only, and gives a flat line a non-empty bounding box.
    const line = points.map((p, i) => `${i === 0 ? "M" : "L"}${x(p[0]).toFixed(1)},${y(p[1]).toFixed(1)}`).join(" ");
    const marker = `M${(lx - 2.5).toFixed(1)},${(ly - 2.5).toFixed(1)} h5 v5 h-5 Z`;
    const path = svgEl("path", { d: `${line} ${marker}`, class: "series", stroke: color, "data-series": s.name });
    path.append(svgEl("title", {}, `${s.name}: ${format(last[1])} at ${formatTime(last[0], withSeconds)}`));
    svg.append(path);
  });
  legend(svg, drawn.map((s) => s.name));
}

/**
 * Horizontal bars, one per row, in the order given: rows [{name, value}].  options.rowAttribute
 * names one more attribute carrying the row's name on each bar (the funnel's data-stage).
 */
export function barChart(svg, rows, options = {}) {
  const { format = formatNumber, empty = "no data yet", rowAttribute = null } = options;
  clear(svg);
  if (rows.length === 0) {
    emptyMessage(svg, empty);
    return;
  }
  const left = 90;
  const right = 70;
  const top = 12;
  const rowH = Math.min(34, (HEIGHT - top - 8) / rows.length);
  const barH = rowH * 0.7;
  const max = Math.max(1, ...rows.map((r) => r.value));
  const plotW = WIDTH - left - right;
  rows.forEach((row, i) => {
    const y = top + i * rowH;
    const w = Math.max(1, (row.value / max) * plotW);
    svg.append(svgEl("text", { x: left - 8, y: y + barH / 2 + 4, "text-anchor": "end", class: "bar-label" }, row.name));
    const path = svgEl("path", {
      d: `M${left},${y.toFixed(1)} h${w.toFixed(1)} v${barH.toFixed(1)} h${(-w).toFixed(1)} Z`,
      fill: colorAt(i),
      "data-series": row.name,
      ...(rowAttribute ? { [rowAttribute]: row.name } : {}),
    });
    path.append(svgEl("title", {}, `${row.name}: ${format(row.value)}`));
    svg.append(path);
    svg.append(svgEl("text", { x: left + w + 6, y: y + barH / 2 + 4 }, format(row.value)));
  });
}
