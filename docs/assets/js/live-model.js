/*
 * "Run the model yourself" (docs/practice/live-model.md): the trained induction model's forward pass in plain
 * JavaScript, no dependencies, no network beyond this site's own files, no WebAssembly.
 *
 * It reproduces lessons_src.lab.toy_models.TinyTransformer.forward for the committed checkpoint:
 *   x = E[tokens] + P[0..T)                                  (T, D)   token + learned position embeddings
 *   per layer: q, k, v = x W_qkv^T split [Q; K; V]           (T, D) each, heads of E = D / H columns
 *              w = softmax(q k^T / sqrt(E), causal)          (H, T, T)
 *              y = concat_h(keep[h] * w_h v_h)               (T, D)   keep = 0 zeroes a head before W_O
 *              x = x + y W_O^T                               (T, D)   residual stream, no bias, no LayerNorm
 *   logits = x U^T                                           (T, V)
 * Weights: site/assets/models/induction-<hash>.bin (float32), described by the .json next to it; both are
 * written by tools/site_build/live_model.py from the checkpoint. Activations are kept in float64.
 *
 * Test hook: window.liveModel.ready (a Promise of the model), window.liveModel.run(tokens, ablated) with
 * ablated a list of "L0H1" names or [layer, head] pairs, returning {logits: T x V, attention: L x H x T x T}
 * as plain arrays; window.liveModel.parse(text) returns {tokens} or {error}.
 * DOM hooks: [data-live-model] with data-model-src; .lm-data (hidden JSON: presets, findings);
 * textarea.lm-tokens-input; .lm-message (aria-live); button.lm-preset[data-preset];
 * .lm-tokens .lm-token[data-index]; .lm-readout; .lm-summary; fieldset.lm-heads holding .lm-maps, whose
 * figure.lm-map each hold a canvas[data-head] and, in the caption, that head's switch
 * input[type=checkbox][data-head] (checked = head on), so a switch sits beside what it changes;
 * button.lm-restore; details.lm-table-box. A link's ?off= applies to ?tokens=, else to the preset.
 * Initialised on every page Material's instant navigation shows (document$), and on a full load.
 */
