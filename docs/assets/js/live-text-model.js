/*
 * "The text model, live" (docs/practice/live-text-model.md): the byte-level GPT of the heads-forming lesson
 * (lessons_src/lab/text_model.py, TextGPT) in plain JavaScript: no dependencies, no request beyond this
 * site's own files, no WebAssembly.
 *
 * Tokens are UTF-8 bytes (new TextEncoder().encode(text), as text_model.encode). For each byte at position t:
 *   x = E[byte]                                                      (D)     no learned positions
 *   per block: h = LayerNorm1(x); q, k, v = W_qkv h + b              (D) each, H heads of E = D / H
 *              q, k = RoPE(q, t), RoPE(k, t)                         pair (i, i + E/2) rotated by t base^(-2i/E)
 *              w = softmax(q . k_j / sqrt(E)), j <= t                (H, t + 1)  causal
 *              y = concat_h(keep[h] * sum_j w_j v_j)                 keep = 0 zeroes a head before W_O
 *              x = x + W_O y + b_O;  x = x + W_2 GELU(W_1 LayerNorm2(x) + b_1) + b_2
 *   logits = U LayerNorm_f(x)                                        (256)
 * Keys and values are kept per position (a KV cache), so each new byte costs one position's work.
 * Switching a head off multiplies its output by 0 before W_O: what lessons_src.lab.heads.ablate_heads does
 * (a forward pre-hook on out_proj), which the ablation in the heads-forming lesson uses.
 * Weights: site/assets/models/text-<hash>.bin, float16 as committed, dequantized here to float32 (exact);
 * arithmetic in float64. Both files are written by tools/site_build/live_text_model.py.
 *
 * Test hook (window.liveTextModel): ready (Promise of the config), encode(text) -> byte array,
 * run(text, off) -> {probs: T x 256, attention: L x H x T x T}, generate(text, n, off, temperature, seed)
 * -> {bytes, text} (temperature 0: greedy), step timing via bench(prompt, n).
 */
