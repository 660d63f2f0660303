/*
 * The atlas page's KV-cache calculator: the bytes a decoder's cache holds for one model, context, batch and
 * number size, per kind of layer, with the formula (and the kind's RoPE setting, as the page's data words it).
 * It computes what lessons_src.lab.configs' ModelConfig.layer_cache_numbers computes (tests/browser/test_atlas.py
 * compares the two for every model), from the published sizes the page embeds. The state lives in the URL
 * (?model=&context=&batch=&dtype=).
 */
(function () {
  "use strict";

  function layerNumbers(m, context) {
    // [kind, numbers] per layer, for one sequence of `context` tokens (see ModelConfig.layer_cache_numbers).
    var K = m.kv_heads, E = m.head_dim, g = m.global || {};
    var oneTensor = !!m.compress; // DeepSeek-V4: the key is the value
    var indexer = m.sparse ? m.sparse.indexer_head_dim : 0;
    var kv = K * (E + m.value_dim); // a key and a value per KV head
    var perPosition = {
      full: m.mla ? m.mla.kv_latent_dim + m.mla.rope_dim
        : (m.global ? 2 * (g.num_kv_heads || K) * (g.head_dim || E) : kv),
      sliding: oneTensor ? K * E : kv,
      chunked: kv
    };
    return m.kinds.map(function (kind, n) {
      if (n >= m.kinds.length - m.shared) return ["shared", 0];
      if (kind === "linear") {
        var l = m.linear;
        var conv = 2 * l.key_heads * l.key_dim + l.value_heads * l.value_dim;
        return [kind, l.value_heads * l.key_dim * l.value_dim + l.conv_kernel * conv];
      }
      if (kind === "native_sparse") { // NSA: three branches, each with keys and values of its own
        var s = m.native_sparse;
        var blocks = context >= s.compress_block ? Math.floor((context - s.compress_block) / s.compress_stride) + 1 : 0;
        return [kind, kv * (context + blocks + Math.min(context, s.window))];
      }
      if (kind === "compressed_sparse" || kind === "heavily_compressed") {
        var pooled = Math.floor(context / m.compress[kind]);
        var win = Math.min(context, m.window || 0) * K * E;
        return [kind, win + pooled * K * E + (kind === "compressed_sparse" ? pooled * indexer : 0)];
      }
      var span = kind === "full" ? context
        : Math.min(context, (kind === "sliding" ? m.window : m.chunk) || context);
      var extra = kind === "full" && m.mla ? indexer : 0;
      return [kind, span * (perPosition[kind] + extra)];
    });
  }

  function numberFormat(bytes) {
    // A cached number's bytes as a fraction (its share of the scales included), and the bytes of an MLA cache's
    // RoPE part when it is stored apart: 2, "33/32", "33/32+rope2" (DeepSeek-V3.2's layout).
    if (typeof bytes === "number") return {num: bytes, den: 1, rope: null};
    var parts = String(bytes).split("+rope"), f = parts[0].split("/");
    return {num: Number(f[0]), den: Number(f[1] || 1), rope: parts.length > 1 ? Number(parts[1]) : null};
  }

  function cacheBytes(m, context, batch, bytes) {
    // Bytes by kind of layer and the "total", as ModelConfig.cache_bytes returns them: each kind's exact sum,
    // counted in 1/den bytes (whole numbers), rounded up to a byte.
    var f = numberFormat(bytes), exact = {}, out = {}, total = 0;
    var ropeDim = f.rope !== null && m.mla ? m.mla.rope_dim : 0;
    layerNumbers(m, context).forEach(function (entry) {
      var rope = entry[0] === "full" && entry[1] ? context * ropeDim : 0; // an MLA layer's RoPE part
      var b = ((entry[1] - rope) * f.num + rope * (f.rope || 0) * f.den) * batch;
      exact[entry[0]] = (exact[entry[0]] || 0) + b;
    });
    Object.keys(exact).forEach(function (kind) {
      out[kind] = Math.ceil(exact[kind] / f.den);
      total += out[kind];
    });
    out.total = total;
    return out;
  }

  var WORDS = {
    full: "full", sliding: "sliding-window", chunked: "chunked", linear: "linear",
    compressed_sparse: "compressed sparse", heavily_compressed: "heavily compressed", native_sparse: "NSA",
    shared: "shared"
  };

  function n(x) { return x.toLocaleString("en-US"); }

  function size(b) {
    var units = [["GiB", Math.pow(2, 30)], ["MiB", Math.pow(2, 20)], ["KiB", 1024]];
    for (var i = 0; i < units.length; i++) {
      if (b >= units[i][1]) return (b / units[i][1]).toFixed(2) + " " + units[i][0];
    }
    return b + " B";
  }

  function formula(m, kind, context) {
    // The numbers one layer of `kind` holds, written out with this model's sizes.
    var K = m.kv_heads, E = m.head_dim, g = m.global || {};
    var idx = m.sparse ? m.sparse.indexer_head_dim : 0;
    if (kind === "shared") return "reuses an earlier layer's cache: 0";
    if (kind === "linear") {
      var l = m.linear;
      return l.value_heads + " × " + l.key_dim + " × " + l.value_dim + " state + " + l.conv_kernel +
        " × (2 × " + l.key_heads + " × " + l.key_dim + " + " + l.value_heads + " × " + l.value_dim +
        ") convolution inputs, any context";
    }
    if (kind === "native_sparse") {
      var s = m.native_sparse;
      return K + " × (" + E + " + " + m.value_dim + ") × (" + n(context) + " selection + ⌊(" + n(context) + " − " +
        s.compress_block + ") / " + s.compress_stride + "⌋ + 1 pooled + min(" + n(context) + ", " + s.window +
        ") window)";
    }
    if (kind === "compressed_sparse" || kind === "heavily_compressed") {
      var r = m.compress[kind];
      return "(min(" + n(context) + ", " + m.window + ") + ⌊" + n(context) + " / " + r + "⌋) × " + K + " × " + E +
        (kind === "compressed_sparse" ? " + ⌊" + n(context) + " / " + r + "⌋ × " + idx + " indexer" : "");
    }
    var span = kind === "full" ? n(context)
      : "min(" + n(context) + ", " + n(kind === "sliding" ? m.window : m.chunk) + ")";
    if (kind === "full" && m.mla) {
      return "(" + m.mla.kv_latent_dim + " + " + m.mla.rope_dim + (idx ? " + " + idx + " indexer" : "") +
        ") × " + span;
    }
    var kv = kind === "full" && g.num_kv_heads ? g.num_kv_heads : K;
    var e = kind === "full" && g.head_dim ? g.head_dim : E;
    return (m.compress ? "" : "2 × ") + kv + " × " + e + " × " + span;
  }

  function init(root) {
    if (root.dataset.ready) return;
    root.dataset.ready = "1";
    var models = JSON.parse(root.querySelector(".kv-data").textContent).models;
    var byName = {};
    models.forEach(function (m) { byName[m.name] = m; });
    var form = {
      model: root.querySelector("[name=model]"), context: root.querySelector("[name=context]"),
      batch: root.querySelector("[name=batch]"), dtype: root.querySelector("[name=dtype]")
    };
    var out = root.querySelector(".kv-output");

    function positive(value) {
      var x = Number(value);
      return Number.isInteger(x) && x >= 1 ? x : null;
    }

    function render() {
      var m = byName[form.model.value];
      var context = positive(form.context.value), batch = positive(form.batch.value);
      var bytes = form.dtype.value, f = numberFormat(bytes);
      if (!m || context === null || batch === null) {
        out.textContent = "Context and batch must be whole numbers of at least 1.";
        return;
      }
      var perLayer = layerNumbers(m, context), totals = cacheBytes(m, context, batch, bytes);
      var counts = {}, one = {}, sequences = batch + " sequence" + (batch > 1 ? "s" : "");
      perLayer.forEach(function (entry) {
        counts[entry[0]] = (counts[entry[0]] || 0) + 1;
        if (!(entry[0] in one)) one[entry[0]] = entry[1];
      });
      var items = Object.keys(counts).map(function (kind) {
        var rope = m.rope && m.rope[kind] ? "; " + m.rope[kind] : ""; // this kind's rotation, as the atlas words it
        var layers = counts[kind] + " layer" + (counts[kind] > 1 ? "s" : "");
        return "<li><strong>" + WORDS[kind] + "</strong>, " + layers + ": per layer, " + formula(m, kind, context) +
          " = " + n(one[kind]) + " numbers per sequence; in all " + layers + ", " + size(totals[kind]) +
          " for " + sequences + rope + "</li>";
      });
      out.innerHTML = "<ul>" + items.join("") + "</ul><p class=\"kv-total\"><strong>Total, every layer: " +
        size(totals.total) + "</strong> for " + sequences + " (" + n(totals.total) + " bytes = numbers × " + batch +
        " × " + f.num + (f.den > 1 ? "/" + f.den : "") + " B" +
        (f.rope !== null && m.mla ? ", the RoPE part's × " + f.rope + " B" : "") + ")</p>";
      var p = new URLSearchParams({model: m.name, context: context, batch: batch, dtype: bytes});
      try { history.replaceState(history.state, "", location.pathname + "?" + p + location.hash); } catch (err) { /* sandboxed */ }
    }

    var params = new URLSearchParams(location.search);
    if (byName[params.get("model")]) form.model.value = params.get("model");
    // The context the page opens on is the input's own value; the URL's wins.
    form.context.value = positive(params.get("context")) || positive(form.context.defaultValue) || 1;
    if (positive(params.get("batch"))) form.batch.value = params.get("batch");
    if (params.get("dtype") && form.dtype.querySelector("option[value='" + params.get("dtype") + "']")) {
      form.dtype.value = params.get("dtype");
    }
    // Switching the model keeps the context, so that two models compare at the same length.
    ["input", "change"].forEach(function (ev) {
      [form.model, form.context, form.batch, form.dtype].forEach(function (el) { el.addEventListener(ev, render); });
    });
    render();
  }

  window.kvCalculator = {layerNumbers: layerNumbers, cacheBytes: cacheBytes};

  function check() {
    document.querySelectorAll("[data-kv-calculator]").forEach(init);
  }
  if (window.document$ && typeof window.document$.subscribe === "function") {
    window.document$.subscribe(check);
  } else if (document.readyState === "loading") {
    document.addEventListener("DOMContentLoaded", check);
  } else {
    check();
  }
})();
