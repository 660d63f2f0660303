/*
 * Practice widgets: flashcards, quiz and head explorer. Plain JavaScript, no dependencies, no network.
 *
 * The pages' HTML is generated at build time (tools/site_build/practice_pages.py); this file only adds behaviour.
 * Stable hooks (used by the browser tests too):
 *   Flashcards  [data-flashcards] > ol > li.flashcard-item[data-card-id] > button.flashcard[aria-pressed]
 *                 (click, Enter or Space shows the answer under the question; its space is reserved, so
 *                 nothing moves) and button[data-mark=known|again][aria-pressed] (the reader's marks,
 *                 kept in localStorage under MARKS_KEY, so they survive reloads and later visits)
 *               button[data-shuffle-flashcards]  -> shuffles the cards (and renumbers them)
 *               button[data-flip-all]            -> shows or hides every answer
 *               button[data-study-again][aria-pressed] -> shows only the cards marked "again"
 *               button[data-reset-marks]         -> forgets every mark
 *               button[data-print-flashcards]    -> window.print(); print CSS puts one card per page
 *               [data-flashcards-status]         -> counts in words (aria-live)
 *               Cards are grouped in details.flashcard-part (one ol.flashcard-list each); shuffling
 *               shuffles within each part, studying and printing open the parts they need.
 *   Quiz        [data-quiz] > fieldset.quiz-question > ol.quiz-options > li > label > input[type=radio]
 *                 [data-correct][data-explanation]; the options are shuffled once per page load with a
 *                 seeded generator: the seed is ?quiz-seed=N in the URL if given, else random; it is
 *                 written to [data-quiz][data-seed]. .quiz-feedback (aria-live) per question;
 *                 [data-quiz-score] reads "A of N answered, C correct" from the start.
 *   Explorer    [data-head-explorer] with select[name=model|sentence|layer|head] (head "all" = all heads),
 *               query tokens .hx-token[tabindex=0]; key tokens .hx-key get data-weight (0..1) and a shade
 *               while a query token is hovered or focused; .hx-readout describes it in words, naming
 *               tokens with their positions ("0" (pos 3)) (aria-live).
 *
 * Click handlers are delegated from `document`, so they keep working after Material's instant
 * navigation swaps the page; the widgets are (re)initialised on every page load through Material's `document$`.
 */