(function () {
  "use strict";

  if (window.__mhaLiveTextModelLoaded) return;
  window.__mhaLiveTextModelLoaded = true;

  var models = {};

  function loadModel(jsonUrl) {
    if (!models[jsonUrl]) {
      models[jsonUrl] = fetch(jsonUrl).then(function (r) {
        if (!r.ok) throw new Error("HTTP " + r.status + " for " + jsonUrl);
        return r.json();
      }).then(function (meta) {
        var binUrl = new URL(meta.weights, jsonUrl).href;
        return fetch(binUrl).then(function (r) {
          if (!r.ok) throw new Error("HTTP " + r.status + " for " + binUrl);
          return r.arrayBuffer();
        }).then(function (buffer) { return buildModel(meta, buffer); });
      });
      models[jsonUrl].catch(function () { delete models[jsonUrl]; });
    }
    return models[jsonUrl];
  }

  function halfToFloat(h) {  // IEEE 754 binary16 -> number, exactly
    var s = h & 0x8000 ? -1 : 1, e = (h >> 10) & 31, f = h & 1023;
    if (e === 0) return s * f * Math.pow(2, -24);
    if (e === 31) return f ? NaN : s * Infinity;
    return s * (1 + f / 1024) * Math.pow(2, e - 15);
  }

  function buildModel(meta, buffer) {
    if (buffer.byteLength !== 2 * meta.num_values) {
      throw new Error("the weights file has " + buffer.byteLength + " bytes; expected " + 2 * meta.num_values);
    }
    var table = new Float32Array(65536);
    for (var b = 0; b < 65536; b++) table[b] = halfToFloat(b);
    var view = new DataView(buffer), all = new Float32Array(meta.num_values);
    for (var i = 0; i < all.length; i++) all[i] = table[view.getUint16(2 * i, true)];  // little-endian on any CPU
    var t = {};
    meta.tensors.forEach(function (spec) {
      var n = spec.shape.reduce(function (a, c) { return a * c; }, 1);
      t[spec.name] = all.subarray(spec.offset, spec.offset + n);
    });
    function need(name) {
      if (!t[name]) throw new Error("the weights file has no tensor " + name);
      return t[name];
    }
    var c = meta.config, blocks = [];
    for (var l = 0; l < c.num_layers; l++) {
      var p = "blocks." + l + ".";
      blocks.push({
        ln1w: need(p + "ln1.weight"), ln1b: need(p + "ln1.bias"),
        qkv: need(p + "attn.qkv_proj.weight"), qkvb: t[p + "attn.qkv_proj.bias"] || null,
        out: need(p + "attn.out_proj.weight"), outb: t[p + "attn.out_proj.bias"] || null,
        ln2w: need(p + "ln2.weight"), ln2b: need(p + "ln2.bias"),
        w1: need(p + "mlp.0.weight"), b1: need(p + "mlp.0.bias"), w2: need(p + "mlp.2.weight"), b2: need(p + "mlp.2.bias")
      });
    }
    var E = c.head_dim, half = E / 2, invFreq = new Float64Array(half);
    for (var k = 0; k < half; k++) invFreq[k] = Math.pow(c.rope_base, -2 * k / E);
    return {
      cfg: c, embed: need("embed.weight"), blocks: blocks, lnfw: need("ln_f.weight"), lnfb: need("ln_f.bias"),
      unembed: need("unembed.weight"), invFreq: invFreq
    };
  }

  /* ---------- the forward pass, one position at a time ---------- */

  // erf to float64 precision: its Taylor series below 2.5, the continued fraction of erfc above.
  function erf(x) {
    var a = Math.abs(x), r;
    if (a < 2.5) {
      var term = a, sum = a, x2 = a * a;
      for (var n = 1; n < 80; n++) {
        term *= -x2 / n;
        var add = term / (2 * n + 1);
        sum += add;
        if (Math.abs(add) < 1e-17 * Math.abs(sum)) break;
      }
      r = 2 / Math.sqrt(Math.PI) * sum;
    } else if (a < 6.5) {
      var f = a;
      for (var m = 60; m >= 1; m--) f = a + (m / 2) / f;
      r = 1 - Math.exp(-a * a) / (Math.sqrt(Math.PI) * f);
    } else {
      r = 1;
    }
    return x < 0 ? -r : r;
  }

  function gelu(x) { return 0.5 * x * (1 + erf(x / Math.SQRT2)); }  // nn.GELU(): the exact erf form

  function layerNorm(x, w, b, eps, out) {
    var D = x.length, mean = 0, v = 0, i;
    for (i = 0; i < D; i++) mean += x[i];
    mean /= D;
    for (i = 0; i < D; i++) v += (x[i] - mean) * (x[i] - mean);
    var inv = 1 / Math.sqrt(v / D + eps);
    for (i = 0; i < D; i++) out[i] = (x[i] - mean) * inv * w[i] + b[i];
    return out;
  }

  function matvec(W, bias, x, rows, cols, out) {  // out = W x + bias, W row-major (rows, cols)
    for (var r = 0; r < rows; r++) {
      var s = bias ? bias[r] : 0, o = r * cols;
      for (var k = 0; k < cols; k++) s += W[o + k] * x[k];
      out[r] = s;
    }
    return out;
  }

  function newState(model, keep) {
    var c = model.cfg, caches = [];
    for (var l = 0; l < c.num_layers; l++) {
      caches.push({ k: new Float64Array(c.max_len * c.d_model), v: new Float64Array(c.max_len * c.d_model) });
    }
    return { T: 0, caches: caches, keep: keep, attention: [] };
  }

  // Feed one byte at the next position; returns its logits (Float64Array 256) and records each head's weights.
  function step(model, state, token) {
    var c = model.cfg, D = c.d_model, H = c.num_heads, E = c.head_dim, half = E / 2, F = c.d_ff, V = c.vocab_size;
    var t = state.T, eps = c.layer_norm_eps;
    if (t >= c.max_len) throw new RangeError("the model has " + c.max_len + " positions; position " + t + " is past them");
    var x = new Float64Array(D), h = new Float64Array(D), qkv = new Float64Array(3 * D), y = new Float64Array(D);
    var mid = new Float64Array(F), tmp = new Float64Array(D), cos = new Float64Array(half), sin = new Float64Array(half);
    var scale = 1 / Math.sqrt(E), i, j, e, l, hd;
    for (i = 0; i < D; i++) x[i] = model.embed[token * D + i];
    for (i = 0; i < half; i++) { cos[i] = Math.cos(t * model.invFreq[i]); sin[i] = Math.sin(t * model.invFreq[i]); }
    var rows = [];
    for (l = 0; l < c.num_layers; l++) {
      var B = model.blocks[l], cache = state.caches[l];
      matvec(B.qkv, B.qkvb, layerNorm(x, B.ln1w, B.ln1b, eps, h), 3 * D, D, qkv);
      for (hd = 0; hd < H; hd++) {  // rotate q and k of each head; store k and v
        for (i = 0; i < half; i++) {
          var qo = hd * E, ko = D + hd * E;
          var q1 = qkv[qo + i], q2 = qkv[qo + i + half], k1 = qkv[ko + i], k2 = qkv[ko + i + half];
          qkv[qo + i] = q1 * cos[i] - q2 * sin[i]; qkv[qo + i + half] = q2 * cos[i] + q1 * sin[i];
          qkv[ko + i] = k1 * cos[i] - k2 * sin[i]; qkv[ko + i + half] = k2 * cos[i] + k1 * sin[i];
        }
      }
      for (i = 0; i < D; i++) { cache.k[t * D + i] = qkv[D + i]; cache.v[t * D + i] = qkv[2 * D + i]; }
      var layerRows = [];
      for (hd = 0; hd < H; hd++) {
        var w = new Float64Array(t + 1), max = -Infinity, off = hd * E;
        for (j = 0; j <= t; j++) {
          var s = 0;
          for (e = 0; e < E; e++) s += qkv[off + e] * cache.k[j * D + off + e];
          w[j] = s * scale;
          if (w[j] > max) max = w[j];
        }
        var sum = 0;
        for (j = 0; j <= t; j++) { w[j] = Math.exp(w[j] - max); sum += w[j]; }
        var kp = state.keep[l][hd];
        for (e = 0; e < E; e++) y[off + e] = 0;
        for (j = 0; j <= t; j++) {
          w[j] /= sum;
          for (e = 0; e < E; e++) y[off + e] += w[j] * cache.v[j * D + off + e];
        }
        for (e = 0; e < E; e++) y[off + e] *= kp;  // a head switched off contributes zeros before W_O
        layerRows.push(w);
      }
      rows.push(layerRows);
      matvec(B.out, B.outb, y, D, D, tmp);
      for (i = 0; i < D; i++) x[i] += tmp[i];
      matvec(B.w1, B.b1, layerNorm(x, B.ln2w, B.ln2b, eps, h), F, D, mid);
      for (i = 0; i < F; i++) mid[i] = gelu(mid[i]);
      matvec(B.w2, B.b2, mid, D, F, tmp);
      for (i = 0; i < D; i++) x[i] += tmp[i];
    }
    state.attention.push(rows);
    state.T = t + 1;
    return matvec(model.unembed, null, layerNorm(x, model.lnfw, model.lnfb, eps, h), V, D, new Float64Array(V));
  }

  function softmax(logits, temperature) {
    var V = logits.length, p = new Float64Array(V), max = -Infinity, sum = 0, v;
    for (v = 0; v < V; v++) if (logits[v] / temperature > max) max = logits[v] / temperature;
    for (v = 0; v < V; v++) { p[v] = Math.exp(logits[v] / temperature - max); sum += p[v]; }
    for (v = 0; v < V; v++) p[v] /= sum;
    return p;
  }

  function argmax(a) {
    var best = 0;
    for (var v = 1; v < a.length; v++) if (a[v] > a[best]) best = v;
    return best;
  }

  // mulberry32: a small seeded generator of uniform numbers in [0, 1); the seed is a 32-bit unsigned integer.
  function rng(seed) {
    var a = seed >>> 0;
    return function () {
      a = (a + 0x6D2B79F5) >>> 0;
      var z = a;
      z = Math.imul(z ^ (z >>> 15), z | 1);
      z ^= z + Math.imul(z ^ (z >>> 7), z | 61);
      return ((z ^ (z >>> 14)) >>> 0) / 4294967296;
    };
  }

  function sample(p, u) {  // the first byte whose cumulative probability passes u
    var acc = 0;
    for (var v = 0; v < p.length; v++) { acc += p[v]; if (u < acc) return v; }
    return argmax(p);  // u beyond the rounded total: the likeliest byte
  }

  // The typed bytes, then n generated ones. temperature 0 = greedy (argmax), else sampled with the seed.
  function run(model, bytes, keep, n, temperature, seed) {
    var state = newState(model, keep), logits = null, i;
    for (i = 0; i < bytes.length; i++) logits = step(model, state, bytes[i]);
    var promptAttention = state.attention.slice(), probs = softmax(logits, 1), out = [];
    var random = rng(seed), next;
    for (i = 0; i < n && state.T < model.cfg.max_len; i++) {
      var p = i === 0 ? probs : softmax(logits, 1);
      next = temperature > 0 ? sample(temperature === 1 ? p : softmax(logits, temperature), random()) : argmax(p);
      out.push(next);
      if (i + 1 < n) logits = step(model, state, next);
    }
    return { probs: probs, attention: promptAttention, generated: out };
  }

  function keepMatrix(cfg, off) {
    var keep = [];
    for (var l = 0; l < cfg.num_layers; l++) {
      keep.push([]);
      for (var h = 0; h < cfg.num_heads; h++) keep[l].push(off.indexOf("L" + l + "H" + h) >= 0 ? 0 : 1);
    }
    return keep;
  }

  function parseHeads(list, cfg) {  // names like "L0H1" -> {off: valid names sorted, bad: the others}
    var off = [], bad = [];
    list.forEach(function (name) {
      var m = /^L(\d+)H(\d+)$/.exec(name);
      if (m && Number(m[1]) < cfg.num_layers && Number(m[2]) < cfg.num_heads) {
        if (off.indexOf(name) < 0) off.push(name);
      } else bad.push(name);
    });
    off.sort();
    return { off: off, bad: bad };
  }

  var encoder = new TextEncoder(), decoder = new TextDecoder("utf-8");  // decoder: invalid bytes -> U+FFFD
  function encode(text) { return Array.prototype.slice.call(encoder.encode(text)); }
  function decode(bytes) { return decoder.decode(new Uint8Array(bytes)); }

  function byteLabel(b) {
    if (b === 32) return "space";
    if (b === 10) return "newline";
    if (b > 32 && b < 127) return String.fromCharCode(b);
    return "byte 0x" + (b < 16 ? "0" : "") + b.toString(16).toUpperCase();
  }

  /* ---------- the widget ---------- */

  function el(tag, attrs, text) {
    var node = document.createElement(tag);
    Object.keys(attrs || {}).forEach(function (k) { node.setAttribute(k, attrs[k]); });
    if (text !== undefined) node.textContent = text;
    return node;
  }

  function setup(root) {
    if (root.getAttribute("data-ready") === "true") return;
    root.setAttribute("data-ready", "true");
    var data = JSON.parse(root.querySelector(".ltm-data").textContent);
    var q = function (s) { return root.querySelector(s); };
    var input = q(".ltm-text"), message = q(".ltm-message"), probsBox = q(".ltm-probs"), mapsBox = q(".ltm-maps");
    var promptOut = q(".ltm-prompt"), genOut = q(".ltm-generated"), readout = q(".ltm-readout");
    var tempInput = q(".ltm-temp"), seedInput = q(".ltm-seed");
    var checks = Array.prototype.slice.call(root.querySelectorAll(".ltm-heads input[data-head]"));
    var modes = Array.prototype.slice.call(root.querySelectorAll("input[name=ltm-mode]"));
    var jsonUrl = new URL(root.getAttribute("data-model-src"), document.baseURI).href;
    var model = null, canvases = [];
    var state = { text: data.default_text, off: [], mode: "greedy", temp: 0.8, seed: 1 };

    function setMessage(text, isError) {
      message.textContent = text;
      message.classList.toggle("is-error", Boolean(isError));
    }

    function buildMaps() {
      var cfg = model.cfg;
      mapsBox.innerHTML = "";
      canvases = [];
      for (var l = 0; l < cfg.num_layers; l++) {
        for (var h = 0; h < cfg.num_heads; h++) {
          var name = "L" + l + "H" + h, fig = el("figure", { class: "ltm-map" });
          var canvas = el("canvas", { "data-head": name, role: "img" });
          fig.appendChild(canvas);
          fig.appendChild(el("figcaption", {}, name));
          mapsBox.appendChild(fig);
          canvases.push({ canvas: canvas, layer: l, head: h, fig: fig, name: name });
        }
      }
    }

    function drawMaps(result, bytes) {
      var T = bytes.length;
      canvases.forEach(function (m) {
        if (m.canvas.width !== T) { m.canvas.width = T; m.canvas.height = T; }
        var ctx = m.canvas.getContext("2d"), img = ctx.createImageData(T, T), px = img.data;
        for (var i = 0; i < T; i++) {
          var row = result.attention[i][m.layer][m.head];
          for (var j = 0; j < T; j++) {
            var o = 4 * (i * T + j);
            px[o] = 230; px[o + 1] = 81; px[o + 2] = 0;  // deep orange; alpha = weight (sqrt: small ones show)
            px[o + 3] = j <= i ? Math.round(255 * Math.sqrt(row[j])) : 0;
          }
        }
        ctx.putImageData(img, 0, 0);
        var off = state.off.indexOf(m.name) >= 0;
        m.fig.classList.toggle("is-off", off);
        m.canvas.setAttribute("aria-label", "Attention of " + m.name + (off ? " (switched off)" : "") +
          " over the " + T + " bytes: row i is byte i, columns the bytes it attends to");
      });
      var last = result.attention[T - 1];
      readout.textContent = "From the last byte (" + byteLabel(bytes[T - 1]) + "), where each head looks most: " +
        canvases.map(function (m) {
          var row = last[m.layer][m.head], k = argmax(row);
          return m.name + " → byte " + k + " (" + byteLabel(bytes[k]) + ", " + row[k].toFixed(2) + ")";
        }).join("; ") + ".";
    }

    function drawProbs(probs) {
      var order = [];
      for (var v = 0; v < probs.length; v++) order.push(v);
      order.sort(function (a, b) { return probs[b] - probs[a] || a - b; });
      probsBox.innerHTML = "";
      order.slice(0, data.top).forEach(function (v) {
        var pct = (100 * probs[v]).toFixed(1) + "%";
        var row = el("div", { class: "ltm-bar", role: "listitem", "data-byte": String(v) });
        row.appendChild(el("span", { class: "ltm-byte" }, byteLabel(v)));
        var track = el("span", { class: "ltm-track", "aria-hidden": "true" });
        var fill = el("span", { class: "ltm-fill" });
        fill.style.width = (100 * probs[v]).toFixed(2) + "%";
        track.appendChild(fill);
        row.appendChild(track);
        row.appendChild(el("span", { class: "ltm-p" }, pct));
        probsBox.appendChild(row);
      });
    }

    function validate(text) {
      var bytes = encode(text);
      if (bytes.length === 0) return { error: "The text is empty: type at least one character." };
      if (bytes.length > data.max_text_bytes) {
        return { error: "The text has " + bytes.length + " bytes of UTF-8; the page takes at most " + data.max_text_bytes +
          " (the model sees " + model.cfg.max_len + " positions, and " + data.generate + " are for the bytes it writes)." };
      }
      return { bytes: bytes };
    }

    function update() {
      var v = validate(state.text);
      if (v.error) { setMessage(v.error + " Still showing the last valid text.", true); return; }
      var temperature = state.mode === "sample" ? state.temp : 0;
      var result = run(model, v.bytes, keepMatrix(model.cfg, state.off), data.generate, temperature, state.seed);
      drawProbs(result.probs);
      promptOut.textContent = state.text;
      genOut.textContent = decode(v.bytes.concat(result.generated)).slice(decode(v.bytes).length);
      drawMaps(result, v.bytes);
      checks.forEach(function (c) { c.checked = state.off.indexOf(c.getAttribute("data-head")) < 0; });
      setMessage(v.bytes.length + " bytes. " + (state.mode === "sample" ? "Sampled at temperature " + state.temp +
        ", seed " + state.seed : "Greedy: the likeliest byte each time") + "; " +
        (state.off.length ? "switched off: " + state.off.join(", ") : "every head on") + ".", false);
      writeUrlSoon();
    }

    var urlTimer = null;
    function writeUrlSoon() { window.clearTimeout(urlTimer); urlTimer = window.setTimeout(writeUrl, 150); }
    function search() {
      var p = new URLSearchParams();
      p.set("text", state.text);
      if (state.off.length) p.set("off", state.off.join(","));
      p.set("mode", state.mode);
      if (state.mode === "sample") { p.set("temp", String(state.temp)); p.set("seed", String(state.seed)); }
      return "?" + p.toString();
    }
    function writeUrl() {
      window.clearTimeout(urlTimer);
      if (!document.contains(root)) return;
      try { history.replaceState(history.state, "", location.pathname + search() + location.hash); } catch (err) { /* sandboxed */ }
    }

    function readNumber(value, low, high, integer) {
      var n = Number(value);
      if (value === "" || !isFinite(n) || n < low || n > high || (integer && n % 1 !== 0)) return null;
      return n;
    }

    function fromUrl() {
      var p = new URLSearchParams(location.search), problems = [];
      if (p.has("text")) state.text = p.get("text");
      if (p.has("off")) {
        var heads = parseHeads(p.get("off").split(",").filter(Boolean), model.cfg);
        state.off = heads.off;
        if (heads.bad.length) problems.push("unknown heads " + heads.bad.join(", "));
      }
      if (p.get("mode") === "sample") state.mode = "sample";
      if (p.has("temp")) {
        var tv = readNumber(p.get("temp"), 0.1, 2, false);
        if (tv === null) problems.push("temperature " + p.get("temp") + " (use 0.1 to 2)"); else state.temp = tv;
      }
      if (p.has("seed")) {
        var sv = readNumber(p.get("seed"), 0, 4294967295, true);
        if (sv === null) problems.push("seed " + p.get("seed") + " (use a whole number 0 to 4294967295)"); else state.seed = sv;
      }
      input.value = state.text;
      tempInput.value = String(state.temp);
      seedInput.value = String(state.seed);
      modes.forEach(function (m) { m.checked = m.value === state.mode; });
      update();
      if (problems.length) setMessage("Ignored in the link: " + problems.join("; ") + ". " + message.textContent, true);
    }

    input.addEventListener("input", function () { if (model) { state.text = input.value; update(); } });
    root.addEventListener("change", function (event) {
      var c = event.target;
      if (!model || !(c instanceof HTMLInputElement)) return;
      if (c.hasAttribute("data-head")) {
        var name = c.getAttribute("data-head");
        state.off = state.off.filter(function (n) { return n !== name; });
        if (!c.checked) state.off.push(name);
        state.off.sort();
      } else if (c.name === "ltm-mode") {
        state.mode = c.value;
      } else if (c === tempInput || c === seedInput) {
        var value = c === tempInput ? readNumber(c.value, 0.1, 2, false) : readNumber(c.value, 0, 4294967295, true);
        if (value === null) {
          setMessage(c === tempInput ? "Temperature " + c.value + " is not in 0.1 to 2." :
            "Seed " + c.value + " is not a whole number from 0 to 4294967295.", true);
          return;
        }
        if (c === tempInput) state.temp = value; else state.seed = value;
        if (state.mode !== "sample") { state.mode = "sample"; modes.forEach(function (m) { m.checked = m.value === "sample"; }); }
      } else return;
      update();
    });
    root.addEventListener("click", function (event) {
      var target = event.target instanceof Element ? event.target : null;
      if (!target || !model) return;
      if (target.closest(".ltm-restore")) { state.off = []; update(); }
      else if (target.closest(".ltm-share")) share();
    });

    function share() {
      writeUrl();
      var status = q(".ltm-share-status"), url = location.href;
      var shown = function () { status.textContent = "Link to this view: " + url; };
      if (navigator.clipboard && window.isSecureContext) {
        navigator.clipboard.writeText(url).then(function () {
          status.textContent = "Copied the link to this view (it is also in the address bar).";
        }, shown);
      } else shown();
    }

    loadModel(jsonUrl).then(function (m) {
      if (!document.contains(root)) return;
      model = m;
      buildMaps();
      fromUrl();
      root.setAttribute("data-drawn", "true");
    }, function (err) {
      setMessage("The model could not be loaded (" + err.message + "). Reload the page to try again.", true);
    });
  }

  function init() {
    document.querySelectorAll("[data-live-text-model]").forEach(function (root) {
      try { setup(root); } catch (err) {
        var m = root.querySelector(".ltm-message");
        if (m) m.textContent = "The widget could not start: " + err.message;
      }
    });
  }

  /* ---------- test and benchmark hook ---------- */

  var current = null;
  function currentModel() {
    var root = document.querySelector("[data-live-text-model]");
    if (!root) return Promise.reject(new Error("no [data-live-text-model] on this page"));
    return loadModel(new URL(root.getAttribute("data-model-src"), document.baseURI).href).then(function (m) {
      current = m;
      return m;
    });
  }
  function need() {
    if (!current) throw new Error("await window.liveTextModel.ready first");
    return current;
  }
  function offList(off) {
    var m = need(), heads = parseHeads(off || [], m.cfg);
    if (heads.bad.length) throw new RangeError("unknown heads " + JSON.stringify(heads.bad));
    return keepMatrix(m.cfg, heads.off);
  }

  window.liveTextModel = {
    get ready() {
      var root = document.querySelector("[data-live-text-model]");
      return currentModel().then(function (m) {
        if (!root) return m.cfg;
        return new Promise(function (resolve) {  // and the widget has drawn
          (function wait() {
            if (root.getAttribute("data-drawn") === "true" || !document.contains(root)) resolve(m.cfg);
            else window.setTimeout(wait, 20);
          })();
        });
      });
    },
    encode: encode,
    decode: decode,
    run: function (text, off) {
      var m = need(), bytes = encode(text), state = newState(m, offList(off)), logits = null, probs = [];
      for (var i = 0; i < bytes.length; i++) {
        logits = step(m, state, bytes[i]);
        probs.push(Array.prototype.slice.call(softmax(logits, 1)));
      }
      var L = m.cfg.num_layers, H = m.cfg.num_heads, T = bytes.length, attention = [];
      for (var l = 0; l < L; l++) {
        attention.push([]);
        for (var h = 0; h < H; h++) {
          var rows = [];
          for (var r = 0; r < T; r++) {
            var row = new Array(T).fill(0), w = state.attention[r][l][h];
            for (var j = 0; j <= r; j++) row[j] = w[j];
            rows.push(row);
          }
          attention[l].push(rows);
        }
      }
      return { probs: probs, attention: attention };
    },
    generate: function (text, n, off, temperature, seed) {
      var m = need(), bytes = encode(text);
      var r = run(m, bytes, offList(off), n, temperature || 0, seed >>> 0);
      return { bytes: r.generated, text: decode(bytes.concat(r.generated)) };
    },
    bench: function (text, n) {  // milliseconds per generated byte, prompt excluded
      var m = need(), bytes = encode(text), keep = offList([]), state = newState(m, keep), logits = null;
      for (var i = 0; i < bytes.length; i++) logits = step(m, state, bytes[i]);
      var t0 = performance.now();
      for (i = 0; i < n; i++) logits = step(m, state, argmax(logits));
      return (performance.now() - t0) / n;
    }
  };

  if (window.document$ && typeof window.document$.subscribe === "function") {
    window.document$.subscribe(init);
  } else if (document.readyState === "loading") {
    document.addEventListener("DOMContentLoaded", init);
  } else {
    init();
  }
})();
