(function () {
  "use strict";
  var t0 = performance.now();
  // report.html's only script: the page's Content-Security-Policy allows it by its
  // hash. Everything from a script's run is set as text (textContent), never as markup.
  var each = function (list, fn) { Array.prototype.forEach.call(list, fn); };
  var table = document.getElementById("scripts");
  var rows = table ? Array.prototype.slice.call(table.tBodies[0].rows) : [];
  var byIndex = {};
  rows.forEach(function (r) { byIndex[r.getAttribute("data-i")] = r; });
  var data = [];
  try { data = JSON.parse(document.getElementById("script-data").textContent || "[]"); } catch (e) { data = []; }

  // Columns by name, so the detail view reads a row's cells wherever they sit.
  var column = {};
  if (table) {
    each(table.tHead.rows[0].cells, function (th, col) {
      column[th.getAttribute("data-k") || th.textContent] = col;
    });
  }
  var cell = function (row, name) { return column.hasOwnProperty(name) ? row.cells[column[name]] : null; };
  var cellText = function (row, name) { var c = cell(row, name); return c ? c.textContent.trim() : ""; };

  // ---- Sorting: by a column, ties in the page's order (failures first).
  if (table) {
    var tbody = table.tBodies[0];
    var headers = table.tHead.rows[0].cells;
    // A cell's sort key is its data-v, or its text where the two are the same.
    var key = function (row, col, numeric) {
      var c = row.cells[col];
      var v = c.hasAttribute("data-v") ? c.getAttribute("data-v") : c.textContent.trim();
      if (!numeric) { return v.toLowerCase(); }
      var n = parseFloat(v);
      return isNaN(n) ? -Infinity : n;
    };
    var sortBy = function (th, col) {
      var ascending = th.getAttribute("aria-sort") !== "ascending";
      var numeric = th.getAttribute("data-type") === "num";
      each(headers, function (h) { h.removeAttribute("aria-sort"); });
      th.setAttribute("aria-sort", ascending ? "ascending" : "descending");
      var sorted = rows.slice();
      sorted.sort(function (a, b) {
        var x = key(a, col, numeric), y = key(b, col, numeric);
        var c = x < y ? -1 : (x > y ? 1 : 0);
        if (c === 0) { return Number(a.getAttribute("data-i")) - Number(b.getAttribute("data-i")); }
        return ascending ? c : -c;
      });
      sorted.forEach(function (r) { tbody.appendChild(r); });
    };
    each(headers, function (th, col) {
      if (!th.hasAttribute("data-type")) { return; }
      th.tabIndex = 0;
      th.addEventListener("click", function () { sortBy(th, col); });
      th.addEventListener("keydown", function (e) {
        if (e.key === "Enter" || e.key === " ") { e.preventDefault(); sortBy(th, col); }
      });
    });
  }

  // ---- Filter: every word must occur in the id, path, status or class.
  var bars = document.querySelectorAll("#timeline g.bar");
  var cards = document.querySelectorAll("#failures .failure");
  var haystack = {};
  rows.forEach(function (r) {
    var id = cell(r, "id");
    haystack[r.getAttribute("data-i")] = [
      id ? id.getAttribute("data-v") : "", id ? (id.getAttribute("title") || "") : "",
      cellText(r, "status"), cellText(r, "class")
    ].join(" ").toLowerCase();
  });
  var filterBox = document.getElementById("filter");
  var shown = document.getElementById("shown");
  var applyFilter = function () {
    var words = (filterBox ? filterBox.value : "").toLowerCase().split(/\s+/).filter(Boolean);
    var matches = function (i) {
      var text = haystack[i] || "";
      return words.every(function (w) { return text.indexOf(w) >= 0; });
    };
    var count = 0;
    rows.forEach(function (r) {
      var ok = matches(r.getAttribute("data-i"));
      r.hidden = !ok;
      if (ok) { count += 1; }
    });
    each(bars, function (g) { g.classList.toggle("dim", !matches(g.getAttribute("data-i"))); });
    var cardsShown = 0;
    each(cards, function (c) {
      c.hidden = !matches(c.getAttribute("data-i"));
      if (!c.hidden) { cardsShown += 1; }
    });
    // The heading counts the cards it heads: all of them, or those the filter shows.
    var failuresCount = document.getElementById("failures-count");
    if (failuresCount) {
      failuresCount.textContent = words.length ? cardsShown + " of " + cards.length : String(cards.length);
    }
    if (shown) { shown.textContent = count + " of " + rows.length + " scripts"; }
    document.body.setAttribute("data-shown", String(count));
  };
  if (filterBox) { filterBox.addEventListener("input", applyFilter); }
  // A status card filters by its status; a second click clears the filter.
  each(document.querySelectorAll(".card[data-status]"), function (card) {
    card.addEventListener("click", function () {
      if (!filterBox) { return; }
      var status = card.getAttribute("data-status");
      filterBox.value = filterBox.value === status ? "" : status;
      applyFilter();
    });
  });

  // ---- The per-script view.
  var panel = document.getElementById("detail");
  var text = function (tag, value, cls) {
    var el = document.createElement(tag);
    el.textContent = value;
    if (cls) { el.className = cls; }
    return el;
  };
  var select = function (i) {
    each(document.querySelectorAll(".sel"), function (el) { el.classList.remove("sel"); });
    if (i === null) { return; }
    if (byIndex[i]) { byIndex[i].classList.add("sel"); }
    each(bars, function (g) { if (g.getAttribute("data-i") === i) { g.classList.add("sel"); } });
  };
  var show = function (i) {
    var row = byIndex[i];
    if (!panel || !row) { return; }
    var d = data[Number(i)] || { attempts: [] };
    var id = cell(row, "id");
    var status = cellText(row, "status");
    panel.className = status;
    document.getElementById("detail-id").textContent = id ? id.getAttribute("data-v") : "";
    var facts = document.getElementById("detail-facts");
    facts.textContent = "";
    var fact = function (label, value) {
      if (!value || value === "\u2014") { return; }
      facts.appendChild(text("dt", label));
      facts.appendChild(text("dd", value, "detail-" + label.replace(/\W+/g, "-")));
    };
    fact("status", status + (cellText(row, "class") ? " (" + cellText(row, "class") + ")" : ""));
    fact("reason", d.reason);
    fact("path", id ? id.getAttribute("title") : "");
    fact("exit", cellText(row, "exit"));
    fact("wall time", cellText(row, "wall time"));
    fact("peak MiB", cellText(row, "peak MiB"));
    fact("compile", cellText(row, "compile"));
    var went = cell(row, "where the time went");
    fact("time went", went ? (went.getAttribute("title") || "—") : "—");
    fact("device", cellText(row, "used") + " (requested " + cellText(row, "requested") + ")");
    var body = document.querySelector("#detail-attempts tbody");
    body.textContent = "";
    (d.attempts || []).forEach(function (a) {
      var tr = document.createElement("tr");
      [a[0], a[1], a[2], a[3], a[4], a[5] || ""].forEach(function (v, k) {
        tr.appendChild(text("td", String(v), k === 3 || k === 4 ? "num" : ""));
      });
      body.appendChild(tr);
    });
    var links = document.getElementById("detail-links");
    links.textContent = "";
    var files = cell(row, "files");
    if (files) { each(files.querySelectorAll("a"), function (a) { links.appendChild(a.cloneNode(true)); }); }
    var card = document.getElementById("failure-" + i);
    if (card) {
      var to = text("a", "failure details");
      to.setAttribute("href", "#failure-" + i);
      to.addEventListener("click", function () { var det = card.querySelector("details"); if (det) { det.open = true; } });
      links.appendChild(to);
    }
    panel.hidden = false;
    panel.setAttribute("data-i", i);
    select(i);
  };
  var hide = function () { if (panel) { panel.hidden = true; } select(null); };
  if (table) {
    table.tBodies[0].addEventListener("click", function (e) {
      if (e.target.closest("a")) { return; }
      var tr = e.target.closest("tr");
      if (tr) { show(tr.getAttribute("data-i")); }
    });
    // Rows open from the keyboard too.
    rows.forEach(function (r) { r.tabIndex = 0; });
    table.tBodies[0].addEventListener("keydown", function (e) {
      var tr = e.target.closest("tr");
      if (tr && e.target === tr && (e.key === "Enter" || e.key === " ")) {
        e.preventDefault();
        show(tr.getAttribute("data-i"));
      }
    });
  }
  var svg = document.getElementById("timeline");
  if (svg) {
    svg.addEventListener("click", function (e) {
      var g = e.target.closest("g.bar");
      if (g) { show(g.getAttribute("data-i")); }
    });
  }
  var close = document.getElementById("detail-close");
  if (close) { close.addEventListener("click", hide); }
  document.addEventListener("keydown", function (e) { if (e.key === "Escape") { hide(); } });

  // ---- Labels: the page drew one only where the id fits its bar; a font wider
  // than planned must not make it spill, so measure, and drop any that would.
  var dropped = 0;
  each(document.querySelectorAll("#timeline text.bar-label"), function (t) {
    var rect = t.parentNode.querySelector("rect");
    var w = t.getComputedTextLength();
    t.setAttribute("data-w", w.toFixed(1));
    if (!rect || w + 8 > rect.width.baseVal.value) { t.parentNode.removeChild(t); dropped += 1; }
  });
  if (svg) { svg.setAttribute("data-dropped-labels", String(dropped)); }

  // ---- `#q=words` fills the filter; `#script=id` opens that script. `?` works too.
  var params = new URLSearchParams((location.hash || "").slice(1) || (location.search || "").slice(1));
  if (filterBox && params.get("q")) { filterBox.value = params.get("q"); }
  applyFilter();
  var wanted = params.get("script");
  if (wanted !== null) {
    rows.forEach(function (r) {
      var id = cell(r, "id");
      if (id && id.getAttribute("data-v") === wanted) { show(r.getAttribute("data-i")); }
    });
  }
  // How long the page took: its script, and everything up to its end since the
  // navigation started (parsing, layout). Read by people, never asserted.
  document.body.setAttribute("data-script-ms", (performance.now() - t0).toFixed(1));
  document.body.setAttribute("data-ready-ms", performance.now().toFixed(1));
  document.body.dataset.rendered = "ok";
})();