(function () {
  "use strict";

  if (window.__mhaPracticeLoaded) return;
  window.__mhaPracticeLoaded = true;

  /* ---------- shared ---------- */

  // mulberry32: a tiny seeded generator, so a test can replay a shuffle from its seed.
  function rng(seed) {
    var a = seed >>> 0;
    return function () {
      a = (a + 0x6d2b79f5) >>> 0;
      var t = a;
      t = Math.imul(t ^ (t >>> 15), t | 1);
      t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
      return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
    };
  }

  function randomSeed() {
    if (window.crypto && window.crypto.getRandomValues) {
      return window.crypto.getRandomValues(new Uint32Array(1))[0];
    }
    return (Date.now() ^ Math.floor(Math.random() * 4294967296)) >>> 0;
  }

  // Fisher-Yates: reorders the children of `parent` (those in `items`) in place.
  function shuffleChildren(parent, items, random) {
    var arr = Array.prototype.slice.call(items);
    for (var i = arr.length - 1; i > 0; i--) {
      var j = Math.floor(random() * (i + 1));
      var tmp = arr[i]; arr[i] = arr[j]; arr[j] = tmp;
    }
    arr.forEach(function (node) { parent.appendChild(node); });
  }

  /* ---------- flashcards ---------- */

  function cardCount(n) {
    return n + (n === 1 ? " card" : " cards");
  }

  var MARKS_KEY = "mha-flashcards-marks";

  function loadMarks() {
    try {
      var marks = JSON.parse(window.localStorage.getItem(MARKS_KEY) || "{}");
      return marks && typeof marks === "object" ? marks : {};
    } catch (err) {
      return {};
    }
  }

  function saveMarks(marks) {
    try {
      if (Object.keys(marks).length) window.localStorage.setItem(MARKS_KEY, JSON.stringify(marks));
      else window.localStorage.removeItem(MARKS_KEY);
    } catch (err) { /* storage refused (private mode): the marks last until the page is left */ }
  }

  function setCard(card, pressed) {
    card.setAttribute("aria-pressed", pressed ? "true" : "false");
  }

  function items(deck) { return deck.querySelectorAll("li.flashcard-item"); }

  function updateFlipAll(deck) {
    var btn = deck.querySelector("[data-flip-all]");
    if (!btn) return;
    var cards = deck.querySelectorAll("button.flashcard");
    var allShown = cards.length > 0 && Array.prototype.every.call(cards, function (c) {
      return c.getAttribute("aria-pressed") === "true";
    });
    btn.textContent = allShown ? "Hide all answers" : "Show all answers";
  }

  // Marks on the buttons, the study filter, the card numbers and the status line, from the stored marks.
  function refreshDeck(deck) {
    var marks = loadMarks();
    var studying = deck.getAttribute("data-studying") === "true";
    var counts = { known: 0, again: 0 };
    var shown = [];
    items(deck).forEach(function (item) {
      var mark = marks[item.getAttribute("data-card-id")];
      if (mark === "known" || mark === "again") counts[mark] += 1;
      item.setAttribute("data-mark", mark || "none");
      item.querySelectorAll("[data-mark]").forEach(function (b) {
        b.setAttribute("aria-pressed", b.getAttribute("data-mark") === mark ? "true" : "false");
      });
      var visible = !studying || mark === "again";
      item.hidden = !visible;
      if (visible) shown.push(item);
    });
    if (studying) {  // open every part that holds a card to study
      shown.forEach(function (item) {
        var part = item.closest("details");
        if (part) part.open = true;
      });
    }
    shown.forEach(function (item, i) {
      var number = item.querySelector(".flashcard-number");
      if (number) number.textContent = "Card " + (i + 1) + " of " + shown.length;
    });
    var study = deck.querySelector("[data-study-again]");
    if (study) study.setAttribute("aria-pressed", studying ? "true" : "false");
    var status = deck.querySelector("[data-flashcards-status]");
    if (status) {
      var total = items(deck).length;
      var text = cardCount(total) + ": " + counts.known + " marked “knew it”, " + counts.again + " marked “again”.";
      if (studying) text = "Studying the " + cardCount(shown.length) + " marked “again” (of " + total + ").";
      status.textContent = text;
    }
  }

  function initDeck(deck) {
    if (deck.getAttribute("data-ready") === "true") return;
    deck.setAttribute("data-ready", "true");
    refreshDeck(deck);
  }

  function markCard(button) {
    var item = button.closest("li.flashcard-item");
    var deck = button.closest("[data-flashcards]");
    if (!item || !deck) return;
    var id = item.getAttribute("data-card-id");
    var mark = button.getAttribute("data-mark");
    var marks = loadMarks();
    if (marks[id] === mark) delete marks[id];  // pressing a pressed mark takes it back
    else marks[id] = mark;
    saveMarks(marks);
    // Studying, a card just marked "knew it" stays until the next switch, so the page does not jump.
    var studying = deck.getAttribute("data-studying") === "true";
    if (studying) {
      item.setAttribute("data-mark", marks[id] || "none");
      item.querySelectorAll("[data-mark]").forEach(function (b) {
        b.setAttribute("aria-pressed", b.getAttribute("data-mark") === marks[id] ? "true" : "false");
      });
      return;
    }
    refreshDeck(deck);
  }

  function toggleStudy(deck) {
    var marks = loadMarks();
    var anyAgain = Object.keys(marks).some(function (k) { return marks[k] === "again"; });
    var studying = deck.getAttribute("data-studying") === "true";
    if (!studying && !anyAgain) {
      var status = deck.querySelector("[data-flashcards-status]");
      if (status) status.textContent = "No card is marked “again” yet: mark the cards you missed, then study them.";
      return;
    }
    deck.setAttribute("data-studying", studying ? "false" : "true");
    refreshDeck(deck);
  }

  document.addEventListener("click", function (event) {
    var target = event.target;
    if (!(target instanceof Element)) return;
    var deck = target.closest("[data-flashcards]");
    if (!deck) return;

    var card = target.closest("button.flashcard");
    if (card) {
      setCard(card, card.getAttribute("aria-pressed") !== "true");
      updateFlipAll(deck);
      return;
    }
    var mark = target.closest("button[data-mark]");
    if (mark) { markCard(mark); return; }
    if (target.closest("[data-flip-all]")) {
      var cards = deck.querySelectorAll("button.flashcard");
      var show = Array.prototype.some.call(cards, function (c) {
        return c.getAttribute("aria-pressed") !== "true";
      });
      cards.forEach(function (c) { setCard(c, show); });
      updateFlipAll(deck);
      return;
    }
    if (target.closest("[data-shuffle-flashcards]")) {
      var random = rng(randomSeed());
      deck.querySelectorAll("ol.flashcard-list").forEach(function (list) {  // within each part
        shuffleChildren(list, list.querySelectorAll("li.flashcard-item"), random);
      });
      refreshDeck(deck);
      return;
    }
    if (target.closest("[data-study-again]")) { toggleStudy(deck); return; }
    if (target.closest("[data-reset-marks]")) {
      saveMarks({});
      deck.setAttribute("data-studying", "false");
      refreshDeck(deck);
      return;
    }
    if (target.closest("[data-print-flashcards]")) {
      deck.querySelectorAll("details").forEach(function (part) { part.open = true; });  // print every card
      window.print();
    }
  });

  /* ---------- quiz ---------- */

  function quizSeed() {
    var match = /[?&]quiz-seed=(\d+)/.exec(window.location.search);
    return match ? Number(match[1]) >>> 0 : randomSeed();
  }

  function initQuiz(quiz) {
    if (quiz.getAttribute("data-ready") === "true") return;
    quiz.setAttribute("data-ready", "true");
    var seed = quizSeed();
    quiz.setAttribute("data-seed", String(seed));
    var random = rng(seed);
    quiz.querySelectorAll("ol.quiz-options").forEach(function (list) {
      shuffleChildren(list, list.children, random);
    });
    updateScore(quiz);
  }

  function updateScore(quiz) {
    var questions = quiz.querySelectorAll(".quiz-question");
    var answered = 0;
    var correct = 0;
    questions.forEach(function (q) {
      var chosen = q.querySelector("input[type=radio]:checked");
      if (!chosen) return;
      answered += 1;
      if (chosen.getAttribute("data-correct") === "true") correct += 1;
    });
    var out = quiz.querySelector("[data-quiz-score]");
    if (out) {
      // The same words as the build writes (practice_pages.score_text), so the line never changes shape.
      out.textContent = answered + " of " + questions.length + " answered, " + correct + " correct";
      out.setAttribute("data-correct", String(correct));
      out.setAttribute("data-answered", String(answered));
    }
  }

  function showFeedback(input) {
    var question = input.closest(".quiz-question");
    if (!question) return;
    var right = input.getAttribute("data-correct") === "true";
    question.querySelectorAll("label").forEach(function (label) {
      label.classList.remove("is-correct", "is-wrong");
    });
    var label = input.closest("label");
    if (label) label.classList.add(right ? "is-correct" : "is-wrong");
    question.setAttribute("data-state", right ? "correct" : "wrong");
    var feedback = question.querySelector(".quiz-feedback");
    if (feedback) {
      feedback.textContent = (right ? "✓ Correct. " : "✗ Not this one. ") + input.getAttribute("data-explanation");
      feedback.className = "quiz-feedback " + (right ? "is-correct" : "is-wrong");
    }
  }

  document.addEventListener("change", function (event) {
    var input = event.target;
    if (!(input instanceof HTMLInputElement) || input.type !== "radio") return;
    var quiz = input.closest("[data-quiz]");
    if (!quiz) return;
    showFeedback(input);
    updateScore(quiz);
  });

  document.addEventListener("reset", function (event) {
    var quiz = event.target;
    if (!(quiz instanceof Element) || !quiz.matches("[data-quiz]")) return;
    window.setTimeout(function () {  // after the browser has cleared the radios
      quiz.querySelectorAll(".quiz-question").forEach(function (q) {
        q.removeAttribute("data-state");
        q.querySelectorAll("label").forEach(function (l) { l.classList.remove("is-correct", "is-wrong"); });
        var f = q.querySelector(".quiz-feedback");
        if (f) { f.textContent = ""; f.className = "quiz-feedback"; }
      });
      updateScore(quiz);
    }, 0);
  });

  /* ---------- head explorer ---------- */

  var SVG_NS = "http://www.w3.org/2000/svg";
  var ROW_EM = 1.9;
  var HEAD_HUES = [0, 30, 55, 100, 150, 180, 200, 225, 260, 290, 320, 345, 15, 75, 125, 240];

  function headColor(h) {
    return "hsl(" + HEAD_HUES[h % HEAD_HUES.length] + ", 75%, 45%)";
  }

  function el(tag, attrs, text) {
    var node = document.createElement(tag);
    Object.keys(attrs || {}).forEach(function (k) { node.setAttribute(k, attrs[k]); });
    if (text !== undefined) node.textContent = text;
    return node;
  }

  function fillSelect(select, items, value) {
    select.innerHTML = "";
    items.forEach(function (item) {
      var opt = el("option", { value: String(item.value) }, item.label);
      select.appendChild(opt);
    });
    if (value !== undefined && items.some(function (i) { return String(i.value) === String(value); })) {
      select.value = String(value);
    }
  }

  function setupExplorer(root) {
    if (root.getAttribute("data-ready") === "true") return;
    var dataNode = root.querySelector(".hx-data");
    if (!dataNode) return;
    var data = JSON.parse(dataNode.textContent);
    root.setAttribute("data-ready", "true");

    var sel = {
      model: root.querySelector("select[name=model]"),
      sentence: root.querySelector("select[name=sentence]"),
      layer: root.querySelector("select[name=layer]"),
      head: root.querySelector("select[name=head]")
    };
    var stage = root.querySelector(".hx-stage");
    var readout = root.querySelector(".hx-readout");
    var legend = root.querySelector(".hx-legend");
    var active = null;  // index of the query token shown, or null for the overview

    function source() { return data.sources[Number(sel.model.value) || 0]; }
    function sentence() { return source().sentences[Number(sel.sentence.value) || 0]; }
    function heads() {
      var src = source();
      if (sel.head.value === "all") {
        var all = [];
        for (var h = 0; h < src.num_heads; h++) all.push(h);
        return all;
      }
      return [Number(sel.head.value)];
    }
    function weight(s, layer, head, q, k) { return s.weights[layer][head][q][k] / s.scale; }

    function syncSelects() {
      var src = source();
      fillSelect(sel.sentence, src.sentences.map(function (s, i) { return { value: i, label: s.text }; }),
        sel.sentence.value);
      var layers = [];
      for (var l = 0; l < src.num_layers; l++) layers.push({ value: l, label: "layer " + l });
      fillSelect(sel.layer, layers, sel.layer.value);
      var hs = [{ value: "all", label: "all heads" }];
      for (var h = 0; h < src.num_heads; h++) hs.push({ value: h, label: "head " + h });
      var keep = sel.head.value === "all" || Number(sel.head.value) < src.num_heads;
      fillSelect(sel.head, hs, keep && sel.head.value ? sel.head.value : "0");
    }

    function render() {
      var s = sentence();
      var T = s.tokens.length;
      stage.innerHTML = "";
      stage.style.setProperty("--hx-rows", String(T));
      var left = el("ol", { class: "hx-col hx-queries", "aria-label": "query tokens" });
      var right = el("ol", { class: "hx-col hx-keys", "aria-label": "key tokens (attended to)" });
      var svg = document.createElementNS(SVG_NS, "svg");
      svg.setAttribute("class", "hx-lines");
      svg.setAttribute("viewBox", "0 0 100 " + T * 10);
      svg.setAttribute("preserveAspectRatio", "none");
      svg.setAttribute("aria-hidden", "true");
      svg.style.height = (T * ROW_EM) + "em";  // rows of the token columns are ROW_EM high (practice.css)
      s.tokens.forEach(function (tok, i) {
        var li = el("li", {});
        var q = el("span", { class: "hx-token", tabindex: "0", "data-index": String(i) }, tok);
        li.appendChild(q);
        left.appendChild(li);
        var li2 = el("li", {});
        li2.appendChild(el("span", { class: "hx-key", "data-index": String(i) }, tok));
        right.appendChild(li2);
      });
      stage.appendChild(left);
      stage.appendChild(svg);
      stage.appendChild(right);
      var hs = heads();
      legend.innerHTML = "";
      hs.forEach(function (h) {
        var item = el("span", { class: "hx-legend-item" });
        var swatch = el("span", { class: "hx-swatch", "aria-hidden": "true" });
        swatch.style.background = headColor(h);
        item.appendChild(swatch);
        item.appendChild(document.createTextNode("head " + h));
        legend.appendChild(item);
      });
      draw();
    }

    function draw() {
      var s = sentence();
      var T = s.tokens.length;
      var layer = Number(sel.layer.value);
      var hs = heads();
      var svg = stage.querySelector("svg");
      while (svg.firstChild) svg.removeChild(svg.firstChild);
      var queries = active === null ? range(T) : [active];
      var opacityScale = active === null ? 0.6 : 1.0;
      // One <path> per head and weight level (not one <line> per pair), so the page's DOM stays small
      // even for long inputs with every head shown.
      var LEVELS = 8;
      hs.forEach(function (h) {
        var segments = [];
        for (var lv = 0; lv < LEVELS; lv++) segments.push([]);
        queries.forEach(function (q) {
          for (var k = 0; k < T; k++) {
            var w = weight(s, layer, h, q, k);
            if (w < 0.02) continue;
            var level = Math.min(LEVELS - 1, Math.floor(w * LEVELS));
            segments[level].push("M0 " + (q * 10 + 5) + "L100 " + (k * 10 + 5));
          }
        });
        segments.forEach(function (d, level) {
          if (!d.length) return;
          var w = (level + 0.5) / LEVELS;  // the level's mid weight
          var path = document.createElementNS(SVG_NS, "path");
          path.setAttribute("d", d.join(""));
          path.setAttribute("fill", "none");
          path.setAttribute("stroke", headColor(h));
          path.setAttribute("stroke-width", active === null ? "1" : String(1 + 3 * w));
          path.setAttribute("vector-effect", "non-scaling-stroke");
          path.setAttribute("stroke-opacity", String(Math.min(1, w * opacityScale / (active === null ? Math.sqrt(hs.length) : 1))));
          svg.appendChild(path);
        });
      });
      var keys = stage.querySelectorAll(".hx-key");
      var tokensEls = stage.querySelectorAll(".hx-token");
      tokensEls.forEach(function (t) { t.classList.toggle("is-active", Number(t.getAttribute("data-index")) === active); });
      if (active === null) {
        keys.forEach(function (k) { k.removeAttribute("data-weight"); k.style.removeProperty("--hx-w"); });
        readout.textContent = "Hover over or focus a token on the left to see where it attends.";
        return;
      }
      var mean = [];
      for (var k = 0; k < T; k++) {
        var sum = 0;
        hs.forEach(function (h) { sum += weight(s, layer, h, active, k); });
        mean.push(sum / hs.length);
      }
      keys.forEach(function (node, k) {
        node.setAttribute("data-weight", mean[k].toFixed(2));
        node.style.setProperty("--hx-w", String(mean[k]));
      });
      var order = range(T).sort(function (a, b) { return mean[b] - mean[a]; }).slice(0, 3);
      var where = sel.head.value === "all" ? "all heads of layer " + layer + " (mean weight)"
        : "layer " + layer + ", head " + sel.head.value;
      // Tokens are named with their positions: a repeated input has the same token at several places.
      readout.textContent = "“" + s.tokens[active] + "” (pos " + active + "), " + where + ", attends most to: " +
        order.map(function (k) { return "“" + s.tokens[k] + "” (pos " + k + ") " + mean[k].toFixed(2); }).join(", ") + ".";
    }

    function range(n) { var r = []; for (var i = 0; i < n; i++) r.push(i); return r; }

    function activate(event) {
      var t = event.target instanceof Element ? event.target.closest(".hx-token") : null;
      if (!t || !stage.contains(t)) return;
      active = Number(t.getAttribute("data-index"));
      draw();
    }
    function deactivate(event) {
      var t = event.target instanceof Element ? event.target.closest(".hx-token") : null;
      if (!t) return;
      var next = event.relatedTarget instanceof Element ? event.relatedTarget.closest(".hx-token") : null;
      if (next && stage.contains(next)) return;
      if (event.type === "mouseout" && stage.contains(document.activeElement) &&
          document.activeElement.classList.contains("hx-token")) {
        active = Number(document.activeElement.getAttribute("data-index"));
      } else {
        active = null;
      }
      draw();
    }
    stage.addEventListener("mouseover", activate);
    stage.addEventListener("focusin", activate);
    stage.addEventListener("mouseout", deactivate);
    stage.addEventListener("focusout", deactivate);
    stage.addEventListener("click", activate);
    stage.addEventListener("keydown", function (event) {
      var t = event.target instanceof Element ? event.target.closest(".hx-token") : null;
      if (!t) return;
      var i = Number(t.getAttribute("data-index"));
      var next = null;
      if (event.key === "ArrowDown") next = i + 1;
      else if (event.key === "ArrowUp") next = i - 1;
      if (next === null) return;
      var target = stage.querySelector('.hx-token[data-index="' + next + '"]');
      if (target) { event.preventDefault(); target.focus(); }
    });

    sel.model.addEventListener("change", function () {
      sel.sentence.value = "0";
      active = null;
      syncSelects();
      render();
    });
    sel.sentence.addEventListener("change", function () { active = null; render(); });
    sel.layer.addEventListener("change", draw);
    sel.head.addEventListener("change", render);

    syncSelects();
    render();
  }

  function initWidgets() {
    document.querySelectorAll("[data-flashcards]").forEach(initDeck);
    document.querySelectorAll("[data-quiz]").forEach(initQuiz);
    document.querySelectorAll("[data-head-explorer]").forEach(setupExplorer);
  }

  if (window.document$ && typeof window.document$.subscribe === "function") {
    window.document$.subscribe(initWidgets);
  } else if (document.readyState === "loading") {
    document.addEventListener("DOMContentLoaded", initWidgets);
  } else {
    initWidgets();
  }
})();
