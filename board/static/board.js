// edgeproc fleet board: one EventSource, one canvas. Couriers live in a Map;
// each message (at most one per interval_ms) updates it, then one animation
// frame redraws the canvas and the few table rows. No DOM node per courier.
// Dead zones (the cells where couriers lost signal in the last 24 h) are one
// SVG polygon each over the canvas, redrawn only when they or the view
// change; cells with fewer warnings than the legend's threshold are hidden.
// A market's service area is one SVG path under them (its outline, sent in
// the snapshot), redrawn when the view changes; a courier outside it has a
// ring in the outline's colour. Times are the market's (its IANA time zone,
// "tz"), on a 24-hour clock, with their age. Finding a courier (the search
// box, a list's row, a click on the map) centres the map on it, labels it
// and opens its details, the only place its coordinates are shown.
// With a lake, the side panel lists yesterday's greatest distances, from
// the table edgeproc daily wrote for the market's previous day.
"use strict";
(function () {
  const STATES = ["unknown", "moving", "stopped", "no_signal"];
  const LABEL = {unknown: "unknown", moving: "moving", stopped: "stopped", no_signal: "no signal"};
  const DRAW_ORDER = [0, 1, 2, 3]; // no_signal last: on top
  const css = getComputedStyle(document.documentElement);
  const COLOR = STATES.map(s => css.getPropertyValue("--" + s).trim());
  const market = document.body.dataset.market;
  const canvas = document.getElementById("map");
  const ctx = canvas.getContext("2d");
  const tip = document.getElementById("tip");
  const zoneLayer = document.getElementById("zones");
  const SVG = zoneLayer.namespaceURI; // SVG's: the layer is an <svg>
  const zoneToggle = document.getElementById("zones-toggle");
  const areaLayer = document.getElementById("area");
  const AREA = css.getPropertyValue("--area").trim();
  // {m, edges, cut, lines: [[[x, y], …], …] (Web Mercator, zoom 0), x0, x1, y0, y1, el}
  let areas = [], areasView = null;
  // "market|cell" -> {cell, m, w, c, r, o, s, l, n, fs, le, b, x0, x1, y0, y1, el}
  const zones = new Map();
  const zonesChanged = new Set(); // zones to redraw at the next frame
  let zonesShown = zoneToggle.checked, zonesView = null, zonesDropped = 0;
  const couriers = new Map(); // id -> {m, lat, lon, ts, st, d, de, rv, out, ss, x, y}
  let markets = [], skew = 0, tiles = "", view = null, pending = false;
  let selected = null; // the courier found, its id
  // Yesterday, by market with a lake: [{market, date, state, couriers,
  // distance_m, top: [{courier, distance_m, positions}, …]}, …]
  // (board/state.go, encode); sent only when it changes.
  let daily = [];
  const zonesMinInput = document.getElementById("zones-min");
  let zonesMin = zonesMinInput.valueAsNumber || 1;
  let updates = 0, lastBytes = 0, dropped = 0, refused = 0, renders = 0, renderMs = 0;
  const drawn = {count: 0, byState: [0, 0, 0, 0], outside: 0, state: new Map()};
  window.board = {
    drawn: () => drawn.count,
    stateOf: id => drawn.state.get(id) || null,
    updates: () => updates,
    couriers: () => couriers.size,
    zones: () => zones.size,
    // Couriers drawn with the outside-the-service-area ring.
    outside: () => drawn.outside,
    // Where a courier is drawn, in canvas pixels; null if it is not.
    pointOf: id => { const c = couriers.get(id); return c && c.x !== undefined ? [c.x, c.y] : null; },
    // Frames drawn and the time they took (canvas and tables), ms.
    renders: () => ({count: renders, ms: renderMs}),
    // The courier found or clicked, whose details are open; null if none.
    selected: () => selected,
    select: id => select(id),
    // Yesterday's tables as received, by market with a lake.
    daily: () => daily,
  };

  const url = "/board/events" + (market ? "?market=" + encodeURIComponent(market) : "");
  const es = new EventSource(url);
  const conn = document.getElementById("conn");
  es.onopen = () => { conn.textContent = "live"; conn.className = "conn up"; };
  es.onerror = () => { conn.textContent = "reconnecting…"; conn.className = "conn down"; };
  es.onmessage = ev => {
    const msg = JSON.parse(ev.data);
    updates++;
    lastBytes = ev.data.length;
    skew = msg.now - Date.now();
    dropped = msg.dropped; refused = msg.refused;
    if (msg.full) { couriers.clear(); view = null; }
    tiles = msg.tiles;
    markets = msg.markets;
    for (const id of msg.gone) couriers.delete(id);
    for (const c of msg.c) {
      couriers.set(c[0], {m: c[1], lat: c[2], lon: c[3], ts: c[4], st: c[5], d: c[6], de: c[7], rv: c[8], out: c[9], ss: c[10]});
    }
    if (msg.full) setAreas(msg.areas || []);
    if (msg.full || msg.daily) daily = msg.daily || [];
    if (msg.full) clearZones();
    for (const k of msg.zones_gone || []) dropZone(k[1] + "|" + k[0]);
    for (const z of msg.zones || []) setZone(z);
    zonesDropped = msg.zones_dropped || 0;
    schedule();
  };
  zoneToggle.addEventListener("change", () => { zonesShown = zoneToggle.checked; tip.hidden = true; schedule(); });
  zonesMinInput.addEventListener("input", () => {
    const n = zonesMinInput.valueAsNumber;
    if (!(n >= 1)) return;
    zonesMin = Math.floor(n); zonesView = null; tip.hidden = true; schedule();
  });
  addEventListener("resize", () => { view = null; schedule(); });

  function schedule() {
    if (!pending) { pending = true; requestAnimationFrame(render); }
  }

  // Web Mercator at zoom 0: the world is 256 × 256.
  function mx(lon) { return (lon + 180) / 360 * 256; }
  function my(lat) {
    const s = Math.sin(Math.max(-85.05, Math.min(85.05, lat)) * Math.PI / 180);
    return (0.5 - Math.log((1 + s) / (1 - s)) / (4 * Math.PI)) * 256;
  }

  // fit chooses the zoom and centre that show every courier and service
  // area, and every dead zone when they are shown.
  function fit(w, h) {
    let x0 = Infinity, x1 = -Infinity, y0 = Infinity, y1 = -Infinity;
    for (const a of areas) {
      x0 = Math.min(x0, a.x0); x1 = Math.max(x1, a.x1); y0 = Math.min(y0, a.y0); y1 = Math.max(y1, a.y1);
    }
    for (const c of couriers.values()) {
      const x = mx(c.lon), y = my(c.lat);
      x0 = Math.min(x0, x); x1 = Math.max(x1, x); y0 = Math.min(y0, y); y1 = Math.max(y1, y);
    }
    if (zonesShown) {
      for (const z of zones.values()) {
        if (z.w < zonesMin) continue;
        x0 = Math.min(x0, z.x0); x1 = Math.max(x1, z.x1); y0 = Math.min(y0, z.y0); y1 = Math.max(y1, z.y1);
      }
    }
    if (!isFinite(x0)) return null;
    const dx = Math.max(x1 - x0, 1e-6), dy = Math.max(y1 - y0, 1e-6);
    let z = Math.log2(Math.min(w * 0.88 / dx, h * 0.88 / dy));
    z = Math.max(0, Math.min(17, z));
    return {z, k: Math.pow(2, z), cx: (x0 + x1) / 2, cy: (y0 + y1) / 2, w, h};
  }

  function project(v, lat, lon) {
    return [(mx(lon) - v.cx) * v.k + v.w / 2, (my(lat) - v.cy) * v.k + v.h / 2];
  }

  function render() {
    const t0 = performance.now();
    pending = false;
    const dpr = window.devicePixelRatio || 1;
    const w = canvas.clientWidth, h = canvas.clientHeight;
    if (canvas.width !== Math.round(w * dpr) || canvas.height !== Math.round(h * dpr)) {
      canvas.width = Math.round(w * dpr); canvas.height = Math.round(h * dpr);
    }
    ctx.setTransform(dpr, 0, 0, dpr, 0, 0);
    ctx.clearRect(0, 0, w, h);
    const sel = selected !== null ? couriers.get(selected) : undefined;
    if (sel) {
      // Centred on the courier found, and again when it nears an edge.
      if (!view || view.w !== w || view.h !== h || !view.sel || offCentre(view, sel)) view = centreOn(sel, w, h);
    } else if (!view || view.sel || outside(view)) view = fit(w, h);
    const v = view;
    drawn.count = 0; drawn.byState = [0, 0, 0, 0]; drawn.outside = 0; drawn.state.clear();
    drawAreas(v);
    drawZones(v);
    if (v) {
      if (tiles) drawTiles(v);
      const r = Math.max(3, Math.min(w, h) / 200);
      for (const c of couriers.values()) { const p = project(v, c.lat, c.lon); c.x = p[0]; c.y = p[1]; }
      haloOutside(r * 1.6, w, h);
      for (const s of DRAW_ORDER) {
        ctx.beginPath();
        for (const [id, c] of couriers) {
          if (c.st !== s || c.x < -r || c.y < -r || c.x > w + r || c.y > h + r) continue;
          ctx.moveTo(c.x + r, c.y);
          ctx.arc(c.x, c.y, r, 0, 2 * Math.PI);
          drawn.count++; drawn.byState[s]++; drawn.state.set(id, STATES[s]);
        }
        ctx.fillStyle = COLOR[s];
        ctx.fill();
        if (s === 3) { ctx.strokeStyle = COLOR[3]; ctx.lineWidth = 1; ringNoSignal(r * 2.2, w, h); }
      }
      if (sel) { ctx.strokeStyle = css.getPropertyValue("--fg").trim(); ctx.lineWidth = 2; ctx.beginPath(); ctx.arc(sel.x, sel.y, r * 2.8, 0, 2 * Math.PI); ctx.stroke(); }
      drawScale(v, w, h);
    }
    placeLabel(selLabel, selected, sel, w, h);
    canvas.dataset.drawn = drawn.count;
    canvas.dataset.couriers = couriers.size;
    canvas.dataset.drawn_outside = drawn.outside;
    STATES.forEach((s, i) => { canvas.dataset["drawn_" + s] = drawn.byState[i]; });
    tables();
    renders++;
    renderMs += performance.now() - t0;
  }

  // centreOn is a view centred on courier c, one zoom level closer than the
  // whole fleet's (and at least a district's).
  function centreOn(c, w, h) {
    const f = fit(w, h);
    const z = Math.min(17, Math.max(f ? f.z + 1 : 13, 13));
    return {z, k: Math.pow(2, z), cx: mx(c.lon), cy: my(c.lat), w, h, sel: true};
  }

  // offCentre reports whether c is out of the middle of view v.
  function offCentre(v, c) {
    const p = project(v, c.lat, c.lon);
    return Math.abs(p[0] - v.w / 2) > v.w / 4 || Math.abs(p[1] - v.h / 2) > v.h / 4;
  }

  function outside(v) {
    for (const a of areas) {
      if ((a.x0 - v.cx) * v.k + v.w / 2 < 0 || (a.x1 - v.cx) * v.k + v.w / 2 > v.w ||
          (a.y0 - v.cy) * v.k + v.h / 2 < 0 || (a.y1 - v.cy) * v.k + v.h / 2 > v.h) return true;
    }
    for (const c of couriers.values()) {
      const p = project(v, c.lat, c.lon);
      if (p[0] < 0 || p[1] < 0 || p[0] > v.w || p[1] > v.h) return true;
    }
    if (zonesShown) {
      for (const z of zones.values()) {
        if (z.w < zonesMin) continue;
        if ((z.x0 - v.cx) * v.k + v.w / 2 < 0 || (z.x1 - v.cx) * v.k + v.w / 2 > v.w ||
            (z.y0 - v.cy) * v.k + v.h / 2 < 0 || (z.y1 - v.cy) * v.k + v.h / 2 > v.h) return true;
      }
    }
    return false;
  }

  // Service areas, from a snapshot: {market, edges, truncated, outline:
  // [[[lat, lon], …], …]} (board/state.go, encode).
  function setAreas(list) {
    areaLayer.replaceChildren();
    areasView = null;
    let edges = 0, cut = false;
    areas = list.map(a => {
      const o = {m: a.market, edges: a.edges, cut: a.truncated, el: null, x0: Infinity, x1: -Infinity, y0: Infinity, y1: -Infinity};
      o.lines = a.outline.map(line => line.map(p => {
        const x = mx(p[1]), y = my(p[0]);
        o.x0 = Math.min(o.x0, x); o.x1 = Math.max(o.x1, x); o.y0 = Math.min(o.y0, y); o.y1 = Math.max(o.y1, y);
        return [x, y];
      }));
      edges += a.edges; cut = cut || a.truncated;
      return o;
    });
    areaLayer.dataset.edges = edges;
    document.getElementById("area-legend").hidden = areas.length === 0;
    document.getElementById("area-cut").hidden = !cut;
    document.getElementById("area-edges").textContent = edges;
  }

  // drawAreas places the outlines' paths when the view changed.
  function drawAreas(v) {
    if (v && v !== areasView) {
      const px = (n, c, half) => ((n - c) * v.k + half).toFixed(1);
      for (const a of areas) {
        if (!a.el) { a.el = document.createElementNS(SVG, "path"); areaLayer.appendChild(a.el); }
        a.el.setAttribute("d", a.lines.map(line =>
          "M" + line.map(p => px(p[0], v.cx, v.w / 2) + "," + px(p[1], v.cy, v.h / 2)).join("L")).join(""));
      }
      areasView = v;
    }
    areaLayer.dataset.drawn = v ? areas.length : 0;
  }

  // Dead zones. A zone is [cell, market, warnings, couriers, restored, open,
  // silence_ms, longest_silence_ms, windows, first_window_start_ms,
  // last_window_end_ms, [[lat, lon], …]] (board/state.go, encode).
  function setZone(a) {
    const key = a[1] + "|" + a[0];
    let z = zones.get(key);
    if (!z) { z = {el: null}; zones.set(key, z); }
    Object.assign(z, {cell: a[0], m: a[1], w: a[2], c: a[3], r: a[4], o: a[5], s: a[6], l: a[7], n: a[8], fs: a[9], le: a[10], b: a[11]});
    z.x0 = z.y0 = Infinity; z.x1 = z.y1 = -Infinity;
    for (const p of z.b) {
      const x = mx(p[1]), y = my(p[0]);
      z.x0 = Math.min(z.x0, x); z.x1 = Math.max(z.x1, x); z.y0 = Math.min(z.y0, y); z.y1 = Math.max(z.y1, y);
    }
    zonesChanged.add(z);
  }

  function dropZone(key) {
    const z = zones.get(key);
    if (!z) return;
    if (z.el) z.el.remove();
    zones.delete(key); zonesChanged.delete(z);
  }

  function clearZones() {
    zoneLayer.replaceChildren();
    zones.clear(); zonesChanged.clear(); zonesView = null;
  }

  // The colour class of a cell by its warnings: 1, 2–4, 5–9, 10 or more.
  function zoneClass(w) { return w >= 10 ? "z4" : w >= 5 ? "z3" : w >= 2 ? "z2" : "z1"; }

  // drawZones places the polygons of the zones that changed, or of every
  // zone when the view or the threshold changed; a zone with fewer warnings
  // than the threshold has no polygon.
  function drawZones(v) {
    zoneLayer.style.display = zonesShown ? "" : "none";
    if (zonesShown && v) {
      for (const z of v !== zonesView ? zones.values() : zonesChanged) {
        if (z.w < zonesMin) {
          if (z.el) { z.el.remove(); z.el = null; }
          continue;
        }
        if (!z.el) { z.el = document.createElementNS(SVG, "polygon"); z.el.zone = z; zoneLayer.appendChild(z.el); }
        z.el.setAttribute("points", z.b.map(p => project(v, p[0], p[1]).map(n => n.toFixed(1)).join(",")).join(" "));
        z.el.setAttribute("class", zoneClass(z.w));
      }
      zonesChanged.clear(); zonesView = v;
    }
    let shown = 0;
    for (const z of zones.values()) if (z.w >= zonesMin) shown++;
    zoneLayer.dataset.drawn = zonesShown && v ? shown : 0;
    setText("n-zones", shown);
    setText("n-zones-all", zones.size);
  }

  function plural(n, word) { return n + " " + word + (n === 1 ? "" : "s"); }

  // Clocks by market: its IANA time zone ("tz"), a 24-hour clock.
  const clocks = new Map();
  function tzOf(m) { return (markets[m] && markets[m].tz) || "UTC"; }
  function clockOf(tz) {
    let f = clocks.get(tz);
    if (!f) {
      const opt = {timeZone: tz, hourCycle: "h23"};
      f = {
        date: new Intl.DateTimeFormat("en-CA", {...opt, year: "numeric", month: "2-digit", day: "2-digit"}),
        hms: new Intl.DateTimeFormat("en-GB", {...opt, hour: "2-digit", minute: "2-digit", second: "2-digit"}),
        hm: new Intl.DateTimeFormat("en-GB", {...opt, hour: "2-digit", minute: "2-digit"}),
      };
      clocks.set(tz, f);
    }
    return f;
  }
  // local is ms as a date and time in market m's zone: "YYYY-MM-DD HH:MM".
  function local(ms, m) { const f = clockOf(tzOf(m)); return f.date.format(ms) + " " + f.hm.format(ms); }
  // clock is ms's time in market m's zone, its date too if not today's;
  // remembered for the frame (a list's rows share their times).
  const clockMemo = new Map();
  function clock(ms, m, now) {
    const tz = tzOf(m), key = tz + "|" + ms + "|" + now;
    let s = clockMemo.get(key);
    if (s === undefined) {
      const f = clockOf(tz);
      const d = f.date.format(ms);
      s = (d === f.date.format(now) ? "" : d + " ") + f.hms.format(ms);
      clockMemo.set(key, s);
    }
    return s;
  }
  function setHidden(el, h) { if (el.hidden !== h) el.hidden = h; }
  // setText sets an element's text if it changed (no needless relayout).
  function setText(id, text) {
    const el = document.getElementById(id), t = String(text);
    if (el.textContent !== t) el.textContent = t;
  }
  // ago is how long before now ms was, to the second under a minute.
  function ago(ms, now) {
    const s = Math.max(0, Math.round((now - ms) / 1000));
    if (s < 60) return s + " s";
    if (s < 3600) return Math.floor(s / 60) + " min";
    return Math.floor(s / 3600) + " h " + Math.floor(s % 3600 / 60) + " min";
  }
  // minutes is how long before now ms was, in whole minutes: a list's row
  // then changes once a minute, not at every update.
  function minutes(ms, now) {
    const m = Math.floor(Math.max(0, now - ms) / 60000);
    if (m < 1) return "< 1 min";
    if (m < 60) return m + " min";
    return Math.floor(m / 60) + " h " + (m % 60) + " min";
  }
  // when is "HH:MM:SS (4 min ago)" in market m's zone.
  function when(ms, m, now) { return clock(ms, m, now) + " (" + ago(ms, now) + " ago)"; }

  function zoneText(z) {
    const a = local(z.fs, z.m), b = local(z.le, z.m);
    return `dead zone ${z.cell} (${markets[z.m] ? markets[z.m].name : ""})\n` +
      `${plural(z.w, "warning")}: ${z.o} open, ${z.r} restored\n` +
      plural(z.c, "courier") + (z.n > 1 ? " (summed over the windows)" : "") + "\n" +
      (z.r > 0 ? `mean silence ${dur(z.s / z.r)}, longest ${dur(z.l)}` : "mean silence –, none restored") + "\n" +
      `${plural(z.n, "window")}: ${a} – ${a.slice(0, 10) === b.slice(0, 10) ? b.slice(11) : b} ${tzOf(z.m)}`;
  }

  // haloOutside draws, under the dots, a disc in the outline's colour
  // round each courier outside the service area: a ring once the dot is
  // on it, and a fill costs the browser far less than a stroke.
  function haloOutside(R, w, h) {
    ctx.beginPath();
    for (const c of couriers.values()) {
      if (c.out === null || c.out === undefined || c.x < 0 || c.y < 0 || c.x > w || c.y > h) continue;
      ctx.moveTo(c.x + R, c.y);
      ctx.arc(c.x, c.y, R, 0, 2 * Math.PI);
      drawn.outside++;
    }
    ctx.fillStyle = AREA;
    ctx.fill();
  }

  function ringNoSignal(R, w, h) {
    ctx.beginPath();
    for (const c of couriers.values()) {
      if (c.st !== 3 || c.x < 0 || c.y < 0 || c.x > w || c.y > h) continue;
      ctx.moveTo(c.x + R, c.y);
      ctx.arc(c.x, c.y, R, 0, 2 * Math.PI);
    }
    ctx.stroke();
  }

  // Tiles, when a tile URL template is configured: the integer zoom below
  // the view's, scaled up.
  const tileCache = new Map();
  function drawTiles(v) {
    const zi = Math.max(0, Math.floor(v.z)), n = Math.pow(2, zi);
    const size = 256 * v.k / n; // screen pixels per tile
    const wx0 = v.cx - v.w / 2 / v.k, wy0 = v.cy - v.h / 2 / v.k; // world px (z0) at the top left
    const tx0 = Math.floor(wx0 * n / 256), ty0 = Math.floor(wy0 * n / 256);
    const tx1 = Math.floor((wx0 + v.w / v.k) * n / 256), ty1 = Math.floor((wy0 + v.h / v.k) * n / 256);
    for (let ty = Math.max(0, ty0); ty <= Math.min(n - 1, ty1); ty++) {
      for (let tx = tx0; tx <= tx1; tx++) {
        const x = ((tx % n) + n) % n;
        const src = tiles.replace("{z}", zi).replace("{x}", x).replace("{y}", ty);
        let img = tileCache.get(src);
        if (!img) {
          if (tileCache.size > 512) tileCache.clear();
          img = new Image(); img.onload = schedule; img.src = src; tileCache.set(src, img);
        }
        if (img.complete && img.naturalWidth) {
          ctx.drawImage(img, (tx * 256 / n - wx0) * v.k, (ty * 256 / n - wy0) * v.k, size + 0.5, size + 0.5);
        }
      }
    }
  }

  function drawScale(v, w, h) {
    const lat = (Math.atan(Math.sinh(Math.PI * (1 - 2 * v.cy / 256))) * 180) / Math.PI;
    const mpp = 40075016.686 * Math.cos(lat * Math.PI / 180) / (256 * v.k);
    const target = mpp * Math.min(160, w / 4);
    const p = Math.pow(10, Math.floor(Math.log10(target)));
    const m = [5, 2, 1].map(f => f * p).find(x => x <= target) || p;
    const px = m / mpp, x = 16, y = h - 18;
    ctx.strokeStyle = ctx.fillStyle = css.getPropertyValue("--fg").trim();
    ctx.lineWidth = 2;
    ctx.beginPath(); ctx.moveTo(x, y - 6); ctx.lineTo(x, y); ctx.lineTo(x + px, y); ctx.lineTo(x + px, y - 6); ctx.stroke();
    ctx.font = "0.9rem system-ui, sans-serif";
    ctx.fillText(m >= 1000 ? (m / 1000) + " km" : m + " m", x + px + 8, y);
  }

  function dur(ms) {
    const s = Math.max(0, Math.round(ms / 1000));
    if (s < 60) return s + " s";
    if (s < 3600) return Math.floor(s / 60) + " min " + (s % 60) + " s";
    return Math.floor(s / 3600) + " h " + Math.floor(s % 3600 / 60) + " min";
  }

  // fill replaces a table's rows, unless they are the ones shown. A row
  // whose first cell is a courier's id selects it when clicked.
  const shownRows = new Map();
  function fill(id, rows) {
    const key = JSON.stringify(rows) + "|" + selected;
    if (shownRows.get(id) === key) return;
    shownRows.set(id, key);
    const body = document.querySelector("#" + id + " tbody");
    const frag = document.createDocumentFragment();
    for (const cells of rows) {
      const tr = document.createElement("tr");
      if (cells.id) { tr.dataset.id = cells.id; if (cells.id === selected) tr.className = "sel"; }
      for (const cell of cells) {
        const td = document.createElement("td");
        if (Array.isArray(cell)) { td.textContent = cell[0]; td.className = cell[1]; } else td.textContent = cell;
        tr.appendChild(td);
      }
      frag.appendChild(tr);
    }
    body.replaceChildren(frag);
  }

  // row is a list's row of courier id: its cells, and the id to select.
  function row(id, ...cells) { const r = [id, ...cells]; r.id = id; return r; }

  // A list keeps its MAX_ROWS longest entries (earliest since, then id)
  // as it goes, and counts the rest: no sort of the whole fleet.
  const MAX_ROWS = 10;
  function newList() { return {top: [], n: 0}; }
  function before(a, b) { return a[2] < b[2] || a[2] === b[2] && a[0] < b[0]; }
  function offer(l, id, c, since) {
    l.n++;
    const t = l.top;
    if (t.length === MAX_ROWS) {
      const last = t[MAX_ROWS - 1];
      if (since > last[2] || since === last[2] && id >= last[0]) return;
    }
    const e = [id, c, since];
    let k = t.length < MAX_ROWS ? t.length : MAX_ROWS - 1;
    while (k > 0 && before(e, t[k - 1])) { t[k] = t[k - 1]; k--; }
    t[k] = e;
  }

  // list fills a list's table: id, since when, for how long.
  function list(id, countId, l, now) {
    setText(countId, l.n);
    const rows = l.top.map(([cid, c, since]) => row(cid, clock(since, c.m, now), minutes(since, now)));
    if (l.n > MAX_ROWS) rows.push(["… " + (l.n - MAX_ROWS) + " more", "", ""]);
    fill(id, rows);
  }

  function tables() {
    const now = Date.now() + skew;
    clockMemo.clear();
    const perMarket = markets.map(() => 0);
    const silent = newList(), stopped = newList(), out = newList(), dist = [];
    const all = [0, 0, 0, 0];
    let total = 0, withDist = 0;
    for (const [id, c] of couriers) {
      perMarket[c.m]++;
      all[c.st]++;
      if (c.st === 3) offer(silent, id, c, c.ts);
      if (c.st === 2 && c.ss !== null && c.ss !== undefined) offer(stopped, id, c, c.ss);
      if (c.out !== null && c.out !== undefined) offer(out, id, c, c.out);
      if (c.d !== null) { dist.push([id, c]); total += c.d; withDist++; }
    }
    // The legend counts every courier, on the map or not.
    STATES.forEach((s, i) => setText("n-" + s, all[i]));
    setText("n-outside", out.n);
    const yesNo = b => b ? ["up", "ok"] : ["down", "bad"];
    fill("markets", markets.map((m, i) => [m.name, perMarket[i],
      m.lag_ms === null ? "–" : dur(m.lag_ms), m.received_per_s.toFixed(1),
      m.late_per_s.toFixed(2), m.rejected_per_s.toFixed(2), yesNo(m.mqtt), yesNo(m.nats)]));
    list("nosignal", "ns-count", silent, now);
    list("stopped", "st-count", stopped, now);
    setHidden(document.getElementById("outside-section"), areas.length === 0);
    list("outside", "out-count", out, now);
    dist.sort((a, b) => b[1].d - a[1].d);
    setText("dist-summary", withDist
      ? `${withDist} couriers with a window: ${(total / 1000).toFixed(1)} km in all, ${(total / withDist / 1000).toFixed(2)} km each on average; top ${Math.min(15, dist.length)}:`
      : "no window has fired yet");
    fill("distance", dist.slice(0, 15).map(([id, c]) => row(id, (c.d / 1000).toFixed(2), LABEL[STATES[c.st]])));
    dailyLists();
    setText("footer",
      `${couriers.size} couriers · ${zones.size} dead-zone cells` + (zonesDropped ? ` (${zonesDropped} windows dropped at the cap)` : "") +
      ` · ${updates} updates (last ${(lastBytes / 1024).toFixed(1)} KiB) · board dropped ${dropped}, refused ${refused}`);
    if (markets.length) {
      const tz = tzOf(0);
      setText("clock", clockOf(tz).hm.format(now) + " " + tz);
    }
    details(now);
  }

  // Yesterday's greatest distances: per market with a lake, a line with
  // the date and the day's figures, or why there are none, and the list.
  const WEEKDAY = new Intl.DateTimeFormat("en-GB", {weekday: "short", timeZone: "UTC"});
  function dayOf(date) {
    const [y, m, d] = date.split("-").map(Number);
    return WEEKDAY.format(Date.UTC(y, m - 1, d)) + " " + date;
  }
  function dailyLists() {
    const box = document.getElementById("daily-list");
    setHidden(document.getElementById("daily-section"), daily.length === 0);
    while (box.children.length > daily.length) box.lastElementChild.remove();
    daily.forEach((d, i) => {
      let el = box.children[i];
      if (!el) {
        el = document.createElement("div");
        el.className = "daily";
        el.innerHTML = `<p class="summary"></p><table id="daily-${i}" class="list"><thead><tr><th>courier</th><th>km</th><th>positions</th></tr></thead><tbody></tbody></table>`;
        box.appendChild(el);
      }
      const name = markets[d.market] ? markets[d.market].name : "";
      el.dataset.market = name;
      el.dataset.state = d.state;
      const head = (daily.length > 1 ? name + " · " : "") + dayOf(d.date) + ": ";
      el.firstChild.textContent = head + (
        d.state === "missing" ? "not computed yet (edgeproc daily writes it after midnight, at 01:30 by its timer)" :
        d.state !== "ok" ? "unavailable: the day's table could not be read (the service's log says why)" :
        d.couriers === 0 ? "no courier" :
        `${plural(d.couriers, "courier")}, ${(d.distance_m / 1000).toFixed(1)} km in all; top ${d.top.length}:`);
      const ok = d.state === "ok" && d.top.length > 0;
      setHidden(el.lastChild, !ok);
      fill("daily-" + i, ok ? d.top.map(t => row(t.courier, (t.distance_m / 1000).toFixed(1), t.positions)) : []);
    });
  }

  // Details of the selected courier: the only place with its coordinates.
  const detailsBox = document.getElementById("details");
  function details(now) {
    const c = selected !== null ? couriers.get(selected) : undefined;
    setHidden(detailsBox, !c);
    if (!c) return;
    const items = [
      ["market", markets[c.m] ? markets[c.m].name : ""],
      ["state", LABEL[STATES[c.st]]],
    ];
    if (c.st === 2 && c.ss !== null && c.ss !== undefined) items.push(["stopped since", when(c.ss, c.m, now)]);
    if (c.out !== null && c.out !== undefined) items.push(["outside the area since", when(c.out, c.m, now)]);
    items.push([c.st === 3 ? "last seen" : "last position", when(c.ts, c.m, now)]);
    items.push(["at", c.lat.toFixed(5) + ", " + c.lon.toFixed(5)]);
    if (c.d !== null) {
      items.push(["latest window", `${(c.d / 1000).toFixed(2)} km to ${clock(c.de, c.m, now)}` + (c.rv > 0 ? ` (revision ${c.rv})` : "")]);
    }
    const key = selected + JSON.stringify(items);
    if (detailsBox.dataset.key === key) return;
    detailsBox.dataset.key = key;
    document.getElementById("details-id").textContent = selected;
    const frag = document.createDocumentFragment();
    for (const [k, v] of items) {
      const dt = document.createElement("dt"), dd = document.createElement("dd");
      dt.textContent = k; dd.textContent = v;
      frag.append(dt, dd);
    }
    document.getElementById("details-body").replaceChildren(frag);
  }

  // select finds a courier: the map centres on it, its label shows and its
  // details open; null closes them and shows the whole fleet again.
  const selLabel = document.getElementById("sel-label");
  const searchMsg = document.getElementById("search-msg");
  function select(id) {
    if (id !== null && !couriers.has(id)) return false;
    selected = id; view = null; searchMsg.textContent = "";
    schedule();
    return true;
  }

  // placeLabel puts a label with the courier's id next to its dot.
  function placeLabel(el, id, c, w, h) {
    if (!c || c.x === undefined || c.x < 0 || c.y < 0 || c.x > w || c.y > h) { el.hidden = true; return; }
    el.textContent = id;
    el.style.left = (c.x + 10) + "px"; el.style.top = (c.y - 22) + "px";
    el.hidden = false;
  }

  // The search box: an exact id, or the one id that contains the text, or
  // the first of those in order; the list offers the first 20 that match.
  const search = document.getElementById("search");
  const searchIds = document.getElementById("search-ids");
  function matches(text, n) {
    const q = text.trim().toLowerCase(), out = [];
    if (!q) return out;
    for (const id of couriers.keys()) if (id.toLowerCase().includes(q)) out.push(id);
    out.sort();
    return out.slice(0, n);
  }
  search.addEventListener("input", () => {
    const frag = document.createDocumentFragment();
    for (const id of matches(search.value, 20)) { const o = document.createElement("option"); o.value = id; frag.appendChild(o); }
    searchIds.replaceChildren(frag);
    if (couriers.has(search.value.trim())) select(search.value.trim());
  });
  search.addEventListener("keydown", e => {
    if (e.key !== "Enter") return;
    e.preventDefault();
    const q = search.value.trim();
    if (!q) { select(null); return; }
    const id = couriers.has(q) ? q : matches(q, 1)[0];
    if (!id || !select(id)) searchMsg.textContent = "no courier " + q;
  });
  document.getElementById("details-close").addEventListener("click", () => { select(null); search.value = ""; });
  addEventListener("keydown", e => { if (e.key === "Escape" && selected !== null) { select(null); search.value = ""; } });
  document.querySelector("aside").addEventListener("click", e => {
    const tr = e.target.closest("tr[data-id]");
    if (tr) { select(tr.dataset.id); search.value = tr.dataset.id; }
  });

  // nearest is the courier drawn within 10 px of (x, y), or null.
  function nearest(x, y) {
    let best = null, bd = 100;
    for (const [id, c] of couriers) {
      const d = (c.x - x) ** 2 + (c.y - y) ** 2;
      if (d < bd) { bd = d; best = [id, c]; }
    }
    return best;
  }

  // Hover: the nearest courier within 10 px, its id first, else the dead
  // zone under the pointer (its polygon is the event's target: the layer is
  // over the canvas). A click selects the courier.
  const mapArea = canvas.parentElement;
  mapArea.addEventListener("mousemove", e => {
    const zone = e.target.zone;
    if (e.target !== canvas && !zone) { tip.hidden = true; return; }
    const rect = canvas.getBoundingClientRect(), x = e.clientX - rect.left, y = e.clientY - rect.top;
    const best = nearest(x, y);
    if (best) {
      const [id, c] = best, now = Date.now() + skew;
      tip.textContent = `${id} · ${LABEL[STATES[c.st]]}` + (markets.length > 1 && markets[c.m] ? ` (${markets[c.m].name})` : "") +
        (c.st === 2 && c.ss !== null && c.ss !== undefined ? `\nstopped since ${when(c.ss, c.m, now)}` : "") +
        (c.out !== null && c.out !== undefined ? `\noutside the service area since ${when(c.out, c.m, now)}` : "") +
        (c.d !== null ? `\n${(c.d / 1000).toFixed(2)} km in the latest window` + (c.rv > 0 ? ` (revision ${c.rv})` : "") : "") +
        `\n${c.st === 3 ? "last seen" : "last position"} ${when(c.ts, c.m, now)}`;
      tip.style.left = (c.x + 12) + "px"; tip.style.top = (c.y + 10) + "px"; tip.hidden = false;
      return;
    }
    if (zone) {
      tip.textContent = zoneText(zone);
      tip.style.left = (x + 14) + "px"; tip.style.top = (y + 10) + "px"; tip.hidden = false;
      return;
    }
    tip.hidden = true;
  });
  mapArea.addEventListener("mouseleave", () => { tip.hidden = true; });
  mapArea.addEventListener("click", e => {
    if (e.target !== canvas && !e.target.zone) return;
    const rect = canvas.getBoundingClientRect();
    const best = nearest(e.clientX - rect.left, e.clientY - rect.top);
    if (best) { select(best[0]); search.value = best[0]; }
  });
})();
