/*
 * Keyboard access to wide tables (axe-core: scrollable-region-focusable). Material wraps each table in a
 * .md-typeset__scrollwrap that scrolls sideways when the table is wider than the column; a keyboard user
 * can only scroll it if it can take focus. Every wrapper that actually scrolls gets tabindex="0" and a
 * name; one that fits does not. Runs on every page Material's instant navigation shows, and on resize.
 */
(function () {
  "use strict";

  function label(wrap) {
    var caption = wrap.querySelector("caption");
    var header = wrap.querySelector("th");
    var name = caption ? caption.textContent : header ? "table starting with " + header.textContent : "table";
    return name.trim() + " (scrolls sideways)";
  }

  function update() {
    document.querySelectorAll(".md-typeset__scrollwrap").forEach(function (wrap) {
      var scrolls = wrap.scrollWidth > wrap.clientWidth + 1;
      if (scrolls && !wrap.hasAttribute("tabindex")) {
        wrap.setAttribute("tabindex", "0");
        wrap.setAttribute("role", "region");
        wrap.setAttribute("aria-label", label(wrap));
      } else if (!scrolls && wrap.getAttribute("tabindex") === "0") {
        wrap.removeAttribute("tabindex");
        wrap.removeAttribute("role");
        wrap.removeAttribute("aria-label");
      }
    });
  }

  var pending = null;
  window.addEventListener("resize", function () {
    window.clearTimeout(pending);
    pending = window.setTimeout(update, 150);
  });
  if (window.document$ && typeof window.document$.subscribe === "function") {
    window.document$.subscribe(function () { window.setTimeout(update, 0); });
  } else {
    document.addEventListener("DOMContentLoaded", update);
  }
})();
