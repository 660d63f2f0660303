/*
 * Loads each widget's script (the live models, the atlas's KV-cache calculator) only on a page that shows it, so
 * that the other pages neither download nor compile it (the live models' two: together 65 KB of JavaScript, about
 * 130 ms of the main thread on Lighthouse's throttled phone).
 * Checked on every page Material's instant navigation shows (document$) and on a full load; each script is
 * loaded once and then initialises itself on the pages that follow (it subscribes to document$ too).
 */
(function () {
  var SCRIPTS = [
    ["[data-live-model]", "live-model.js"],
    ["[data-live-text-model]", "live-text-model.js"],
    ["[data-kv-calculator]", "kv-calculator.js"]
  ];
  var here = document.currentScript ? document.currentScript.src : "";
  var loaded = {};

  function check() {
    SCRIPTS.forEach(function (entry) {
      if (loaded[entry[1]] || !document.querySelector(entry[0])) return;
      loaded[entry[1]] = true;
      var script = document.createElement("script");
      script.src = here.replace(/[^/]*$/, "") + entry[1];
      document.head.appendChild(script);
    });
  }

  if (window.document$ && typeof window.document$.subscribe === "function") {
    window.document$.subscribe(check);
  } else if (document.readyState === "loading") {
    document.addEventListener("DOMContentLoaded", check);
  } else {
    check();
  }
})();