(function () {
  "use strict";

  if (window.__mhaLiveModelLoaded) return;
  window.__mhaLiveModelLoaded = true;

  var models = {};  // absolute JSON URL -> Promise of the model

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
      models[jsonUrl].catch(function () { delete models[jsonUrl]; });  // a later visit may retry
    }
    return models[jsonUrl];
  }

  function buildModel(meta, buffer) {
    if (buffer.byteLength !== 4 * meta.num_floats) {
      throw new Error("the weights file has " + buffer.byteLength + " bytes; expected " + 4 * meta.num_floats);
    }
    var all = new Float32Array(buffer.byteLength / 4);
    var view = new DataView(buffer);
    for (var i = 0; i < all.length; i++) all[i] = view.getFloat32(4 * i, true);  // little-endian on any CPU
    var t = {};
    meta.tensors.forEach(function (spec) {
      var n = spec.shape.reduce(function (a, b) { return a * b; }, 1);
      t[spec.name] = all.subarray(spec.offset, spec.offset + n);
    });
    var c = meta.config;
    var layers = [];
    for (var l = 0; l < c.num_layers; l++) {
      layers.push({ qkv: t["attns." + l + ".qkv_proj.weight"], out: t["attns." + l + ".out_proj.weight"] });
    }
    return {
      cfg: c, embed: t["embed.weight"], pos: t["pos_embed.weight"], unembed: t["unembed.weight"], layers: layers
    };
  }

  /* ---------- the forward pass ---------- */

  function sameKeep(a, b) { return a.every(function (v, h) { return v === b[h]; }); }

  // prev: an earlier result for the same tokens, or null. Layers before the first one whose switched-off
  // heads differ are reused from it, and so are that layer's attention and head outputs (they do not depend
  // on which of its own heads are switched off): a toggle recomputes only from there on.
  function forward(model, tokens, keep, prev) {
    var c = model.cfg, T = tokens.length, D = c.d_model, H = c.num_heads, E = c.head_dim;
    var V = c.vocab_size, D3 = 3 * D, scale = 1 / Math.sqrt(E), L = model.layers.length;
    var first = 0;
    if (prev) while (first < L && sameKeep(keep[first], prev.keep[first])) first++;
    var x, attention = [], xin = [], heads = [];
    if (prev && first === L) return prev;
    if (prev) {
      for (var l0 = 0; l0 <= first && l0 < L; l0++) {
        attention.push(prev.attention[l0]); xin.push(prev.xin[l0]); heads.push(prev.heads[l0]);
      }
      x = Float64Array.from(prev.xin[first]);
    } else {
      x = new Float64Array(T * D);
      for (var t = 0; t < T; t++) {
        var eo = tokens[t] * D, po = t * D;
        for (var d = 0; d < D; d++) x[po + d] = model.embed[eo + d] + model.pos[po + d];
      }
    }
    var qkv = new Float64Array(T * D3), row = new Float64Array(T);
    for (var l = prev ? first : 0; l < L; l++) {
      var W = model.layers[l].qkv, Wo = model.layers[l].out, r, s, i, j, e, h, y;
      if (!prev || l > first) {
        xin.push(Float64Array.from(x));
        for (i = 0; i < T; i++) {  // qkv = x W^T: (T, 3D)
          var xo = i * D;
          for (r = 0; r < D3; r++) {
            s = 0;
            var wo = r * D;
            for (var k = 0; k < D; k++) s += W[wo + k] * x[xo + k];
            qkv[i * D3 + r] = s;
          }
        }
        y = new Float64Array(T * D);  // every head's output, concatenated: (T, D)
        var maps = [];
        for (h = 0; h < H; h++) {
          var w = new Float64Array(T * T), qo = h * E, ko = D + h * E, vo = 2 * D + h * E;
          for (i = 0; i < T; i++) {
            var last = c.causal ? i : T - 1, max = -Infinity;
            for (j = 0; j <= last; j++) {
              s = 0;
              for (e = 0; e < E; e++) s += qkv[i * D3 + qo + e] * qkv[j * D3 + ko + e];
              row[j] = s * scale;
              if (row[j] > max) max = row[j];
            }
            var sum = 0;
            for (j = 0; j <= last; j++) { row[j] = Math.exp(row[j] - max); sum += row[j]; }
            for (j = 0; j <= last; j++) {
              var p = row[j] / sum;
              w[i * T + j] = p;
              for (e = 0; e < E; e++) y[i * D + qo + e] += p * qkv[j * D3 + vo + e];
            }
          }
          maps.push(w);
        }
        attention.push(maps);
        heads.push(y);
      }
      y = heads[l];
      var mask = new Float64Array(D);  // keep[h] for each of head h's E columns: zero = switched off
      for (h = 0; h < H; h++) for (e = 0; e < E; e++) mask[h * E + e] = keep[l][h];
      for (i = 0; i < T; i++) {  // x += (y * mask) W_O^T
        for (r = 0; r < D; r++) {
          s = 0;
          for (var m = 0; m < D; m++) s += Wo[r * D + m] * (y[i * D + m] * mask[m]);
          x[i * D + r] += s;
        }
      }
    }
    var logits = new Float64Array(T * V);
    for (var i2 = 0; i2 < T; i2++) {
      for (var v = 0; v < V; v++) {
        var acc = 0;
        for (var d2 = 0; d2 < D; d2++) acc += model.unembed[v * D + d2] * x[i2 * D + d2];
        logits[i2 * V + v] = acc;
      }
    }
    return { T: T, V: V, logits: logits, attention: attention, xin: xin, heads: heads, keep: keep };
  }

  function headName(l, h) { return "L" + l + "H" + h; }

  function parseHead(item, cfg) {
    var l, h, m;
    if (Array.isArray(item)) { l = item[0]; h = item[1]; }
    else if ((m = /^L(\d+)H(\d+)$/.exec(String(item)))) { l = Number(m[1]); h = Number(m[2]); }
    else return null;
    if (!(l >= 0 && l < cfg.num_layers && h >= 0 && h < cfg.num_heads && l % 1 === 0 && h % 1 === 0)) return null;
    return [l, h];
  }

  function keepMatrix(cfg, off) {
    var keep = [];
    for (var l = 0; l < cfg.num_layers; l++) {
      keep.push([]);
      for (var h = 0; h < cfg.num_heads; h++) keep[l].push(off.indexOf(headName(l, h)) >= 0 ? 0 : 1);
    }
    return keep;
  }

  /* ---------- input ---------- */

  function parseTokens(text, cfg) {
    var V = cfg.vocab_size, last = V - 1;
    var parts = String(text).split(/[\s,;]+/).filter(function (p) { return p !== ""; });
    if (parts.length === 0) return { error: "The sequence is empty: type at least one token id (0 to " + last + ")." };
    var tokens = [];
    for (var i = 0; i < parts.length; i++) {
      if (!/^[+-]?\d+$/.test(parts[i])) {
        return { error: "“" + parts[i].slice(0, 20) + "” (item " + (i + 1) + ") is not a token id: use whole numbers from 0 to " + last + "." };
      }
      var n = Number(parts[i]);
      if (n < 0 || n > last) {
        return { error: "Token " + parts[i] + " (item " + (i + 1) + ") is outside the vocabulary: ids go from 0 to " + last + "." };
      }
      tokens.push(n);
    }
    if (tokens.length > cfg.max_len) {
      return { error: tokens.length + " tokens is too long: the model has learned positions for at most " + cfg.max_len +
        "; remove " + (tokens.length - cfg.max_len) + "." };
    }
    return { tokens: tokens };
  }

  /* ---------- derived numbers ---------- */

  function analyse(result, tokens) {
    var T = result.T, V = result.V, probs = new Float64Array(T * V);
    var copyable = [], lossC = 0, hitC = 0, nC = 0, lossO = 0, nO = 0, hits = [];
    for (var t = 0; t < T; t++) {
      var o = t * V, max = -Infinity, sum = 0, best = 0;
      for (var v = 0; v < V; v++) if (result.logits[o + v] > max) { max = result.logits[o + v]; best = v; }
      for (v = 0; v < V; v++) { probs[o + v] = Math.exp(result.logits[o + v] - max); sum += probs[o + v]; }
      for (v = 0; v < V; v++) probs[o + v] /= sum;
      hits.push(t + 1 < T && best === tokens[t + 1]);
      var canCopy = false;
      if (t + 1 < T) {
        for (var j = 0; j < t && !canCopy; j++) canCopy = tokens[j] === tokens[t] && tokens[j + 1] === tokens[t + 1];
        var loss = -Math.log(probs[o + tokens[t + 1]]);
        if (canCopy) { lossC += loss; nC += 1; if (best === tokens[t + 1]) hitC += 1; }
        else { lossO += loss; nO += 1; }
      }
      copyable.push(canCopy);
    }
    return {
      probs: probs, copyable: copyable, hits: hits,
      copy: nC ? { n: nC, loss: lossC / nC, hits: hitC } : null, other: nO ? { n: nO, loss: lossO / nO } : null
    };
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
    var data = JSON.parse(root.querySelector(".lm-data").textContent);
    var q = function (s) { return root.querySelector(s); };
    var input = q(".lm-tokens-input"), message = q(".lm-message"), summary = q(".lm-summary");
    var strip = q(".lm-tokens"), readout = q(".lm-readout"), mapsBox = q(".lm-maps"), presetText = q(".lm-preset-text");
    var tableBox = q(".lm-table-box"), tableHead = q(".lm-table-head"), table = q(".lm-table");
    var checks = Array.prototype.slice.call(root.querySelectorAll(".lm-heads input[data-head]"));
    var jsonUrl = new URL(root.getAttribute("data-model-src"), document.baseURI).href;
    var model = null, state = { tokens: [], off: [], query: 0 }, result = null, info = null, canvases = [];

    function setMessage(text, isError) {
      message.textContent = text;
      message.classList.toggle("is-error", Boolean(isError));
    }

    function buildMaps() {  // the maps are in the page (each beside its head's switch): find them
      canvases = [];
      mapsBox.querySelectorAll("figure.lm-map").forEach(function (fig) {
        var canvas = fig.querySelector("canvas[data-head]");
        var hd = parseHead(canvas.getAttribute("data-head"), model.cfg);
        if (!hd) throw new Error("a map for an unknown head: " + canvas.getAttribute("data-head"));
        canvases.push({ canvas: canvas, mark: fig.querySelector(".lm-map-row"), layer: hd[0], head: hd[1], fig: fig });
      });
      tableHead.innerHTML = "";
      canvases.forEach(function (m) {
        tableHead.appendChild(el("option", { value: m.layer + "," + m.head }, headName(m.layer, m.head)));
      });
    }

    function drawMaps() {
      var T = result.T;
      canvases.forEach(function (m) {
        var w = result.attention[m.layer][m.head];
        if (m.canvas.width !== T) { m.canvas.width = T; m.canvas.height = T; }
        var ctx = m.canvas.getContext("2d");
        var img = ctx.createImageData(T, T), px = img.data;
        for (var i = 0; i < T * T; i++) {
          px[4 * i] = 230; px[4 * i + 1] = 81; px[4 * i + 2] = 0;  // deep orange; alpha = weight
          px[4 * i + 3] = Math.round(255 * Math.sqrt(w[i]));  // sqrt: small weights stay visible
        }
        ctx.putImageData(img, 0, 0);
        var off = state.off.indexOf(headName(m.layer, m.head)) >= 0;
        m.fig.classList.toggle("is-off", off);
        m.canvas.setAttribute("aria-label", "Attention of " + headName(m.layer, m.head) + (off ? " (switched off)" : "") +
          ": rows are query positions 0 to " + (T - 1) + ", columns the positions they attend to; " +
          "the table below the maps has the numbers");
      });
      markQuery();
    }

    function markQuery() {
      var T = result.T, i = state.query;
      canvases.forEach(function (m) {
        m.mark.style.top = (100 * i / T) + "%";
        m.mark.style.height = (100 / T) + "%";
      });
      strip.querySelectorAll(".lm-token").forEach(function (node, k) {
        var active = k === i;
        if (node.classList.contains("is-active") === active && node.hasAttribute("aria-current")) return;
        node.classList.toggle("is-active", active);
        node.setAttribute("tabindex", active ? "0" : "-1");
        node.setAttribute("aria-current", active ? "true" : "false");
      });
      describeQuery();
      if (tableBox.open) drawTable();
    }

    function top(arr, offset, n, count) {
      var idx = [];
      for (var k = 0; k < n; k++) idx.push(k);
      idx.sort(function (a, b) { return arr[offset + b] - arr[offset + a] || a - b; });
      return idx.slice(0, count);
    }

    function describeQuery() {
      var T = result.T, V = result.V, i = state.query, tokens = state.tokens;
      var preds = top(info.probs, i * V, V, 3).map(function (v) {
        return v + " (" + (100 * info.probs[i * V + v]).toFixed(1) + "%)";
      });
      var next = i + 1 < T ? "the next token is " + tokens[i + 1] + (info.hits[i] ? ", predicted right" : ", missed") +
        (info.copyable[i] ? " (it can be copied from earlier)" : "") : "this is the last position";
      var looks = canvases.map(function (m) {
        var w = result.attention[m.layer][m.head], k = top(w, i * T, i + 1, 1)[0];
        return headName(m.layer, m.head) + " → " + k + " (" + w[i * T + k].toFixed(2) + ")";
      });
      readout.textContent = "Position " + i + ", token " + tokens[i] + ": predicts " + preds.join(", ") + "; " + next +
        ". Where each head looks most from here: " + looks.join("; ") + ".";
    }

    function drawTokens() {
      strip.innerHTML = "";
      state.tokens.forEach(function (tok, k) {
        var hit = k > 0 && info.hits[k - 1];
        var span = el("span", {
          class: "lm-token" + (hit ? " is-hit" : "") + (k > 0 && info.copyable[k - 1] ? " is-copyable" : ""),
          "data-index": String(k), tabindex: "-1", role: "button",
          "aria-label": "position " + k + ", token " + tok + (k > 0 ? (hit ? ", predicted right" : ", not predicted") : "")
        }, String(tok));
        strip.appendChild(span);
      });
    }

    function describeSummary() {
      var parts = [];
      if (info.copy) {
        parts.push("Repeated part (" + info.copy.n + " positions whose next token follows an earlier copy of the current " +
          "token): loss " + info.copy.loss.toFixed(2) + " nats, accuracy " + (100 * info.copy.hits / info.copy.n).toFixed(0) +
          "% (" + info.copy.hits + " of " + info.copy.n + ").");
      } else {
        parts.push("No position here has a next token that can be copied from earlier in the sequence.");
      }
      if (info.other) parts.push("Other positions (" + info.other.n + "): loss " + info.other.loss.toFixed(2) + " nats.");
      parts.push("Uniform guess: ln " + model.cfg.vocab_size + " = " + data.uniform_loss.toFixed(2) + " nats.");
      parts.push(state.off.length ? "Switched off: " + state.off.join(", ") + "." : "Every head on.");
      summary.textContent = parts.join(" ");
    }

    // The selected query's weights, one row per key it sees: a narrow table that fits a phone (the whole T x T
    // matrix, up to 64 columns, scrolled sideways; the maps show it whole). Redrawn when the query changes.
    function drawTable() {
      if (!tableBox.open) { table.innerHTML = ""; return; }
      var lh = tableHead.value.split(",").map(Number), w = result.attention[lh[0]][lh[1]], T = result.T;
      var i = state.query, last = model.cfg.causal ? i : T - 1;
      var tbl = el("table", { class: "lm-weights" });
      tbl.appendChild(el("caption", {}, "Attention weights of " + headName(lh[0], lh[1]) + " for the query at position " +
        i + " (token " + state.tokens[i] + "), one row per key it sees; they sum to 1"));
      var head = el("tr", {});
      head.appendChild(el("th", { scope: "col" }, "key position (token)"));
      head.appendChild(el("th", { scope: "col" }, "weight"));
      var thead = el("thead", {});
      thead.appendChild(head);
      tbl.appendChild(thead);
      var body = el("tbody", {});
      for (var j = 0; j <= last; j++) {
        var tr = el("tr", {});
        tr.appendChild(el("th", { scope: "row" }, j + " (" + state.tokens[j] + ")"));
        tr.appendChild(el("td", {}, w[i * T + j].toFixed(2)));
        body.appendChild(tr);
      }
      tbl.appendChild(body);
      table.innerHTML = "";
      table.appendChild(tbl);
    }

    var urlTimer = null;
    function writeUrlSoon() {  // replaceState costs milliseconds: keep it out of the update the reader waits for
      window.clearTimeout(urlTimer);
      urlTimer = window.setTimeout(writeUrl, 150);
    }

    function writeUrl() {
      window.clearTimeout(urlTimer);
      if (!document.contains(root)) return;  // the reader has navigated to another page meanwhile
      var search = "?tokens=" + state.tokens.join(",") + (state.off.length ? "&off=" + state.off.join(",") : "");
      try {
        history.replaceState(history.state, "", location.pathname + search + location.hash);
      } catch (err) { /* a sandboxed page may refuse; the link button still shows the address */ }
    }

    function update(options) {
      var keep = keepMatrix(model.cfg, state.off);
      result = forward(model, state.tokens, keep, options && options.tokensChanged ? null : result);
      info = analyse(result, state.tokens);
      if (state.query >= state.tokens.length) state.query = state.tokens.length - 1;
      checks.forEach(function (c) { c.checked = state.off.indexOf(c.getAttribute("data-head")) < 0; });
      if (options && options.tokensChanged) drawTokens();
      else {
        strip.querySelectorAll(".lm-token").forEach(function (node, k) {
          var hit = k > 0 && info.hits[k - 1];
          if (node.classList.contains("is-hit") === hit) return;
          node.classList.toggle("is-hit", hit);
          node.setAttribute("aria-label", "position " + k + ", token " + state.tokens[k] +
            (k > 0 ? (hit ? ", predicted right" : ", not predicted") : ""));
        });
      }
      drawMaps();
      describeSummary();
      drawTable();
      writeUrlSoon();
    }

    function setTokens(tokens, off, text) {
      state.tokens = tokens;
      if (off) state.off = off;
      if (text !== undefined) input.value = text;
      update({ tokensChanged: true });
    }

    function applyPreset(id, off) {  // off: the link's switched-off heads instead of the preset's own
      var p = data.presets.filter(function (x) { return x.id === id; })[0];
      if (!p) return false;
      state.query = p.tokens.length - 1;
      presetText.textContent = p.text;
      setMessage(p.tokens.length + " tokens, valid.", false);
      setTokens(p.tokens.slice(), (off || p.off).slice(), p.tokens.join(" "));
      return true;
    }

    function linkHeads(params) {  // the heads a link's ?off= names: {off: known ones, ignored: the rest}
      var off = [], ignored = [];
      (params.get("off") || "").split(",").filter(Boolean).forEach(function (name) {
        var hd = parseHead(name, model.cfg);
        if (!hd) ignored.push(name);
        else if (off.indexOf(headName(hd[0], hd[1])) < 0) off.push(headName(hd[0], hd[1]));
      });
      off.sort();
      return { off: off, ignored: ignored };
    }

    function ignoredText(heads) {
      return heads.ignored.length ? " Ignored unknown heads in the link: " + heads.ignored.join(", ") + "." : "";
    }

    function fromUrl() {
      var params = new URLSearchParams(location.search);
      var heads = linkHeads(params), hasOff = (params.get("off") || "") !== "";
      if (!params.has("tokens") || (params.has("preset") && hasPreset(params.get("preset")))) {
        var id = params.has("preset") && hasPreset(params.get("preset")) ? params.get("preset") : data.presets[0].id;
        if (!hasOff) { applyPreset(id); return; }
        // ?off= without tokens= (or with a preset): those heads off in the preset's sequence, and say so
        applyPreset(id, heads.off);
        var label = data.presets.filter(function (x) { return x.id === id; })[0].label;
        setMessage("Switched off " + (heads.off.length ? heads.off.join(", ") : "no head") + " as the link asks, in " +
          "the preset “" + label + "”" + (params.has("tokens") ? "" : " (the link gives no tokens=)") + "." +
          ignoredText(heads), heads.ignored.length > 0);
        return;
      }
      var text = params.get("tokens").replace(/,/g, " ");
      input.value = text;
      var parsed = parseTokens(text, model.cfg);
      if (parsed.error) {
        setMessage("The link’s sequence cannot run: " + parsed.error, true);
        state.off = heads.off;
        return;
      }
      state.query = parsed.tokens.length - 1;
      setMessage(parsed.tokens.length + " tokens from the link." + ignoredText(heads), heads.ignored.length > 0);
      presetText.textContent = "";
      setTokens(parsed.tokens, heads.off);
    }

    function hasPreset(id) { return data.presets.some(function (x) { return x.id === id; }); }

    input.addEventListener("input", function () {
      if (!model) return;
      var parsed = parseTokens(input.value, model.cfg);
      if (parsed.error) {
        setMessage(parsed.error + (result ? " Still showing the last valid sequence." : ""), true);
        return;
      }
      setMessage(parsed.tokens.length + " tokens, valid.", false);
      presetText.textContent = "";
      setTokens(parsed.tokens);
    });

    root.addEventListener("click", function (event) {
      var target = event.target instanceof Element ? event.target : null;
      if (!target || !model) return;
      var preset = target.closest(".lm-preset");
      if (preset) { applyPreset(preset.getAttribute("data-preset")); return; }
      if (target.closest(".lm-restore")) { state.off = []; if (result) update(); return; }
      if (target.closest(".lm-share")) { share(); return; }
      var token = target.closest(".lm-token");
      if (token) { state.query = Number(token.getAttribute("data-index")); markQuery(); }
    });

    root.addEventListener("change", function (event) {
      var c = event.target;
      if (c instanceof HTMLInputElement && c.hasAttribute("data-head") && model) {
        var name = c.getAttribute("data-head");
        state.off = state.off.filter(function (n) { return n !== name; });
        if (!c.checked) state.off.push(name);
        state.off.sort();
        if (result) update(); else writeUrlSoon();
      } else if (c === tableHead && result) {
        drawTable();
      }
    });

    tableBox.addEventListener("toggle", function () { if (result) drawTable(); });

    function pointTo(event) {
      var t = event.target instanceof Element ? event.target : null;
      if (!t || !result) return;
      var token = t.closest(".lm-token");
      if (token) {
        var i = Number(token.getAttribute("data-index"));
        if (i !== state.query) { state.query = i; markQuery(); }
        return;
      }
      if (t.tagName === "CANVAS" && event.clientY !== undefined) {
        var rect = t.getBoundingClientRect();
        var row = Math.floor((event.clientY - rect.top) / rect.height * result.T);
        if (row >= 0 && row < result.T && row !== state.query) { state.query = row; markQuery(); }
      }
    }
    strip.addEventListener("mouseover", pointTo);
    strip.addEventListener("focusin", pointTo);
    mapsBox.addEventListener("mousemove", pointTo);
    mapsBox.addEventListener("click", pointTo);

    strip.addEventListener("keydown", function (event) {
      if (!result) return;
      var i = state.query, n = result.T, next = null;
      if (event.key === "ArrowRight" || event.key === "ArrowDown") next = Math.min(n - 1, i + 1);
      else if (event.key === "ArrowLeft" || event.key === "ArrowUp") next = Math.max(0, i - 1);
      else if (event.key === "Home") next = 0;
      else if (event.key === "End") next = n - 1;
      if (next === null) return;
      event.preventDefault();
      state.query = next;
      markQuery();
      var node = strip.querySelector('.lm-token[data-index="' + next + '"]');
      if (node) node.focus();
    });

    function share() {
      writeUrl();
      var status = q(".lm-share-status"), url = location.href;
      var shown = function () { status.textContent = "Link to this view: " + url; };
      if (navigator.clipboard && window.isSecureContext) {
        navigator.clipboard.writeText(url).then(function () {
          status.textContent = "Copied the link to this view (it is also in the address bar).";
        }, shown);
      } else {
        shown();
      }
    }

    loadModel(jsonUrl).then(function (m) {
      if (!document.contains(root)) return;  // the reader navigated away meanwhile
      model = m;
      buildMaps();
      fromUrl();
    }, function (err) {
      setMessage("The model could not be loaded (" + err.message + "). Reload the page to try again.", true);
    });
  }

  function init() {
    document.querySelectorAll("[data-live-model]").forEach(function (root) {
      try { setup(root); } catch (err) {
        var m = root.querySelector(".lm-message");
        if (m) m.textContent = "The widget could not start: " + err.message;
      }
    });
  }

  /* ---------- test and benchmark hook ---------- */

  function currentModel() {
    var root = document.querySelector("[data-live-model]");
    if (!root) return Promise.reject(new Error("no [data-live-model] on this page"));
    return loadModel(new URL(root.getAttribute("data-model-src"), document.baseURI).href);
  }

  window.liveModel = {
    get ready() { return currentModel(); },
    model: null,
    parse: function (text) {
      if (!window.liveModel.model) throw new Error("await window.liveModel.ready first");
      return parseTokens(text, window.liveModel.model.cfg);
    },
    run: function (tokens, ablated) {
      var m = window.liveModel.model;
      if (!m) throw new Error("await window.liveModel.ready first");
      var parsed = parseTokens(tokens.join(" "), m.cfg);
      if (parsed.error) throw new RangeError(parsed.error);
      var off = (ablated || []).map(function (a) {
        var hd = parseHead(a, m.cfg);
        if (!hd) throw new RangeError("unknown head " + JSON.stringify(a));
        return headName(hd[0], hd[1]);
      });
      var r = forward(m, parsed.tokens, keepMatrix(m.cfg, off));
      var T = r.T, V = r.V, logits = [];
      for (var t = 0; t < T; t++) logits.push(Array.prototype.slice.call(r.logits, t * V, (t + 1) * V));
      var attention = r.attention.map(function (maps) {
        return maps.map(function (w) {
          var rows = [];
          for (var i = 0; i < T; i++) rows.push(Array.prototype.slice.call(w, i * T, (i + 1) * T));
          return rows;
        });
      });
      return { logits: logits, attention: attention };
    },
    forward: function (tokens, ablated) {  // the typed arrays, for the benchmark
      var m = window.liveModel.model;
      return forward(m, tokens, keepMatrix(m.cfg, ablated || []));
    }
  };
  var readyGetter = Object.getOwnPropertyDescriptor(window.liveModel, "ready").get;
  Object.defineProperty(window.liveModel, "ready", {
    get: function () {
      return readyGetter().then(function (m) { window.liveModel.model = m; return m.cfg; });
    }
  });

  if (window.document$ && typeof window.document$.subscribe === "function") {
    window.document$.subscribe(init);
  } else if (document.readyState === "loading") {
    document.addEventListener("DOMContentLoaded", init);
  } else {
    init();
  }
})();
