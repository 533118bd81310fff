(function () {
  'use strict';
  // Errors are written into the DOM so a headless `--dump-dom` can see them.
  const errors = [];
  function noteError(msg) {
    errors.push(msg);
    document.body.dataset.errors = errors.join(' | ');
  }
  window.addEventListener('error', (e) => noteError(String(e.message) + ' @' + e.lineno + ':' + e.colno));

  const T0 = performance.now();
  document.body.dataset.startMs = T0.toFixed(1);
  const D = JSON.parse(document.getElementById('fc-data').textContent);
  document.body.dataset.parseMs = (performance.now() - T0).toFixed(1);

  const CSSV = getComputedStyle(document.documentElement);
  const css = (name) => CSSV.getPropertyValue(name).trim();
  const COL = {
    ok: css('--ok'), rej: css('--rej'), fail: css('--opfail'), unk: css('--opunk'), stale: css('--stale'),
    hold: css('--hold'), holdEdge: css('--hold-edge'), ka: css('--ka'),
    pause: css('--pause'), revoke: css('--revoke'), other: css('--other'),
  };
  const FAULT_BAR = { pause: 'rgba(255,159,28,.85)', 'revoke-lease': 'rgba(148,103,189,.9)' };
  const faultShade = (k) => (k === 'pause' ? COL.pause : k === 'revoke-lease' ? COL.revoke : COL.other);

  // ---- data, as typed arrays -------------------------------------------------------
  const O = D.ops, HO = D.holds;
  const nOps = O.s.length, nHolds = HO.s.length, nLanes = D.workers.length;
  const num = (a) => Float64Array.from(a, (x) => (x === null ? NaN : +x));
  const oF = Int32Array.from(O.f), oO = Int32Array.from(O.o);
  // Starts come as deltas within a lane and ends as durations (see data_json).
  const oLane = Int32Array.from(D.opLanes);
  const oW = new Int32Array(nOps), oS = new Float64Array(nOps), oE = new Float64Array(nOps);
  for (let l = 0; l < nLanes; l++) {
    let t = 0;
    for (let i = oLane[l]; i < oLane[l + 1]; i++) {
      t += O.s[i];
      oW[i] = l;
      oS[i] = t;
      oE[i] = O.d[i] === null ? NaN : t + O.d[i];
    }
  }
  const hW = Int32Array.from(HO.w), hS = num(HO.s), hE = num(HO.e);
  const ACQ = D.fnames.indexOf('acquire');
  // Outcome index -> severity (for "worst outcome" buckets) and colour.
  const SEV = D.outcomes.map((o) => ({ ok: 1, 'rejected-stale': 2, fail: 3 })[o] || 4);
  const SEV_COL = [null, COL.ok, COL.rej, COL.fail, COL.unk];
  const outCol = (i) => SEV_COL[SEV[i]];

  function laneRanges(w, n) {
    const start = new Int32Array(nLanes + 1);
    let i = 0;
    for (let l = 0; l < nLanes; l++) {
      while (i < n && w[i] < l) i++;
      start[l] = i;
    }
    start[nLanes] = n;
    return start;
  }
  const hLane = laneRanges(hW, nHolds);
  // Longest op/hold per lane: the binary search for a view starts that far back.
  function maxDur(lane, s, e, acqOnly) {
    const m = new Float64Array(nLanes);
    for (let l = 0; l < nLanes; l++) {
      let best = 0;
      for (let i = lane[l]; i < lane[l + 1]; i++) {
        if (acqOnly !== undefined && (oF[i] === ACQ) !== acqOnly) continue;
        const d = (isNaN(e[i]) ? s[i] : e[i]) - s[i];
        if (d > best) best = d;
      }
      m[l] = best;
    }
    return m;
  }
  const oMax = maxDur(oLane, oS, oE), hMax = maxDur(hLane, hS, hE);
  function lowerBound(arr, lo, hi, v) {
    while (lo < hi) {
      const mid = (lo + hi) >> 1;
      if (arr[mid] < v) lo = mid + 1; else hi = mid;
    }
    return lo;
  }
  let tMin = 0, tMax = Math.max(D.end, 1);
  for (let i = 0; i < nOps; i++) {
    if (oS[i] < tMin) tMin = oS[i];
    if (oE[i] > tMax) tMax = oE[i];
  }
  const opEnd = (i) => (isNaN(oE[i]) ? oS[i] : oE[i]);
  const faultEnd = (f) => (f.e === null ? tMax : f.e);

  // ---- formatting -------------------------------------------------------------------
  const esc = (s) => String(s).replace(/[&<>"']/g, (c) => ({ '&': '&amp;', '<': '&lt;', '>': '&gt;', '"': '&quot;', "'": '&#39;' })[c]);
  function fmtT(us, span) {
    const s = us / 1e6, sp = (span || view.b - view.a) / 1e6;
    const d = sp > 20 ? 2 : sp > 2 ? 3 : sp > 0.2 ? 4 : 6;
    return s.toFixed(d) + ' s';
  }
  function fmtDur(us) {
    if (us >= 1e6) return (us / 1e6).toFixed(2) + ' s';
    if (us >= 1e3) return (us / 1e3).toFixed(2) + ' ms';
    return Math.round(us) + ' µs';
  }
  function niceStep(x) {
    const p = Math.pow(10, Math.floor(Math.log10(x)));
    const m = x / p;
    return (m <= 1 ? 1 : m <= 2 ? 2 : m <= 5 ? 5 : 10) * p;
  }

  // ---- timeline layout and view -----------------------------------------------------
  const AXIS = 26, NEM = 30, LH = D.laneH, GUTTER = 90;
  const canvas = document.getElementById('tl-canvas');
  const ctx = canvas.getContext('2d');
  const tip = document.getElementById('tl-tip');
  const rangeLabel = document.getElementById('tl-range');
  const HEIGHT = AXIS + NEM + nLanes * LH;
  const pad0 = (tMax - tMin) * 0.01;
  const FULL = { a: tMin - pad0, b: tMax + pad0 };
  const view = { a: FULL.a, b: FULL.b };
  let W = 0, dpr = 1, focus = null;
  const laneY = (l) => AXIS + NEM + l * LH;
  const X = (t) => ((t - view.a) / (view.b - view.a)) * W;
  const T = (x) => view.a + (x / W) * (view.b - view.a);

  function sizeCanvas(c, h) {
    const w = c.parentElement.clientWidth;
    dpr = window.devicePixelRatio || 1;
    c.width = Math.max(1, Math.round(w * dpr));
    c.height = Math.round(h * dpr);
    c.style.height = h + 'px';
    const g = c.getContext('2d');
    g.setTransform(dpr, 0, 0, dpr, 0, 0);
    return w;
  }

  function setView(a, b) {
    const span = Math.max(100, Math.min(b - a, (FULL.b - FULL.a) * 1.5));
    let mid = (a + b) / 2;
    const lo = FULL.a - span * 0.25, hi = FULL.b + span * 0.25;
    mid = Math.min(Math.max(mid, lo + span / 2), hi - span / 2);
    view.a = mid - span / 2;
    view.b = mid + span / 2;
    scheduleDraw();
  }

  // Per-part timings of the last full draw, kept for the benchmark.
  const timings = {};
  function timed(name, f) {
    const t = performance.now();
    f();
    timings[name] = performance.now() - t;
  }
  // While the user zooms or drags, only the timeline follows frame by frame; the
  // charts catch up once the view has rested (they scan every op).
  let pending = false, chartTimer = 0;
  function scheduleDraw() {
    if (pending) return;
    pending = true;
    requestAnimationFrame(() => {
      pending = false;
      timed('timeline', drawTimeline);
      clearTimeout(chartTimer);
      chartTimer = setTimeout(() => {
        timed('throughput', drawThroughput);
        timed('latency', drawLatency);
      }, nOps > 20000 ? 150 : 30);
    });
  }
  function drawAll() {
    timed('timeline', drawTimeline);
    timed('throughput', drawThroughput);
    timed('latency', drawLatency);
  }

  const hatch = (() => {
    const p = document.createElement('canvas');
    p.width = p.height = 8;
    const g = p.getContext('2d');
    g.strokeStyle = 'rgba(214,39,40,.5)';
    g.lineWidth = 2;
    g.beginPath();
    g.moveTo(0, 8); g.lineTo(8, 0); g.moveTo(-2, 2); g.lineTo(2, -2); g.moveTo(6, 10); g.lineTo(10, 6);
    g.stroke();
    return ctx.createPattern(p, 'repeat');
  })();

  function drawAxis(g, top, h, w) {
    const span = view.b - view.a;
    const step = niceStep(span / Math.max(2, w / 110));
    g.fillStyle = '#667085';
    g.strokeStyle = '#eef0f4';
    g.font = '11px system-ui, sans-serif';
    g.textAlign = 'center';
    g.textBaseline = 'middle';
    const first = Math.ceil(view.a / step) * step;
    const dec = Math.max(0, -Math.floor(Math.log10(step / 1e6) + 1e-9));
    for (let t = first; t <= view.b; t += step) {
      const x = Math.round(X(t)) + 0.5;
      g.beginPath();
      g.moveTo(x, top);
      g.lineTo(x, top + h);
      g.stroke();
      if (top === AXIS) g.fillText((t / 1e6).toFixed(dec) + ' s', x, AXIS / 2);
    }
  }

  const WAIT = '#9aa5b8';
  // Calls f(from, to, value) for each run of equal non-zero values.
  function runs(arr, f) {
    let c = 0;
    while (c < arr.length) {
      const v = arr[c];
      let c2 = c + 1;
      while (c2 < arr.length && arr[c2] === v) c2++;
      if (v) f(c, c2, v);
      c = c2;
    }
  }

  function drawTimeline() {
    W = sizeCanvas(canvas, HEIGHT);
    const g = ctx;
    g.clearRect(0, 0, W, HEIGHT);
    // Lane backgrounds and grid.
    g.fillStyle = '#fff7ea';
    g.fillRect(0, AXIS, W, NEM);
    for (let l = 0; l < nLanes; l++) {
      g.fillStyle = l % 2 ? '#fbfcfd' : '#ffffff';
      g.fillRect(0, laneY(l), W, LH);
    }
    drawAxis(g, AXIS, HEIGHT - AXIS, W);
    g.fillStyle = '#e1e4ea';
    g.fillRect(0, AXIS - 1, W, 1);
    g.fillRect(0, AXIS + NEM - 1, W, 1);
    // Outside the run.
    g.fillStyle = 'rgba(0,0,0,.05)';
    if (X(0) > 0) g.fillRect(0, AXIS, X(0), HEIGHT);
    if (X(D.end) < W) g.fillRect(X(D.end), AXIS, W - X(D.end), HEIGHT);

    // Fault windows, across every lane, behind the data.
    for (const f of D.faults) {
      const x0 = X(f.s), x1 = Math.max(X(faultEnd(f)), x0 + 2);
      if (x1 < 0 || x0 > W) continue;
      g.fillStyle = faultShade(f.kind);
      g.fillRect(x0, AXIS + NEM, x1 - x0, HEIGHT - AXIS - NEM);
      // A stripe along the top of each victim's lane says whose fault it is.
      g.fillStyle = FAULT_BAR[f.kind] || 'rgba(120,120,120,.7)';
      for (const v of f.victims || []) {
        if (v === null) continue;
        g.fillRect(x0, laneY(v), x1 - x0, 3);
      }
    }
    // Nemesis lane: one bar per fault, in two rows so that overlapping faults and
    // their labels stay readable; a label that fits nowhere is left to the tooltip.
    const rows = [-Infinity, -Infinity];
    g.font = '10px system-ui, sans-serif';
    g.textAlign = 'left';
    g.textBaseline = 'middle';
    for (const f of D.faults) {
      const x0 = X(f.s), x1 = Math.max(X(faultEnd(f)), x0 + 3);
      if (x1 < 0 || x0 > W) continue;
      const label = '#' + f.id + ' ' + f.kind + (f.victims && f.victims.length ? ' w' + f.victims.map((v) => D.workers[v]).join(',') : '');
      const tw = g.measureText(label).width;
      const inside = x1 - x0 > tw + 6;
      const extent = inside ? x1 : x1 + tw + 6;
      let row = rows[0] <= x0 ? 0 : rows[1] <= x0 ? 1 : -1;
      const showLabel = row >= 0;
      if (row < 0) row = rows[0] <= rows[1] ? 0 : 1;
      rows[row] = Math.max(rows[row], showLabel ? extent + 4 : x1 + 2);
      const y = AXIS + 3 + row * 12, h = 11;
      g.fillStyle = FAULT_BAR[f.kind] || 'rgba(120,120,120,.7)';
      g.fillRect(x0, y, x1 - x0, h);
      if (f.outcome !== 'ok') {
        g.strokeStyle = COL.stale;
        g.strokeRect(x0 + 0.5, y + 0.5, x1 - x0 - 1, h - 1);
      }
      if (showLabel) {
        g.fillStyle = '#3b2a00';
        g.fillText(label, inside ? Math.max(x0, 0) + 3 : x1 + 3, y + h / 2 + 0.5);
      }
    }

    const va = view.a, vb = view.b;
    for (let l = 0; l < nLanes; l++) {
      const y = laneY(l);
      // Holds: each one outlined when there is room, else the covered pixel columns.
      const h0 = lowerBound(hS, hLane[l], hLane[l + 1], va - hMax[l]);
      let h1 = h0;
      while (h1 < hLane[l + 1] && hS[h1] <= vb) h1++;
      if (h1 - h0 > W / 3) {
        const cover = new Uint8Array(Math.ceil(W) + 2);
        for (let i = h0; i < h1; i++) {
          if (hE[i] < va) continue;
          const c0 = Math.max(0, Math.floor(X(hS[i]))), c1 = Math.min(W + 1, Math.floor(X(hE[i])));
          for (let c = c0; c <= c1; c++) cover[c] = 1;
        }
        g.fillStyle = COL.hold;
        runs(cover, (c, c2) => g.fillRect(c, y + 3, c2 - c, LH - 7));
      } else {
        for (let i = h0; i < h1; i++) {
          if (hE[i] < va) continue;
          const x0 = X(hS[i]), x1 = Math.max(X(hE[i]), x0 + 1);
          g.fillStyle = COL.hold;
          g.fillRect(x0, y + 3, x1 - x0, LH - 7);
          g.strokeStyle = COL.holdEdge;
          g.lineWidth = 1;
          if (HO.rel[i]) {
            g.strokeRect(x0 + 0.5, y + 3.5, x1 - x0 - 1, LH - 8);
          } else {
            // Never released: no closing edge.
            g.beginPath();
            g.moveTo(x1, y + 3.5); g.lineTo(x0 + 0.5, y + 3.5); g.lineTo(x0 + 0.5, y + LH - 4.5); g.lineTo(x1, y + LH - 4.5);
            g.stroke();
          }
          if (x1 - x0 > 46 && LH >= 16) {
            g.fillStyle = '#41597a';
            g.font = '10px system-ui, sans-serif';
            g.textAlign = 'left';
            g.textBaseline = 'top';
            const r = HO.r[i];
            g.fillText((D.keys[HO.k[i]] || '') + (r !== null ? ' r' + r : ''), Math.max(x0, 0) + 3, y + 4);
          }
        }
      }
      // Unsafe windows: the holder's session had ended at the service.
      g.fillStyle = '#d62728';
      for (const u of (D.unsafe || [])) {
        if (u[0] !== l || u[2] < va || u[1] > vb) continue;
        const x0 = X(u[1]), x1 = Math.max(X(u[2]), x0 + 2);
        g.fillRect(x0, y + LH - 6, x1 - x0, 3);
      }
      // Ops. Acquires are waits for the lock, drawn as a thin line; the rest are marks,
      // one per op when there is room, else one worst-outcome bucket per pixel column.
      const lo = lowerBound(oS, oLane[l], oLane[l + 1], va - oMax[l]);
      let hi = lo;
      let visible = 0;
      while (hi < oLane[l + 1] && oS[hi] <= vb) {
        if (oF[hi] !== ACQ) visible++;
        hi++;
      }
      const markY = y + Math.round(LH * 0.45), markH = Math.max(3, Math.round(LH * 0.32));
      const waitY = y + LH - 4;
      const aggregate = visible > W / 4;
      // Zoomed out: the worst outcome per pixel column, for marks and waits alike.
      const cols = aggregate ? new Uint8Array(Math.ceil(W) + 2) : null;
      const waits = aggregate ? new Uint8Array(Math.ceil(W) + 2) : null;
      let fill = '';
      const setFill = (c) => { if (c !== fill) { g.fillStyle = c; fill = c; } };
      for (let k = lo; k < hi; k++) {
        const e = opEnd(k);
        if (e < va) continue;
        const x0 = X(oS[k]);
        const x1 = X(e);
        const acq = oF[k] === ACQ;
        if (aggregate) {
          const c0 = Math.max(0, Math.floor(x0)), c1 = Math.min(W + 1, Math.floor(x1));
          const sev = SEV[oO[k]], arr = acq ? waits : cols;
          for (let c = c0; c <= c1; c++) if (arr[c] < sev) arr[c] = sev;
        } else if (acq) {
          setFill(SEV[oO[k]] === 1 ? WAIT : outCol(oO[k]));
          g.fillRect(x0, waitY, Math.max(1, x1 - x0), 2);
          if (!isNaN(oE[k])) g.fillRect(x1 - 1, waitY - 3, 2, 5);
        } else {
          setFill(outCol(oO[k]));
          g.fillRect(x0, markY, Math.max(2, x1 - x0), markH);
          // Never completed: an open tail.
          if (isNaN(oE[k])) g.fillRect(x0, markY + markH / 2 - 0.5, 10, 1);
        }
      }
      if (aggregate) {
        runs(cols, (c, c2, sev) => { setFill(SEV_COL[sev]); g.fillRect(c, markY, c2 - c, markH); });
        runs(waits, (c, c2, sev) => { setFill(sev === 1 ? WAIT : SEV_COL[sev]); g.fillRect(c, waitY, c2 - c, 2); });
      }
    }

    // Keepalive-lost and other notices: a triangle at the top of the worker's lane.
    for (const n of D.notices) {
      if (n.w === null) continue;
      const x = X(n.t);
      if (x < -6 || x > W + 6) continue;
      const y = laneY(n.w);
      g.fillStyle = n.what === 'keepalive-lost' ? COL.ka : '#555';
      g.beginPath();
      g.moveTo(x - 5, y + 1); g.lineTo(x + 5, y + 1); g.lineTo(x, y + 9);
      g.closePath();
      g.fill();
    }

    // Check results on top.
    for (const m of D.marks) {
      if (m.kind === 'overlap') {
        const x0 = X(m.s), x1 = Math.max(X(m.e), x0 + 2);
        if (x1 < 0 || x0 > W) continue;
        for (const l of [m.a, m.b]) {
          if (l === null) continue;
          g.fillStyle = hatch;
          g.fillRect(x0, laneY(l) + 3, x1 - x0, LH - 7);
          g.strokeStyle = 'rgba(214,39,40,.8)';
          g.strokeRect(x0 + 0.5, laneY(l) + 3.5, x1 - x0 - 1, LH - 8);
        }
      }
    }
    for (const m of D.marks) {
      if (m.kind === 'stale' && m.w !== null) {
        const x = X(m.t), y = laneY(m.w) + LH / 2;
        if (m.w2 !== null) {
          const x2 = X(m.t2), y2 = laneY(m.w2) + LH / 2;
          if (Math.max(x, x2) >= 0 && Math.min(x, x2) <= W) {
            g.strokeStyle = COL.stale;
            g.setLineDash([4, 3]);
            g.lineWidth = 1.5;
            g.beginPath();
            g.moveTo(x2, y2); g.lineTo(x, y);
            g.stroke();
            g.setLineDash([]);
            g.lineWidth = 1;
            g.fillStyle = '#fff';
            g.beginPath(); g.arc(x2, y2, 3.5, 0, 7); g.fill(); g.stroke();
          }
        }
        if (x < -8 || x > W + 8) continue;
        const r = Math.min(7, LH / 2 - 1);
        g.fillStyle = COL.stale;
        g.strokeStyle = '#fff';
        g.beginPath();
        g.moveTo(x, y - r); g.lineTo(x + r, y); g.lineTo(x, y + r); g.lineTo(x - r, y);
        g.closePath();
        g.fill();
        g.stroke();
      } else if (m.kind === 'fresh' && m.w !== null) {
        const x = X(m.t), y = laneY(m.w) + LH / 2;
        if (x < -8 || x > W + 8) continue;
        g.strokeStyle = COL.rej;
        g.lineWidth = 2;
        g.beginPath(); g.arc(x, y, Math.min(6, LH / 2 - 2), 0, 7); g.stroke();
        g.lineWidth = 1;
      }
    }

    // The focused counterexample.
    if (focus) {
      const x0 = X(focus.lo), x1 = Math.max(X(focus.hi), x0 + 4);
      const lanes = focus.lanes.filter((l) => l !== null && l !== undefined);
      const y0 = lanes.length ? laneY(Math.min.apply(null, lanes)) : AXIS;
      const y1 = lanes.length ? laneY(Math.max.apply(null, lanes)) + LH : HEIGHT;
      g.fillStyle = 'rgba(255, 214, 0, .12)';
      g.fillRect(x0 - 4, y0, x1 - x0 + 8, y1 - y0);
      g.strokeStyle = 'rgba(230, 170, 0, .95)';
      g.lineWidth = 2;
      g.strokeRect(x0 - 4, y0 + 1, x1 - x0 + 8, y1 - y0 - 2);
      g.lineWidth = 1;
    }
    rangeLabel.textContent = 'showing ' + fmtT(view.a) + ' – ' + fmtT(view.b) + ' (' + fmtDur(view.b - view.a) + ')';
  }

  // ---- hover ------------------------------------------------------------------------
  function laneAt(y) {
    if (y < AXIS) return -2;
    if (y < AXIS + NEM) return -1;
    const l = Math.floor((y - AXIS - NEM) / LH);
    return l < nLanes ? l : -2;
  }
  const kv = (k, v) => (v === null || v === undefined ? '' : ' <span class="k">' + esc(k) + '</span> ' + esc(v));
  // Session ids (etcd lease IDs are 64-bit) arrive as exact decimal strings or
  // numbers; shown in hex, as etcdctl prints them.
  const hexId = (v) => (v === null || v === undefined ? v : '0x' + BigInt(v).toString(16));
  function opTip(i) {
    const f = D.fnames[oF[i]], o = D.outcomes[oO[i]];
    let s = '<b>worker ' + esc(D.workers[oW[i]]) + ' · ' + esc(f) + '</b> → <b style="color:' + outCol(oO[i]) + '">' + esc(o) + '</b><br>';
    s += kv('key', O.k[i] ? D.keys[O.k[i] - 1] : null) + kv('value', O.v[i]) + kv('token', O.t[i]) + kv('revision', O.r[i]) + kv('request', O.q[i]);
    s += '<br><span class="k">invoked</span> ' + fmtT(oS[i], 1e6);
    s += isNaN(oE[i]) ? ' · <b>never completed</b>' : ' · <span class="k">completed</span> ' + fmtT(oE[i], 1e6) + ' (' + fmtDur(oE[i] - oS[i]) + ')';
    if (O.x[i]) s += '<br><span class="k">error</span> ' + esc(D.errors[O.x[i] - 1]);
    return s;
  }
  function holdTip(i) {
    return '<b>worker ' + esc(D.workers[hW[i]]) + ' holds ' + esc(D.keys[HO.k[i]]) + '</b>' + kv('grant', HO.r[i]) + kv('session', hexId(HO.l[i])) +
      '<br><span class="k">acquired</span> ' + fmtT(hS[i], 1e6) + ' · <span class="k">' + (HO.rel[i] ? 'released' : 'never released; ends') + '</span> ' +
      fmtT(hE[i], 1e6) + ' (' + fmtDur(hE[i] - hS[i]) + ')';
  }
  function faultTip(f) {
    return '<b>fault #' + f.id + ' · ' + esc(f.kind) + ' → ' + esc(f.target) + '</b> (' + esc(f.outcome) + ')<br>' + esc(f.words) +
      '<br><span class="k">detail</span> ' + esc(JSON.stringify(f.detail, (k, v) => ((k === 'lease' || k === 'session') && (typeof v === 'string' || typeof v === 'number') ? hexId(v) : v)));
  }
  function hitTest(x, y) {
    const l = laneAt(y);
    if (l === -2) return null;
    const t = T(x), slop = (view.b - view.a) / W * 4;
    if (l === -1) {
      for (const f of D.faults) if (t >= f.s - slop && t <= faultEnd(f) + slop) return { html: faultTip(f) };
      return null;
    }
    const yIn = y - laneY(l);
    for (const m of D.marks) {
      if ((m.kind === 'stale' || m.kind === 'fresh') && m.w === l && Math.abs(X(m.t) - x) < 8) return { html: '<b>' + (m.kind === 'stale' ? 'stale write accepted' : 'legitimate write refused') + '</b><br>' + esc(m.words), mark: m.id };
    }
    for (const n of D.notices) {
      if (n.w === l && Math.abs(X(n.t) - x) < 6 && yIn < 12) return { html: '<b>' + esc(n.what) + '</b> · worker ' + esc(D.workers[l]) + ' at ' + fmtT(n.t, 1e6) + (n.detail ? '<br>' + esc(n.detail) : '') };
    }
    // The nearest op under the cursor, marks widened to a few pixels.
    let best = -1, bestD = Infinity;
    const lo = lowerBound(oS, oLane[l], oLane[l + 1], t - oMax[l] - slop);
    for (let k = lo; k < oLane[l + 1] && oS[k] <= t + slop; k++) {
      const isAcq = oF[k] === ACQ;
      if (isAcq !== yIn > LH - 8) continue;
      const s = oS[k], e = opEnd(k);
      const d = t < s ? s - t : t > e ? t - e : 0;
      if (d <= slop && d < bestD) { best = k; bestD = d; }
    }
    if (best >= 0) return { html: opTip(best) };
    for (const m of D.marks) {
      if (m.kind === 'overlap' && (m.a === l || m.b === l) && t >= m.s && t <= m.e) return { html: '<b>mutex overlap</b><br>' + esc(m.words), mark: m.id };
    }
    const hl = lowerBound(hS, hLane[l], hLane[l + 1], t - hMax[l]);
    for (let k = hl; k < hLane[l + 1] && hS[k] <= t; k++) if (hE[k] >= t) return { html: holdTip(k) };
    for (const f of D.faults) if (t >= f.s && t <= faultEnd(f)) return { html: faultTip(f) };
    return null;
  }
  function showTip(html, cx, cy) {
    if (!html) { tip.hidden = true; return; }
    tip.innerHTML = html;
    tip.hidden = false;
    const r = tip.getBoundingClientRect();
    let left = cx + 14, top = cy + 14;
    if (left + r.width > window.innerWidth - 8) left = cx - r.width - 14;
    if (top + r.height > window.innerHeight - 8) top = cy - r.height - 14;
    tip.style.left = Math.max(4, left) + 'px';
    tip.style.top = Math.max(4, top) + 'px';
  }

  // ---- zoom, pan, focus -------------------------------------------------------------
  function zoomAt(t, factor) {
    setView(t - (t - view.a) * factor, t + (view.b - t) * factor);
  }
  let drag = null;
  canvas.addEventListener('wheel', (e) => {
    e.preventDefault();
    const r = canvas.getBoundingClientRect();
    if (Math.abs(e.deltaX) > Math.abs(e.deltaY)) {
      const dt = (e.deltaX / W) * (view.b - view.a);
      setView(view.a + dt, view.b + dt);
    } else {
      zoomAt(T(e.clientX - r.left), Math.exp(e.deltaY * 0.0015));
    }
  }, { passive: false });
  canvas.addEventListener('mousedown', (e) => {
    const r = canvas.getBoundingClientRect();
    drag = { x: e.clientX, y: e.clientY, a: view.a, b: view.b, left: r.left, shift: e.shiftKey, moved: false };
    canvas.classList.add('dragging');
    e.preventDefault();
  });
  window.addEventListener('mousemove', (e) => {
    const r = canvas.getBoundingClientRect();
    if (drag) {
      const dx = e.clientX - drag.x;
      if (Math.abs(dx) > 3) drag.moved = true;
      if (drag.shift) {
        drawTimeline();
        const x0 = Math.min(drag.x, e.clientX) - r.left, x1 = Math.max(drag.x, e.clientX) - r.left;
        ctx.fillStyle = 'rgba(31,95,191,.15)';
        ctx.fillRect(x0, AXIS, x1 - x0, HEIGHT - AXIS);
      } else if (drag.moved) {
        const dt = (dx / W) * (drag.b - drag.a);
        setView(drag.a - dt, drag.b - dt);
      }
      tip.hidden = true;
      return;
    }
    const x = e.clientX - r.left, y = e.clientY - r.top;
    if (x < 0 || y < 0 || x > r.width || y > r.height) {
      if (e.target !== tip) tip.hidden = true;
      return;
    }
    const hit = hitTest(x, y);
    showTip(hit && hit.html, e.clientX, e.clientY);
  });
  window.addEventListener('mouseup', (e) => {
    if (!drag) return;
    const d = drag;
    drag = null;
    canvas.classList.remove('dragging');
    const r = canvas.getBoundingClientRect();
    if (d.shift && d.moved) {
      const x0 = Math.min(d.x, e.clientX) - r.left, x1 = Math.max(d.x, e.clientX) - r.left;
      setView(T(x0), T(x1));
    } else if (!d.moved) {
      // A click on a violation jumps to its description.
      const hit = hitTest(e.clientX - r.left, e.clientY - r.top);
      if (hit && hit.mark) {
        const li = document.getElementById(hit.mark);
        if (li) {
          const more = li.closest('details');
          if (more) more.open = true;
          li.scrollIntoView({ block: 'center' });
          li.classList.add('flash');
          setTimeout(() => li.classList.remove('flash'), 1500);
        }
      }
    }
  });
  canvas.addEventListener('dblclick', (e) => {
    const r = canvas.getBoundingClientRect();
    zoomAt(T(e.clientX - r.left), e.shiftKey ? 2 : 0.5);
  });
  canvas.addEventListener('mouseleave', () => { tip.hidden = true; });
  document.querySelectorAll('.tl-controls button').forEach((b) => {
    b.addEventListener('click', () => {
      const z = b.dataset.zoom, mid = (view.a + view.b) / 2;
      if (z === 'in') zoomAt(mid, 0.5);
      else if (z === 'out') zoomAt(mid, 2);
      else { focus = null; setView(FULL.a, FULL.b); }
    });
  });

  function focusOn(id) {
    let lo, hi, lanes = [];
    if (id.indexOf('fault-') === 0) {
      const f = D.faults.find((f) => 'fault-' + f.id === id);
      if (!f) return false;
      lo = f.s; hi = faultEnd(f); lanes = [];
    } else {
      const m = D.marks.find((m) => m.id === id);
      if (!m) return false;
      if (m.kind === 'stale') {
        lo = Math.min(m.t, m.t2); hi = Math.max(m.t, m.t2); lanes = [m.w, m.w2];
      } else if (m.kind === 'overlap') {
        lo = m.s; hi = m.e; lanes = [m.a, m.b];
      } else if (m.kind === 'fresh') {
        lo = hi = m.t; lanes = [m.w];
      } else {
        lo = m.s; hi = m.e; lanes = m.lanes || [];
      }
    }
    focus = { lo: lo, hi: hi, lanes: lanes };
    const span = Math.max(hi - lo, 2e5);
    setView(lo - span * 0.6, hi + span * 0.6);
    document.getElementById('timeline').scrollIntoView({ block: 'start' });
    return true;
  }
  document.querySelectorAll('a.goto').forEach((a) => {
    a.addEventListener('click', (e) => {
      if (focusOn(a.dataset.goto)) {
        e.preventDefault();
        history.replaceState(null, '', '#show=' + a.dataset.goto);
      }
    });
  });
  document.querySelectorAll('button.copy').forEach((b) => {
    b.addEventListener('click', () => {
      const text = document.getElementById(b.dataset.copy).textContent;
      if (navigator.clipboard) navigator.clipboard.writeText(text).then(() => { b.textContent = 'copied'; }, () => {});
    });
  });

  // ---- charts -----------------------------------------------------------------------
  // Both charts share the timeline's x axis (same view, plot area aligned with the
  // lanes by a gutter as wide as the lane labels).
  function chartFrame(c, h) {
    const w = sizeCanvas(c, h);
    const g = c.getContext('2d');
    g.clearRect(0, 0, w, h);
    const pw = w - GUTTER;
    const cx = (t) => GUTTER + ((t - view.a) / (view.b - view.a)) * pw;
    for (const f of D.faults) {
      const x0 = Math.max(GUTTER, cx(f.s)), x1 = Math.min(w, Math.max(cx(faultEnd(f)), cx(f.s) + 2));
      if (x1 <= x0) continue;
      g.fillStyle = faultShade(f.kind);
      g.fillRect(x0, 0, x1 - x0, h - 18);
    }
    // Time axis along the bottom.
    const step = niceStep((view.b - view.a) / Math.max(2, pw / 110));
    const dec = Math.max(0, -Math.floor(Math.log10(step / 1e6) + 1e-9));
    g.font = '11px system-ui, sans-serif';
    g.textAlign = 'center';
    g.textBaseline = 'middle';
    for (let t = Math.ceil(view.a / step) * step; t <= view.b; t += step) {
      const x = Math.round(cx(t)) + 0.5;
      g.strokeStyle = '#eef0f4';
      g.beginPath(); g.moveTo(x, 0); g.lineTo(x, h - 18); g.stroke();
      g.fillStyle = '#667085';
      g.fillText((t / 1e6).toFixed(dec) + ' s', x, h - 9);
    }
    g.fillStyle = '#e1e4ea';
    g.fillRect(GUTTER, h - 18, pw, 1);
    g.fillRect(GUTTER - 1, 0, 1, h - 18);
    return { g: g, w: w, pw: pw, cx: cx, h: h - 18 };
  }
  function bucketing(pw) {
    const bw = niceStep((view.b - view.a) / Math.max(8, pw / 7));
    const first = Math.floor(view.a / bw) * bw;
    const n = Math.ceil((view.b - first) / bw) + 1;
    return { bw: bw, first: first, n: n };
  }

  const tpCanvas = document.getElementById('chart-throughput');
  let tpState = null;
  function drawThroughput() {
    if (!tpCanvas) return;
    const fr = chartFrame(tpCanvas, 170), g = fr.g;
    const bk = bucketing(fr.pw);
    const counts = [1, 2, 3, 4].map(() => new Float64Array(bk.n));
    for (let i = 0; i < nOps; i++) {
      const e = oE[i];
      if (!(e >= view.a && e <= view.b)) continue;
      counts[SEV[oO[i]] - 1][Math.floor((e - bk.first) / bk.bw)]++;
    }
    const perSec = 1e6 / bk.bw;
    let max = 1;
    for (let b = 0; b < bk.n; b++) {
      const s = (counts[0][b] + counts[1][b] + counts[2][b] + counts[3][b]) * perSec;
      if (s > max) max = s;
    }
    const ystep = niceStep(max / 4), ymax = Math.ceil(max / ystep) * ystep;
    const Y = (v) => fr.h - (v / ymax) * (fr.h - 8);
    g.textAlign = 'right';
    g.font = '11px system-ui, sans-serif';
    for (let v = 0; v <= ymax + 1e-9; v += ystep) {
      const y = Math.round(Y(v)) + 0.5;
      g.strokeStyle = '#eef0f4';
      g.beginPath(); g.moveTo(GUTTER, y); g.lineTo(fr.w, y); g.stroke();
      g.fillStyle = '#667085';
      g.fillText(v >= 1000 ? (v / 1000).toFixed(v % 1000 ? 1 : 0) + 'k/s' : +v.toFixed(2) + '/s', GUTTER - 6, y);
    }
    for (let b = 0; b < bk.n; b++) {
      const x0 = fr.cx(bk.first + b * bk.bw), x1 = fr.cx(bk.first + (b + 1) * bk.bw);
      if (x1 < GUTTER) continue;
      let acc = 0;
      for (let s = 0; s < 4; s++) {
        const v = counts[s][b] * perSec;
        if (!v) continue;
        g.fillStyle = SEV_COL[s + 1];
        g.fillRect(Math.max(GUTTER, x0) + 0.5, Y(acc + v), Math.max(1, x1 - Math.max(GUTTER, x0) - 1), Y(acc) - Y(acc + v));
        acc += v;
      }
    }
    tpState = { fr: fr, bk: bk, counts: counts, perSec: perSec };
  }
  if (tpCanvas) {
    tpCanvas.addEventListener('mousemove', (e) => {
      if (!tpState) return;
      const r = tpCanvas.getBoundingClientRect();
      const x = e.clientX - r.left;
      if (x < GUTTER) { tip.hidden = true; return; }
      const t = view.a + ((x - GUTTER) / tpState.fr.pw) * (view.b - view.a);
      const b = Math.floor((t - tpState.bk.first) / tpState.bk.bw);
      const c = tpState.counts;
      if (b < 0 || b >= tpState.bk.n) return;
      const t0 = tpState.bk.first + b * tpState.bk.bw;
      showTip('<b>' + fmtT(t0) + ' – ' + fmtT(t0 + tpState.bk.bw) + '</b><br>completed: ' + c[0][b] + ' ok · ' + c[1][b] + ' rejected · ' + c[2][b] + ' failed · ' + c[3][b] + ' unknown', e.clientX, e.clientY);
    });
    tpCanvas.addEventListener('mouseleave', () => { tip.hidden = true; });
  }

  const KIND_COL = { acquire: '#9467bd', read: '#17becf', write: '#1f5fbf', release: '#8c564b' };
  const kindCol = (f) => KIND_COL[D.fnames[f]] || '#7f7f7f';
  const kindOn = D.fnames.map(() => true);
  const latCanvas = document.getElementById('chart-latency');
  const latLegend = document.getElementById('lat-legend');
  if (latLegend) {
    const present = new Uint8Array(D.fnames.length);
    for (let i = 0; i < nOps; i++) present[oF[i]] = 1;
    D.fnames.forEach((f, i) => {
      if (!present[i]) return;
      const lab = document.createElement('label');
      lab.innerHTML = '<input type="checkbox" checked> <i style="background:' + kindCol(i) + '"></i>' + esc(f);
      lab.querySelector('input').addEventListener('change', (e) => { kindOn[i] = e.target.checked; drawLatency(); });
      latLegend.appendChild(lab);
    });
  }
  let latState = null;
  const dots = document.createElement('canvas');
  function hexRgb(h) {
    const m = /^#?([0-9a-f]{2})([0-9a-f]{2})([0-9a-f]{2})$/i.exec(h) || [0, '80', '80', '80'];
    return [parseInt(m[1], 16), parseInt(m[2], 16), parseInt(m[3], 16)];
  }
  function drawLatency() {
    if (!latCanvas) return;
    const fr = chartFrame(latCanvas, 240), g = fr.g;
    let lmin = Infinity, lmax = 0;
    for (let i = 0; i < nOps; i++) {
      const e = oE[i];
      if (!(e >= view.a && e <= view.b) || !kindOn[oF[i]]) continue;
      const d = Math.max(1, e - oS[i]);
      if (d < lmin) lmin = d;
      if (d > lmax) lmax = d;
    }
    if (!(lmax > 0)) { lmin = 100; lmax = 1e6; }
    const d0 = Math.floor(Math.log10(lmin)), d1 = Math.max(d0 + 1, Math.ceil(Math.log10(lmax)));
    const Y = (us) => fr.h - 4 - ((Math.log10(Math.max(1, us)) - d0) / (d1 - d0)) * (fr.h - 10);
    g.textAlign = 'right';
    g.font = '11px system-ui, sans-serif';
    for (let d = d0; d <= d1; d++) {
      const y = Math.round(Y(Math.pow(10, d))) + 0.5;
      g.strokeStyle = '#eef0f4';
      g.beginPath(); g.moveTo(GUTTER, y); g.lineTo(fr.w, y); g.stroke();
      g.fillStyle = '#667085';
      g.fillText(fmtDur(Math.pow(10, d)), GUTTER - 6, y);
    }
    const bk = bucketing(fr.pw);
    const per = D.fnames.map(() => []);
    // The dots go through an ImageData: 100,000 fillRect calls cost far more.
    const dw = Math.round(fr.w * dpr), dh = Math.round(fr.h * dpr);
    const img = new ImageData(dw, dh), px = img.data;
    const rgb = D.fnames.map((f, i) => hexRgb(kindCol(i)));
    const dot = Math.max(2, Math.round(2 * dpr));
    for (let i = 0; i < nOps; i++) {
      const e = oE[i], f = oF[i];
      if (!(e >= view.a && e <= view.b) || !kindOn[f]) continue;
      const d = Math.max(1, e - oS[i]);
      const b = Math.floor((e - bk.first) / bk.bw);
      (per[f][b] || (per[f][b] = [])).push(d);
      const x = Math.round(fr.cx(e) * dpr), y = Math.round(Y(d) * dpr);
      const c = rgb[f];
      for (let yy = y - 1; yy < y - 1 + dot; yy++) {
        if (yy < 0 || yy >= dh) continue;
        for (let xx = x - 1; xx < x - 1 + dot; xx++) {
          if (xx < GUTTER * dpr || xx >= dw) continue;
          const o = (yy * dw + xx) * 4;
          px[o] = c[0]; px[o + 1] = c[1]; px[o + 2] = c[2]; px[o + 3] = 255;
        }
      }
    }
    dots.width = dw;
    dots.height = dh;
    dots.getContext('2d').putImageData(img, 0, 0);
    g.globalAlpha = nOps > 20000 ? 0.3 : 0.5;
    g.drawImage(dots, 0, 0, fr.w, fr.h);
    g.globalAlpha = 1;
    // p99 per bucket, per kind.
    const p99 = D.fnames.map(() => []);
    per.forEach((buckets, f) => {
      if (!kindOn[f]) return;
      g.strokeStyle = kindCol(f);
      g.lineWidth = 2;
      g.beginPath();
      let open = false;
      for (let b = 0; b < bk.n; b++) {
        const arr = buckets[b];
        if (!arr) { open = false; continue; }
        arr.sort((x, y) => x - y);
        const v = arr[Math.max(0, Math.ceil(arr.length * 0.99) - 1)];
        p99[f][b] = v;
        const x = fr.cx(bk.first + (b + 0.5) * bk.bw), y = Y(v);
        if (open) g.lineTo(x, y); else g.moveTo(x, y);
        open = true;
      }
      g.stroke();
      g.lineWidth = 1;
    });
    latState = { fr: fr, bk: bk, p99: p99 };
  }
  if (latCanvas) {
    latCanvas.addEventListener('mousemove', (e) => {
      if (!latState) return;
      const r = latCanvas.getBoundingClientRect();
      const x = e.clientX - r.left;
      if (x < GUTTER) { tip.hidden = true; return; }
      const t = view.a + ((x - GUTTER) / latState.fr.pw) * (view.b - view.a);
      const b = Math.floor((t - latState.bk.first) / latState.bk.bw);
      const t0 = latState.bk.first + b * latState.bk.bw;
      let s = '<b>p99, ' + fmtT(t0) + ' – ' + fmtT(t0 + latState.bk.bw) + '</b>';
      D.fnames.forEach((f, i) => {
        const v = latState.p99[i][b];
        if (v !== undefined) s += '<br><i style="display:inline-block;width:8px;height:8px;border-radius:50%;background:' + kindCol(i) + '"></i> ' + esc(f) + ' ' + fmtDur(v);
      });
      showTip(s, e.clientX, e.clientY);
    });
    latCanvas.addEventListener('mouseleave', () => { tip.hidden = true; });
  }

  let lastW = 0;
  window.addEventListener('resize', () => {
    const w = canvas.parentElement.clientWidth;
    if (w !== lastW) { lastW = w; scheduleDraw(); }
  });

  // `report.html#selftest` drives what a mouse would (hover everywhere, zoom until
  // single marks are drawn, focus every counterexample) so that a headless browser
  // can check that those paths run without errors.
  function selfTest() {
    const t = performance.now();
    let tips = 0, probes = 0, hitMs = 0;
    const pass = () => {
      const h0 = performance.now();
      for (let y = 1; y < HEIGHT; y += Math.max(3, LH / 3)) {
        for (let x = 1; x < W; x += W / 80) {
          const hit = hitTest(x, y);
          probes++;
          // Showing every tip would time layout, not the lookups.
          if (hit && tips++ % 64 === 0) showTip(hit.html, x, y);
        }
      }
      hitMs += performance.now() - h0;
      tip.hidden = true;
    };
    pass();
    const mid = (FULL.a + FULL.b) / 2, frames = [];
    for (const f of [1, 0.1, 0.01, 0.001, 0.0001]) {
      view.a = mid - (FULL.b - FULL.a) * f / 2;
      view.b = mid + (FULL.b - FULL.a) * f / 2;
      const f0 = performance.now();
      drawTimeline();
      frames.push(f + 'x:' + (performance.now() - f0).toFixed(1));
      drawAll();
      pass();
    }
    document.body.dataset.frameMs = frames.join(' ');
    for (const m of D.marks) { focusOn(m.id); drawAll(); pass(); }
    for (const f of D.faults) { focusOn('fault-' + f.id); drawAll(); }
    focus = null;
    view.a = FULL.a; view.b = FULL.b;
    drawAll();
    document.body.dataset.selftest = 'ok ' + tips + ' tips in ' + probes + ' probes, ' + (hitMs * 1000 / probes).toFixed(0) +
      ' µs per probe, ' + (performance.now() - t).toFixed(0) + ' ms';
  }

  // ---- first paint, synchronously so that a headless dump sees the result ---------
  try {
    const m = /^#show=(.+)$/.exec(location.hash);
    if (m) focusOn(decodeURIComponent(m[1]));
    drawAll();
    lastW = W;
    const loading = document.getElementById('tl-loading');
    if (loading) loading.remove();
    document.body.dataset.drawMs = Object.keys(timings).map((k) => k + ':' + timings[k].toFixed(1)).join(' ');
    document.body.dataset.scriptMs = (performance.now() - T0).toFixed(1);
    document.body.dataset.renderMs = performance.now().toFixed(1);
    document.body.dataset.ops = String(nOps);
    document.body.dataset.lanes = String(nLanes);
    document.body.dataset.rendered = 'ok';
    if (location.hash === '#selftest') selfTest();
  } catch (err) {
    noteError(String(err && err.stack || err));
    throw err;
  }
})();
