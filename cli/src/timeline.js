// Draws the timeline page from its inline data: per process and device, the
// bytes on the device and spilled to host memory stacked over time, the
// quota as a dashed line, marks for spills and moves, a tooltip with the
// values under the pointer, and a table of the largest allocations. No
// request leaves the page.
"use strict";
(function () {
  const data = JSON.parse(document.getElementById("data").textContent);
  const SVG = "http://www.w3.org/2000/svg";
  const tip = document.getElementById("tip");
  const units = ["B", "KiB", "MiB", "GiB", "TiB"];
  function bytes(n) {
    let i = 0;
    while (n >= 1024 && i < units.length - 1) { n /= 1024; i++; }
    return (i ? n.toFixed(2) : String(n)) + " " + units[i];
  }
  function el(name, attrs, parent) {
    const node = document.createElementNS(SVG, name);
    for (const k in attrs) node.setAttribute(k, attrs[k]);
    if (parent) parent.appendChild(node);
    return node;
  }
  const W = 900, H = 220, L = 70, R = 20, T = 10, B = 40;
  const colors = { spill: "#f58518", promotion: "#54a24b", demotion: "#b279a2", rejection: "#d62728",
    "quota change": "#000", "pool budget change": "#555" };
  function chart(spec, root) {
    const box = document.createElement("div");
    box.className = "chart";
    const h = document.createElement("h3");
    h.textContent = spec.title;
    box.appendChild(h);
    const svg = el("svg", { width: W, height: H, viewBox: "0 0 " + W + " " + H, role: "img" }, box);
    root.appendChild(box);
    const pts = spec.points;
    if (!pts.length) return;
    // The chart ends with the trace, so that marks after the last change fit.
    const t0 = 0, t1 = Math.max(pts[pts.length - 1][0], spec.end || 0, 1e-3);
    let top = 0;
    for (const p of pts) top = Math.max(top, p[1] + p[2], p[3] || 0);
    top = Math.max(top, 1) * 1.05;
    const x = (t) => L + (W - L - R) * (t - t0) / (t1 - t0);
    const y = (v) => H - B - (H - T - B) * v / top;
    // Steps: a value holds until the next event.
    function area(lower, upper, color, cls) {
      let d = "M" + x(pts[0][0]) + "," + y(lower(pts[0]));
      const up = [];
      for (let i = 0; i < pts.length; i++) {
        const next = i + 1 < pts.length ? pts[i + 1][0] : t1;
        up.push([x(pts[i][0]), y(upper(pts[i]))], [x(next), y(upper(pts[i]))]);
      }
      for (const [a, b] of up) d += " L" + a + "," + b;
      for (let i = pts.length - 1; i >= 0; i--) {
        const next = i + 1 < pts.length ? pts[i + 1][0] : t1;
        d += " L" + x(next) + "," + y(lower(pts[i])) + " L" + x(pts[i][0]) + "," + y(lower(pts[i]));
      }
      el("path", { d: d + " Z", fill: color, "fill-opacity": 0.85, class: cls }, svg);
    }
    area(() => 0, (p) => p[1], "#4c78a8", "device");
    area((p) => p[1], (p) => p[1] + p[2], "#f58518", "spilled");
    // The quota as it was at each point (it may change while the job runs).
    let line = "";
    for (let i = 0; i < pts.length; i++) {
      const q = pts[i][3];
      if (q === null || q === undefined) continue;
      const next = i + 1 < pts.length ? pts[i + 1][0] : t1;
      line += (line ? " L" : "M") + x(pts[i][0]) + "," + y(q) + " L" + x(next) + "," + y(q);
    }
    if (line) {
      el("path", { d: line, fill: "none", stroke: "#d62728", "stroke-dasharray": "6 4",
        "stroke-width": 2, class: "quota" }, svg);
    }
    for (const m of spec.marks) {
      el("line", { x1: x(m[0]), x2: x(m[0]), y1: H - B + 4, y2: H - B + 14,
        stroke: colors[m[1]] || "#555", class: "mark " + m[1].replace(/ /g, "-") }, svg);
    }
    el("line", { x1: L, x2: W - R, y1: H - B, y2: H - B, stroke: "#888" }, svg);
    el("line", { x1: L, x2: L, y1: T, y2: H - B, stroke: "#888" }, svg);
    for (let i = 0; i <= 4; i++) {
      const v = top * i / 4;
      const label = el("text", { x: L - 6, y: y(v) + 4, "text-anchor": "end", "font-size": 11 }, svg);
      label.textContent = bytes(Math.round(v));
      const t = t0 + (t1 - t0) * i / 4;
      const tl = el("text", { x: x(t), y: H - 8, "text-anchor": "middle", "font-size": 11 }, svg);
      tl.textContent = t.toFixed(t1 < 10 ? 2 : 0) + " ms";
    }
    const cursor = el("line", { y1: T, y2: H - B, stroke: "#000", "stroke-opacity": 0.4, visibility: "hidden" }, svg);
    svg.addEventListener("mousemove", (ev) => {
      const rect = svg.getBoundingClientRect();
      const t = t0 + (ev.clientX - rect.left - L) / (W - L - R) * (t1 - t0);
      let i = 0;
      while (i + 1 < pts.length && pts[i + 1][0] <= t) i++;
      const p = pts[i];
      let text = t.toFixed(3) + " ms\non the device " + bytes(p[1]) + "\nspilled " + bytes(p[2]);
      if (p[3] !== null && p[3] !== undefined) text += "\nquota " + bytes(p[3]);
      const near = spec.marks.filter((m) => Math.abs(x(m[0]) - x(t)) < 3);
      for (const m of near.slice(0, 4)) text += "\n" + m[1] + " " + bytes(m[2]) + " at " + m[3];
      tip.textContent = text;
      tip.hidden = false;
      tip.style.left = ev.clientX + 12 + "px";
      tip.style.top = ev.clientY + 12 + "px";
      cursor.setAttribute("x1", x(p[0]));
      cursor.setAttribute("x2", x(p[0]));
      cursor.setAttribute("visibility", "visible");
    });
    svg.addEventListener("mouseleave", () => { tip.hidden = true; cursor.setAttribute("visibility", "hidden"); });
  }
  const root = document.getElementById("charts");
  if (!data.charts.length) root.textContent = "No allocations in this trace.";
  for (const spec of data.charts) chart(spec, root);
  const body = document.querySelector("#blocks tbody");
  for (const b of data.blocks) {
    const row = document.createElement("tr");
    const cells = [b.pid, b.device, b.ptr, bytes(b.size), b.api, b.placement, b.moves,
      b.born_ms.toFixed(3), b.freed_ms === null ? "live" : b.freed_ms.toFixed(3)];
    for (const c of cells) {
      const td = document.createElement("td");
      td.textContent = String(c);
      row.appendChild(td);
    }
    body.appendChild(row);
  }
  document.body.setAttribute("data-drawn", String(data.charts.length));
})();
