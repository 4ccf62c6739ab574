/* fr-analyze's HTML incident report: draws the page from its JSON blob (id "fr-data"),
   inlined by report_html.py. Strings from the dumps are hostile: they only ever go into text
   nodes and attributes (never innerHTML), and the page's Content Security Policy runs no other
   script. One cell per rank, laid out on the job's mesh when there is one. */
(() => {
  "use strict";
  const D = JSON.parse(document.getElementById("fr-data").textContent);
  const S = D.strings;
  const W = D.world;
  const R = D.ranks;
  const SPOT = R.spot;
  const SVG_NS = "http://www.w3.org/2000/svg"; // an XML namespace name: never fetched
  const culprits = new Set(D.verdict.culprit_ranks || []);
  const culprit = D.verdict.culprit_ranks && D.verdict.culprit_ranks.length
    ? D.verdict.culprit_ranks[0] : null;
  const $ = (id) => document.getElementById(id);

  /* ---- small helpers ---------------------------------------------------------------- */
  function add(node, kid) {
    if (kid === null || kid === undefined || kid === false) return;
    if (Array.isArray(kid)) { kid.forEach((k) => add(node, k)); return; }
    node.appendChild(typeof kid === "object" ? kid : document.createTextNode(String(kid)));
  }
  function set(node, attrs) {
    if (!attrs) return node;
    for (const [key, value] of Object.entries(attrs)) {
      if (value === null || value === undefined || value === false) continue;
      if (key === "class") node.setAttribute("class", value);
      else if (key.startsWith("on")) node.addEventListener(key.slice(2), value);
      else node.setAttribute(key, String(value));
    }
    return node;
  }
  function el(tag, attrs, ...kids) {
    const node = set(document.createElement(tag), attrs);
    add(node, kids);
    return node;
  }
  function sv(tag, attrs, ...kids) {
    const node = set(document.createElementNS(SVG_NS, tag), attrs);
    add(node, kids);
    return node;
  }
  function expand(text) {
    const out = [];
    if (!text || text === "-") return out;
    for (const part of text.split(",")) {
      const dash = part.indexOf("-");
      if (dash < 0) { out.push(+part); continue; }
      const hi = +part.slice(dash + 1);
      for (let r = +part.slice(0, dash); r <= hi; r++) out.push(r);
    }
    return out;
  }
  const str = (i) => (i >= 0 ? S[i] : null);
  const clip = (text, n) => (text && text.length > n ? text.slice(0, n - 1) + "…" : text);
  // A rank list ("0-516,518-1023") cut at a comma, never inside a number.
  function clipRanks(text, n) {
    if (!text || text.length <= n) return text;
    const cut = text.lastIndexOf(",", n - 1);
    return `${text.slice(0, cut > 0 ? cut : n)},…`;
  }
  // A rank list that wraps only after its commas: each rank or range ("518-1023,") in a span
  // that never wraps (Chromium would break after the hyphen), a <wbr> after each comma.
  function rankList(text) {
    const node = el("span", { class: "ranks" });
    String(text).split(",").forEach((part, i, parts) => {
      const last = i === parts.length - 1;
      add(node, el("span", null, last ? part : `${part},`));
      if (!last) node.appendChild(document.createElement("wbr"));
    });
    return node;
  }
  const plural = (n, one, many) => `${n} ${n === 1 ? one : many}`;
  const table = (head, rows) => el("table", null,
    el("thead", null, el("tr", null, head.map((h) => el("th", null, h)))),
    el("tbody", null, rows));

  /* ---- memberships and positions, built once on first use ----------------------------- */
  const groups = D.groups; // [uid, name, desc, size, ranks, source]
  const behind = new Set(expand(R.behind_root));
  let memberOf = null;
  let positionsOf = null;
  function memberships() {
    if (memberOf) return memberOf;
    memberOf = new Map();
    for (let i = 0; i < groups.length; i++) {
      for (const r of expand(groups[i][4])) {
        let list = memberOf.get(r);
        if (!list) memberOf.set(r, (list = []));
        list.push(i);
      }
    }
    return memberOf;
  }
  function positions() {
    if (positionsOf) return positionsOf;
    positionsOf = new Map();
    D.positions.forEach((p, i) => {
      for (const r of expand(p[1])) {
        let list = positionsOf.get(r);
        if (!list) positionsOf.set(r, (list = []));
        list.push(i);
      }
    });
    return positionsOf;
  }
  const groupByUid = new Map(groups.map((g, i) => [g[0], i]));
  const groupName = (i) => `'${groups[i][1]}' (${groups[i][2]})`;

  /* ---- the picture: layout ------------------------------------------------------------ */
  const mesh = D.mesh; // [[name, size, stride], ...] innermost first, or null
  function coords(r) {
    return mesh.map(([, size, stride]) => Math.floor(r / stride) % size);
  }
  function meshLayout(cell, gap, maxW) {
    const m = mesh.length;
    const rowsDim = mesh[0];
    const bandDim = m >= 3 ? mesh[m - 1] : null;
    const colDims = m >= 3 ? mesh.slice(1, m - 1) : mesh.slice(1);
    const nCols = colDims.reduce((a, d) => a * d[1], 1);
    const nBands = bandDim ? bandDim[1] : 1;
    const pitch = cell + gap;
    const labelH = bandDim ? 18 : 0;
    const lineGap = Math.max(5, gap * 4);
    const most = Math.max(1, Math.floor(maxW / pitch));
    const lines = Math.ceil(nCols / most);
    const perLine = Math.ceil(nCols / lines);
    const lineH = rowsDim[1] * pitch + lineGap;
    const bandH = labelH + lines * lineH + (bandDim ? 8 : 0);
    const bandW = perLine * pitch + 24;
    const perRow = Math.max(1, Math.min(nBands, Math.floor((maxW + 24) / bandW)));
    const bandAt = (b) => [(b % perRow) * bandW, Math.floor(b / perRow) * bandH];
    const place = (r) => {
      let col = 0;
      let scale = 1;
      for (const [, size, stride] of colDims) {
        col += (Math.floor(r / stride) % size) * scale;
        scale *= size;
      }
      const row = Math.floor(r / rowsDim[2]) % rowsDim[1];
      const band = bandDim ? Math.floor(r / bandDim[2]) % bandDim[1] : 0;
      const [bx, by] = bandAt(band);
      return [bx + (col % perLine) * pitch,
        by + labelH + Math.floor(col / perLine) * lineH + row * pitch];
    };
    const labels = [];
    for (let b = 0; bandDim && b < nBands; b++) {
      const [bx, by] = bandAt(b);
      labels.push([`${bandDim[0]} ${b}`, bx, by, "band"]);
    }
    const width = perRow * bandW - 24;
    return { place, labels, width, height: Math.ceil(nBands / perRow) * bandH, rows: [] };
  }
  // No mesh: ranks in order, in chunks; the first row each rank as a whole, then one row per
  // family of groups (the rank's position in its group of that family).
  const FAMILY_ROWS = 24;
  const families = D.families.slice(0, FAMILY_ROWS);
  function gridLayout(cell, gap, maxW) {
    const pitch = cell + gap;
    const labelW = 110;
    const rows = 1 + families.length;
    const most = Math.max(1, Math.floor((maxW - labelW) / pitch));
    const chunks = Math.ceil(W / most);
    const perLine = Math.ceil(W / chunks);
    const labelH = 16;
    const chunkH = labelH + rows * pitch + 10;
    const place = (r, row) => [labelW + (r % perLine) * pitch,
      Math.floor(r / perLine) * chunkH + labelH + (row || 0) * pitch];
    const labels = [];
    for (let c = 0; c < chunks; c++) {
      const first = c * perLine;
      const last = Math.min(W, first + perLine) - 1;
      labels.push([`ranks ${first}-${last}`, labelW, c * chunkH, "band"]);
      labels.push(["rank", 0, c * chunkH + labelH, ""]);
      families.forEach((f, i) => labels.push([clip(f, 16), 0, c * chunkH + labelH + (i + 1) * pitch, ""]));
    }
    return { place, labels, width: labelW + perLine * pitch, height: chunks * chunkH, rows };
  }
  function chooseLayout(maxW, maxH) {
    const sizes = [40, 32, 26, 20, 16, 12, 10, 8, 6, 5, 4, 3];
    let best = null;
    for (const cell of sizes) {
      const gap = cell >= 16 ? 3 : cell >= 8 ? 2 : 1;
      const layout = mesh ? meshLayout(cell, gap, maxW) : gridLayout(cell, gap, maxW);
      best = Object.assign(layout, { cell, gap });
      if (layout.height <= maxH) break;
    }
    return best;
  }

  /* ---- the picture: cells ------------------------------------------------------------- */
  const cells = new Array(W);
  const grid = $("grid");
  function familyCells() {
    // state of each (rank, family): -1 not a member, else a spot code
    const F = families.length;
    const famOfGroup = groups.map((g) => families.indexOf(g[2] || g[1]));
    const state = new Int8Array(W * F).fill(-1);
    const member = memberships();
    for (const [r, list] of member) {
      if (r >= W) continue;
      for (const gi of list) {
        const f = famOfGroup[gi];
        if (f >= 0) state[r * F + f] = SPOT[r] === 6 ? 6 : 0;
      }
    }
    const waiting = D.root || SPOT.includes(1) ? 1 : 2;
    for (const p of D.positions) {
      const gi = groupByUid.get(p[0]);
      const f = gi === undefined ? -1 : famOfGroup[gi];
      if (f < 0 || p[3] < 0) continue;
      for (const r of expand(p[1])) if (r < W && state[r * F + f] === 0) state[r * F + f] = waiting;
    }
    const rootGroup = D.root && D.root.group !== null
      ? groups.findIndex((g) => g[1] === D.root.group) : -1;
    const rootFam = rootGroup >= 0 ? famOfGroup[rootGroup] : -1;
    for (const r of culprits) {
      if (r < W && rootFam >= 0 && state[r * F + rootFam] >= 0) state[r * F + rootFam] = SPOT[r];
    }
    return state;
  }
  // Past a few hundred ranks: one cell per run of neighbours that stand alike (D.runs), its
  // width growing with the ranks it holds; every rank of a run points to the run's cell.
  const RUNS = D.runs;
  const runOf = new Int32Array(W);
  if (RUNS) RUNS.forEach(([a, b], i) => { for (let r = a; r <= b; r++) runOf[r] = i; });
  function drawRuns() {
    grid.textContent = "";
    const strip = el("div", { class: "runs" });
    RUNS.forEach(([a, b]) => {
      const n = b - a + 1;
      let hit = false;
      for (const r of culprits) if (r >= a && r <= b) hit = true;
      const c = el("div", { class: `cell run s${SPOT[a]}${hit ? " culprit" : ""}`, "data-r": a,
        "data-last": b, title: `${n === 1 ? `rank ${a}` : `ranks ${a}-${b} (${n})`}: ${D.spots[SPOT[a]]}` },
      n === 1 ? `${a}` : `${a}-${b}`, n > 1 ? el("small", null, ` ×${n}`) : null);
      c.style.flexGrow = String(n);
      for (let r = a; r <= b; r++) cells[r] = c;
      strip.appendChild(c);
    });
    grid.appendChild(strip);
    grid.dataset.cell = "run";
  }
  const PAD = 12; // room around the picture for the culprit's ring
  const at = ([x, y]) => [x + PAD, y + PAD];
  function drawPicture() {
    const maxW = Math.max(320, grid.clientWidth - 8);
    const L = chooseLayout(maxW - 2 * PAD, 1000);
    grid.textContent = "";
    const board = el("div", { class: "plane" });
    board.style.position = "relative";
    board.style.width = `${L.width + 2 * PAD}px`;
    board.style.height = `${L.height + 2 * PAD}px`;
    const frag = document.createDocumentFragment();
    const size = `${L.cell}px`;
    const showNumbers = L.cell >= 20;
    // one absolutely placed square per rank (and per rank and group family)
    const square = (className, r, slot) => {
      const [x, y] = at(L.place(r, slot));
      const c = document.createElement("div");
      c.className = className;
      c.dataset.r = r;
      const st = c.style;
      st.left = `${x}px`;
      st.top = `${y}px`;
      st.width = size;
      st.height = size;
      return c;
    };
    for (let r = 0; r < W; r++) {
      const c = square(`cell rank s${SPOT[r]}${culprits.has(r) ? " culprit" : ""}`, r, 0);
      if (showNumbers) { c.style.lineHeight = size; c.textContent = r; }
      cells[r] = c;
      frag.appendChild(c);
    }
    if (!mesh && families.length) {
      const F = families.length;
      const state = familyCells();
      for (let r = 0; r < W; r++) {
        for (let f = 0; f < F; f++) {
          const s = state[r * F + f];
          if (s < 0) continue;
          frag.appendChild(square(`cell fam s${s}`, r, f + 1));
        }
      }
    }
    for (const [text, lx, ly, kind] of L.labels) {
      const [x, y] = at([lx, ly]);
      const a = el("div", { class: `axis ${kind}` }, text);
      a.style.left = `${x}px`;
      a.style.top = `${y}px`;
      frag.appendChild(a);
    }
    for (const r of culprits) {
      if (r >= W || L.cell >= 16) continue;
      const [x, y] = at(L.place(r, 0));
      const ring = el("div", { class: "ring" });
      const d = Math.max(18, L.cell * 4);
      ring.style.width = ring.style.height = `${d}px`;
      ring.style.left = `${x + L.cell / 2 - d / 2}px`;
      ring.style.top = `${y + L.cell / 2 - d / 2}px`;
      frag.appendChild(ring);
    }
    board.appendChild(frag);
    grid.appendChild(board);
    grid.dataset.cell = L.cell;
    grid.classList.toggle("small-numbers", showNumbers && W > 1000 && L.cell < 26);
  }

  function layoutNote() {
    const note = $("layout-note");
    if (RUNS) {
      add(note, `${plural(W, "rank", "ranks")} in ${plural(RUNS.length, "cell", "cells")}: ` +
        "neighbours that stand alike (state, blocked op, newest op, whom they wait for) share one.");
    } else if (mesh) {
      const m = mesh.length;
      const words = (d) => `${d[0]} (${d[1]})`;
      const parts = [];
      if (m >= 3) parts.push(`bands: ${words(mesh[m - 1])}`);
      const cols = m >= 3 ? mesh.slice(1, m - 1) : mesh.slice(1);
      parts.push(`columns: ${cols.map(words).join(" × ")}`);
      parts.push(`rows: ${words(mesh[0])}`);
      add(note, `${plural(W, "rank", "ranks")} on the job's mesh, read from its process groups: ` +
        `${parts.join("; ")}.`);
      if (mesh.some((d) => d[0] === D.unspanned)) {
        add(note, ` “${D.unspanned}” is a dimension no process group spans (on gloo, which ` +
          "records no send/recv, the pipeline stages).");
      }
    } else {
      add(note, `${plural(W, "rank", "ranks")} in rank order (the groups reveal no mesh): ` +
        "the first row is each rank as a whole, then one row per family of process groups " +
        "(where the rank stands in its group of that family).");
      if (D.families.length > FAMILY_ROWS) {
        add(note, ` ${D.families.length - FAMILY_ROWS} more families are not drawn.`);
      }
    }
  }

  function legend() {
    const used = new Set(SPOT);
    const box = $("legend");
    D.spots.forEach((name, code) => {
      if (!used.has(code)) return;
      let n = 0;
      for (let r = 0; r < W; r++) if (SPOT[r] === code) n++;
      add(box, el("span", { class: "key" }, el("span", { class: `swatch s${code}` }),
        `${name} (${n})`));
    });
    if (culprits.size) {
      add(box, el("span", { class: "key" }, el("span", { class: "swatch culprit-key" }),
        "the culprit (outlined)"));
    }
  }

  /* ---- per-rank detail ---------------------------------------------------------------- */
  const detail = $("detail");
  let pinned = null;
  let marked = null;
  function describe(r) {
    const kids = [el("h3", null, `rank ${r}`)];
    const spot = el("p", null, el("span", { class: `swatch s${SPOT[r]}` }), " ", D.spots[SPOT[r]]);
    kids.push(spot);
    if (RUNS) {
      const [a, b] = RUNS[runOf[r]];
      if (b > a) kids.push(el("p", { class: "muted" }, `One of ranks ${a}-${b} (${b - a + 1}), which stand alike.`));
    }
    if (culprits.has(r)) kids.push(el("p", null, el("b", null, "The root cause’s rank.")));
    else if (behind.has(r)) {
      kids.push(el("p", null, "Held up by the root cause (waits for it, directly or not)."));
    }
    const dl = el("dl");
    const item = (term, value) => {
      if (value !== null && value !== undefined) add(dl, [el("dt", null, term), el("dd", null, value)]);
    };
    if (mesh) item("mesh", mesh.map((d, i) => `${d[0]} ${coords(r)[i]}`).join(" · "));
    const noDump = SPOT[r] === 6 || SPOT[r] === 4 ? "no dump" : null;
    item(SPOT[r] === 6 ? "dump" : "file", str(R.file[r]) || noDump);
    item("host", str(R.host[r]));
    item("blocked in", str(R.blocked[r]));
    const waits = str(R.waits[r]);
    if (waits) {
      const links = expand(waits).slice(0, 12)
        .map((w) => el("a", { href: "#picture", "data-r": w }, `rank ${w}`));
      const more = expand(waits).length > 12 ? [" … (", rankList(waits), ")"] : "";
      item("waits for", [links.flatMap((a, i) => (i ? [", ", a] : [a])), more]);
    }
    item("newest op", str(R.newest[r]));
    const mine = positions().get(r) || [];
    if (mine.length) {
      const list = mine.slice(0, 40).map((pi) => {
        const p = D.positions[pi];
        const gi = groupByUid.get(p[0]);
        const lc = str(p[2]) || "-";
        const fi = str(p[3]);
        return el("div", { class: "pos" }, el("b", null, gi === undefined ? "?" : groupName(gi)),
          `: last completed ${lc}`, fi ? `; first not completed ${fi}` : "",
          p[4] !== null && fi ? ` (enqueued ${p[4].toFixed(1)} s before its newest)` : "");
      });
      if (mine.length > 40) list.push(el("div", null, `… ${mine.length - 40} more`));
      item("in its groups", list);
    } else {
      const member = memberships().get(r) || [];
      item("groups", member.length ? member.slice(0, 40).map(groupName).join(", ") : null);
    }
    kids.push(dl);
    return kids;
  }
  function show(r) {
    detail.textContent = "";
    add(detail, describe(r));
  }
  function pin(r, scroll) {
    if (pinned !== null && cells[pinned]) cells[pinned].classList.remove("pinned");
    pinned = r;
    if (r === null) { if (culprit !== null) show(culprit); return; }
    if (cells[r]) {
      cells[r].classList.add("pinned");
      if (scroll) cells[r].scrollIntoView({ block: "center", inline: "center" });
    }
    show(r);
  }
  function wire() {
    const rankAt = (e) => {
      const hit = e.target.closest ? e.target.closest("[data-r]") : null;
      return hit ? hit.dataset.r : undefined;
    };
    grid.addEventListener("mouseover", (e) => {
      const r = rankAt(e);
      if (r !== undefined && pinned === null) show(+r);
    });
    grid.addEventListener("click", (e) => {
      const r = rankAt(e);
      if (r === undefined) return;
      pin(pinned === +r ? null : +r, false);
    });
    detail.addEventListener("click", (e) => {
      const r = e.target.dataset ? e.target.dataset.r : undefined;
      if (r !== undefined) { e.preventDefault(); pin(+r, true); }
    });
    const find = $("find");
    find.max = W - 1;
    const go = () => {
      const r = parseInt(find.value, 10);
      if (r >= 0 && r < W) pin(r, true);
    };
    find.addEventListener("change", go);
    find.addEventListener("keydown", (e) => { if (e.key === "Enter") go(); });
    const button = $("to-culprit");
    if (culprit === null) button.disabled = true;
    else button.addEventListener("click", () => pin(culprit, true));
  }

  /* ---- the wait chain ----------------------------------------------------------------- */
  function chain() {
    const box = $("chain-graph");
    const steps = D.root ? D.root.wait_chain : [];
    if (steps.length < 2) {
      add(box, el("p", { class: "muted" }, D.root
        ? "No chain of waits: the root cause's rank is named directly (see the evidence above)."
        : "No root cause, so no chain of waits."));
    } else {
      const nodeW = 178, nodeH = 50, gapX = 76, gapY = 40;
      const maxW = Math.max(400, box.clientWidth || 900);
      const perRow = Math.max(1, Math.min(steps.length, Math.floor((maxW + gapX) / (nodeW + gapX))));
      const rows = Math.ceil(steps.length / perRow);
      const width = perRow * nodeW + (perRow - 1) * gapX + 4;
      const height = rows * nodeH + (rows - 1) * gapY + 24;
      const svg = sv("svg", { viewBox: `0 0 ${width} ${height}`, width, height, role: "img",
        "aria-label": "wait chain: each rank waits for the next" });
      add(svg, sv("defs", null, sv("marker", { id: "arrow", viewBox: "0 0 10 10", refX: 9, refY: 5,
        markerWidth: 7, markerHeight: 7, orient: "auto-start-reverse" },
      sv("path", { d: "M0,0 L10,5 L0,10 z", fill: "#555" }))));
      const at = (i) => [2 + (i % perRow) * (nodeW + gapX), 12 + Math.floor(i / perRow) * (nodeH + gapY)];
      const seen = new Set();
      steps.forEach(([rank, group, seq], i) => {
        const [x, y] = at(i);
        const last = i === steps.length - 1;
        const again = seen.has(rank);
        seen.add(rank);
        const isCulprit = culprits.has(rank) && (last || group === null);
        const line2 = group !== null
          ? `waits in '${clip(group, 14)}' #${seq}` : (isCulprit ? D.spots[SPOT[rank]] : "");
        const g = sv("g", { class: "node", "data-r": rank });
        add(g, sv("rect", { x, y, width: nodeW, height: nodeH, rx: 6, fill: isCulprit ? "#d7263d" : "#fff",
          stroke: isCulprit ? "#8c0f1f" : "#888", "data-r": rank }));
        const ink = isCulprit ? "#fff" : "#111";
        add(g, sv("text", { x: x + 10, y: y + 20, "font-weight": "600", fill: ink, "data-r": rank },
          `rank ${rank}${again ? " (again)" : ""}`));
        add(g, sv("text", { x: x + 10, y: y + 38, fill: ink, "data-r": rank }, line2));
        add(svg, g);
        if (!last) {
          const [nx, ny] = at(i + 1);
          let d;
          let lx;
          let ly;
          if (ny === y) {
            d = `M${x + nodeW},${y + nodeH / 2} L${nx - 2},${ny + nodeH / 2}`;
            lx = x + nodeW + gapX / 2; ly = y + nodeH / 2 - 6;
          } else {
            const midY = y + nodeH + gapY / 2;
            const from = x + nodeW / 2;
            const to = nx + nodeW / 2;
            d = `M${from},${y + nodeH} L${from},${midY} L${to},${midY} L${to},${ny - 2}`;
            lx = (x + nx + nodeW) / 2; ly = midY - 4;
          }
          add(svg, sv("path",
            { d, fill: "none", stroke: "#555", "stroke-width": 1.6, "marker-end": "url(#arrow)" }));
          add(svg, sv("text",
            { x: lx, y: ly, "text-anchor": "middle", fill: "#666", "font-size": 11 }, "waits for"));
        }
      });
      svg.addEventListener("click", (e) => {
        const r = e.target.getAttribute && e.target.getAttribute("data-r");
        if (r !== null && r !== undefined) pin(+r, true);
      });
      add(box, svg);
    }
    const waiting = D.waiting_for;
    if (waiting.length) {
      add($("waiting-for"), table(["waiting", "for", "who waits"], waiting.map(([whom, n, who]) =>
        el("tr", null, el("td", null, plural(n, "rank", "ranks")), el("td", null, whom),
          el("td", { class: "mono" }, rankList(who))))));
    }
  }

  /* ---- stacks ------------------------------------------------------------------------- */
  const frameKey = (f) => `${f[0]}\u0000${f[1]}\u0000${f[2]}`;
  function frameList(frames, other) {
    if (!frames) {
      return el("p", { class: "muted" },
        "No frames in the dump (JSON dumps, torchcomms and slow dumps omit them).");
    }
    const theirs = new Set((other || []).map(frameKey));
    return el("ol", null, frames.map((f) => el("li",
      { class: other && !theirs.has(frameKey(f)) ? "differs" : null },
      el("b", null, f[0]), " ", el("span", null, `${f[1]}:${f[2]}`))));
  }
  function stackColumn(title, g, other, extra) {
    return el("div", { class: `stack-col${extra ? ` ${extra}` : ""}` }, el("h3", null, title),
      g ? el("p", { class: "muted mono" }, `${plural(g.count, "rank", "ranks")}: `,
        rankList(clipRanks(g.ranks, 240))) : null,
      g ? frameList(g.frames, other && other.frames) : el("p", { class: "muted" }, "No stack."));
  }
  function stacks() {
    const st = D.stacks;
    const pair = $("stack-pair");
    const gs = st.groups;
    const mine = st.culprit !== null ? gs[st.culprit] : null;
    const peers = st.peers !== null ? gs[st.peers] : null;
    if (st.culprit_rank !== null) {
      const cr = st.culprit_rank;
      add(pair, mine
        ? stackColumn(`The culprit, rank ${cr} (innermost first)`, mine, peers, "culprit-col")
        : el("div", { class: "stack-col culprit-col" }, el("h3", null, `The culprit, rank ${cr}`),
          el("p", { class: "muted" }, SPOT[cr] === 6 || SPOT[cr] === 4
            ? "No dump, so no stack." : "No op of its own to take a stack from.")));
      const same = st.same_op;
      if (same && same.count) {
        // its peers at the same op: only the frames that differ are marked, on both sides
        const theirs = { count: same.count, ranks: same.ranks, frames: same.frames };
        pair.replaceChildren(
          stackColumn(`The culprit, rank ${cr}, at ${same.op} (innermost first)`, mine, theirs,
            "culprit-col"),
          stackColumn(`Its peers at the same op (${same.count} of the ${same.issued} other ` +
            "ranks that issued it; innermost first)", theirs, mine, "peer-col"));
        const ours = new Set((theirs.frames || []).map(frameKey));
        const differ = mine && mine.frames ? mine.frames.filter((f) => !ours.has(frameKey(f))) : [];
        add($("stack-others"), el("p", { class: "muted", id: "stack-verdict" }, differ.length
          ? `${plural(differ.length, "frame differs", "frames differ")} (marked).`
          : `No frame differs: rank ${cr} issued this op from the same code as its peers.`));
      } else {
        // no other rank's dump holds that op: its peers' stacks are of another op, so no
        // frame is marked (every one would differ)
        pair.replaceChildren(
          mine ? stackColumn(`The culprit, rank ${cr} (innermost first)`, mine, null, "culprit-col")
            : pair.firstChild,
          stackColumn("Its peers, at another op (no other rank’s dump holds the culprit’s; " +
            "innermost first)", peers, null, "peer-col"));
      }
    } else {
      add(pair, el("p", { class: "muted" },
        "No culprit: the stacks of the ops ranks are blocked in (or their newest) are below."));
    }
    const others = gs.filter((g, i) => i !== st.culprit && i !== st.peers);
    if (others.length) {
      const open = st.culprit_rank === null;
      add($("stack-others"), el("details", { open: open ? "" : null },
        el("summary", null,
          `Other stacks (${others.length}${st.omitted ? ` shown, ${st.omitted} more` : ""})`),
        others.map((g) => el("div", { class: "stack-col" },
          el("h3", null, `${plural(g.count, "rank", "ranks")}${g.odd ? " — odd one out" : ""}`),
          el("p", { class: "muted mono" }, rankList(clipRanks(g.ranks, 240))),
          frameList(g.frames, null)))));
    }
    const py = D.python_stacks;
    if (py) {
      const box = $("py-stacks");
      add(box, el("h3", null, `The culprits’ Python stacks at the snapshot (${py.file})`));
      for (const [rank, threads] of Object.entries(py.culprits)) {
        add(box, el("p", null, el("b", null, `rank ${rank}`), threads.length ? "" : ": not in the file"));
        for (const th of threads) {
          add(box, el("div", { class: "stack-col" }, el("h3", null, th.thread),
            el("ol", { class: "frames" }, th.frames.map((f) => el("li", null, f)))));
        }
      }
    }
  }

  /* ---- findings, groups, dumps -------------------------------------------------------- */
  function findings() {
    const f = D.findings;
    const box = $("findings-table");
    if (!f.rows.length) { add(box, el("p", { class: "muted" }, "No findings.")); return; }
    const rows = f.rows.map((x) => el("tr", { class: `role-${x.role}` },
      el("td", null, x.role.replace("_", " ")), el("td", null, x.kind),
      el("td", null, x.group === null ? "-" : `'${x.group}' (${x.desc})`), el("td", null, x.seq || "-"),
      el("td", null, x.op || "-"), el("td", { class: "mono" }, rankList(clipRanks(x.ranks, 200))),
      el("td", { class: "mono" }, rankList(clipRanks(x.culprits, 200))), el("td", null, x.detail),
      el("td", null, x.link || "")));
    add(box, el("div", { class: "scroll" }, table(
      ["role", "kind", "group", "seq", "op", "ranks", "culprits", "detail", "explained by"], rows)));
    if (f.omitted) {
      add(box, el("p", { class: "muted" },
        `${f.omitted} more findings not shown (the JSON report has them all).`));
    }
  }

  // Every group is reachable: the table shows a page at a time, with buttons to page
  // through all of them, and the filter matches a name, a description, or (a number) the
  // groups a rank is a member of.
  const GROUP_PAGE = 100;
  let markedRow = null;
  function mark(i, row) {
    if (marked !== null) {
      for (const r of expand(groups[marked][4])) if (cells[r]) cells[r].classList.remove("hl");
    }
    if (markedRow) markedRow.classList.remove("selected");
    if (marked === i) { marked = null; markedRow = null; return; }
    marked = i;
    markedRow = row;
    row.classList.add("selected");
    for (const r of expand(groups[i][4])) if (cells[r]) cells[r].classList.add("hl");
  }
  function groupTable() {
    const box = $("groups-table");
    const filter = $("group-filter");
    const count = $("group-count");
    const pager = $("group-pages");
    let page = 0;
    let hits = [];
    const search = () => {
      const q = filter.value.trim().toLowerCase();
      hits = [];
      if (/^\d+$/.test(q)) {
        const r = +q;
        const member = memberships().get(r) || [];
        const named = new Set(member);
        for (let i = 0; i < groups.length; i++) {
          if (named.has(i) || groups[i][1].toLowerCase() === q) hits.push(i);
        }
      } else {
        for (let i = 0; i < groups.length; i++) {
          const g = groups[i];
          if (!q || `${g[1]} ${g[2]} ${g[4]}`.toLowerCase().includes(q)) hits.push(i);
        }
      }
      page = 0;
      draw();
    };
    const draw = () => {
      box.textContent = "";
      const pages = Math.max(1, Math.ceil(hits.length / GROUP_PAGE));
      page = Math.min(Math.max(0, page), pages - 1);
      const first = page * GROUP_PAGE;
      const shown = hits.slice(first, first + GROUP_PAGE);
      const rows = shown.map((i) => {
        const g = groups[i];
        const row = el("tr", { class: "clickable", title: "mark its members in the picture",
          "data-group": g[0] },
        el("td", null, g[0]), el("td", null, g[1]), el("td", null, g[2]), el("td", null, g[3]),
        el("td", { class: "mono" }, rankList(clipRanks(g[4], 160))), el("td", null, g[5]));
        row.addEventListener("click", () => mark(i, row));
        return row;
      });
      const head = ["id", "name", "desc", "size", "ranks", "membership from"];
      add(box, el("div", { class: "scroll" }, table(head, rows)));
      const q = filter.value.trim();
      const what = /^\d+$/.test(q) ? ` (rank ${q}'s groups, or the group named ${q})` : "";
      count.textContent = hits.length > GROUP_PAGE
        ? `${hits.length} groups${q ? " match" : ""}${what}; ` +
          `${first + 1}-${first + shown.length} listed (page ${page + 1} of ${pages})`
        : `${plural(hits.length, "group", "groups")}${q ? " match" : ""}${what}`;
      pager.hidden = pages < 2;
      $("group-prev").disabled = page === 0;
      $("group-next").disabled = page >= pages - 1;
    };
    $("group-prev").addEventListener("click", () => { page -= 1; draw(); });
    $("group-next").addEventListener("click", () => { page += 1; draw(); });
    filter.addEventListener("input", search);
    search();
  }
  function dumps() {
    const d = D.dumps;
    const t = D.timing;
    const dl = el("dl");
    const item = (term, value) => {
      if (value !== null && value !== undefined && value !== "") {
        add(dl, [el("dt", null, term), el("dd", null, value)]);
      }
    };
    item("from", d.directory);
    item("ranks loaded", [`${d.loaded} (`, rankList(clipRanks(d.loaded_ranks, 300)), ")"]);
    item("no dump", d.missing ? rankList(d.missing) : null);
    item("backend", d.backends.join(", "));
    item("format", d.versions.join(", "));
    const before = t.dump_time_exact ? "" : "not before ";
    item("taken", t.dump_time ? `${before}${t.dump_time} (${t.basis})` : "unknown");
    item("timing", t.note);
    if (d.unreadable_count) {
      item(`unreadable (${d.unreadable_count})`, el("ul", null, d.unreadable.map(([file, rank, why]) =>
        el("li", null, `${file}${rank === null ? "" : ` (rank ${rank})`}: ${why}`))));
    }
    if (d.warnings_count) {
      item(`warnings (${d.warnings_count})`, el("ul", null, d.warnings.map((w) => el("li", null, w))));
    }
    add($("dumps-info"), dl);
  }

  /* ---- draw --------------------------------------------------------------------------- */
  layoutNote();
  legend();
  if (RUNS) drawRuns(); else drawPicture();
  wire();
  if (culprit !== null && culprit < W) show(culprit);
  chain();
  stacks();
  findings();
  groupTable();
  dumps();
  document.body.dataset.rendered = "yes";
})();
