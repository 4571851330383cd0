// The labelling page, keyboard-first (docs/review.md). The page as served works without this
// script; with it, a verdict key saves the label in the background and shows the next item at
// once from the items the server put in the page (`#review-upcoming`), refilled as they run low.
// Model output and case text are only ever set as textContent, never as markup.
(function () {
  "use strict";
  var root = document.getElementById("review");
  var data = document.getElementById("review-upcoming");
  if (!root || !data) return;
  var form = document.getElementById("label-form");
  var mayEdit = root.dataset.mayEdit === "true";
  var scope = root.dataset.scope;
  var scoreMax = parseFloat(root.dataset.scoreMax);
  var upcoming = [];
  try { upcoming = JSON.parse(data.textContent) || []; } catch (e) { upcoming = []; }
  var current = parseInt(root.dataset.item, 10);
  var seen = {}; // every item id shown or held, so a refill never brings one back
  seen[current] = true;
  upcoming.forEach(function (v) { seen[v.item.id] = true; });
  var refilling = false;
  var exhausted = false;
  // A key pressed while the held items ran out and a refill was under way: when it was pressed.
  var waiting = null;
  // Timings of the items shown by key, for whoever reads them (the browser test does):
  // ms from the key's event to the next item in the page, and to the frame that shows it.
  window.reviewTimings = [];

  var REASONS = {
    flip: "repetitions disagree",
    grader_disagreement: "graders disagree",
    judge_vs_deterministic: "judge disagrees with a deterministic grader",
    near_pass_mark: "judge score next to the pass mark",
    near_threshold_field: "one extraction field decides it",
    manual: "added by hand"
  };

  function csrf() {
    var field = document.querySelector("input[name=_csrf]");
    return field ? field.value : "";
  }

  function text(id, value) {
    var el = document.getElementById(id);
    if (el) el.textContent = value;
  }

  function list(id, items, line) {
    var el = document.getElementById(id);
    if (!el) return;
    while (el.firstChild) el.removeChild(el.firstChild);
    items.forEach(function (x) {
      var li = document.createElement("li");
      li.textContent = line(x);
      el.appendChild(li);
    });
  }

  function show(view) {
    var item = view.item;
    current = item.id;
    root.dataset.item = String(item.id);
    text("item-id", "#" + item.id);
    var run = document.getElementById("item-run");
    if (run) {
      run.textContent = "#" + item.run_id + " " + view.run_name;
      run.setAttribute("href", "/runs/" + item.run_id + "/review");
    }
    text("item-case", item.case_id);
    text("item-repetition", String(item.repetition));
    text("item-candidate", view.candidate);
    text("item-status", item.status);
    text("item-reasons", "Why: " + item.reasons.map(function (r) { return REASONS[r] || r; }).join("; ") +
      (item.detail ? " (" + item.detail + ")" : ""));
    var input = document.getElementById("item-input");
    if (input) {
      while (input.firstChild) input.removeChild(input.firstChild);
      view.input.forEach(function (m) {
        var role = document.createElement("p");
        role.className = "muted role";
        role.textContent = m[0];
        var pre = document.createElement("pre");
        pre.className = "wrap";
        pre.textContent = m[1];
        input.appendChild(role);
        input.appendChild(pre);
      });
    }
    text("item-expected", view.expected === null ? "(none)" : view.expected);
    text("item-answer", view.answer === null ? "(no answer)" : view.answer);
    text("item-error", view.error || "");
    list("item-grades", view.grades, function (g) {
      return g.grader + ": " + (g.passed ? "passed" : "failed") + " — " + g.reason;
    });
    list("item-labels", view.labels, function (l) {
      return l.labeller + ": " + l.verdict + (l.score !== null ? ", score " + l.score : "") +
        (l.corrected_expected !== null ? ", corrected the expected answer" : "") + (l.note ? " — " + l.note : "");
    });
    var disagree = document.getElementById("item-disagreement");
    if (disagree) disagree.hidden = !view.disagreement;
    ["label-form", "skip-form", "claim-form"].forEach(function (id) {
      var f = document.getElementById(id);
      if (f) f.setAttribute("action", f.getAttribute("action").replace(/\/review\/items\/\d+\//, "/review/items/" + item.id + "/"));
    });
    if (form) form.reset();
    history.replaceState(null, "", "/review/items/" + item.id + (scope ? "?run=" + scope : ""));
  }

  function done() {
    ["label-form", "skip-form", "claim-form"].forEach(function (id) {
      var f = document.getElementById(id);
      if (f) f.hidden = true;
    });
    var end = document.getElementById("queue-done");
    if (end) end.hidden = false;
  }

  function status(message) {
    var el = document.getElementById("review-status");
    if (!el) {
      el = document.createElement("p");
      el.id = "review-status";
      el.setAttribute("role", "status");
      root.insertBefore(el, root.firstChild);
    }
    el.textContent = message;
  }

  function refill() {
    if (refilling || exhausted || upcoming.length >= 5) return;
    refilling = true;
    var last = upcoming.length ? upcoming[upcoming.length - 1].item.id : current;
    var url = "/api/v1/review/items?limit=5&after=" + last + (scope ? "&run=" + scope : "");
    fetch(url, { credentials: "same-origin" })
      .then(function (r) { return r.ok ? r.json() : []; })
      .then(function (views) {
        var fresh = views.filter(function (v) { return !seen[v.item.id]; });
        fresh.forEach(function (v) { seen[v.item.id] = true; upcoming.push(v); });
        if (!fresh.length) exhausted = true;
      })
      .catch(function () { exhausted = true; })
      .then(function () {
        refilling = false;
        if (waiting !== null) {
          var startedAt = waiting;
          waiting = null;
          next(startedAt);
        } else {
          refill();
        }
      });
  }

  function post(path, body) {
    var id = current;
    return fetch("/api/v1/review/items/" + id + "/" + path, {
      method: "POST",
      credentials: "same-origin",
      headers: { "Content-Type": "application/json", "X-CSRF-Token": csrf() },
      body: JSON.stringify(body || {})
    }).then(function (r) {
      if (!r.ok) {
        return r.json().then(function (p) {
          status("Item #" + id + " was not saved: " + (p.detail || p.title || r.status) + " Open it again from the queue.");
        }, function () { status("Item #" + id + " was not saved (" + r.status + ")."); });
      }
    }, function () { status("Item #" + id + " was not saved: the server did not answer."); });
  }

  function next(startedAt) {
    var view = upcoming.shift();
    if (!view) {
      if (exhausted) { done(); return; }
      // Held items ran out before the refill came back: show the next one when it does.
      waiting = startedAt;
      status("Loading the next item…");
      refill();
      return;
    }
    show(view);
    var inPage = performance.now() - startedAt;
    requestAnimationFrame(function () {
      window.reviewTimings.push({ item: view.item.id, in_page_ms: inPage, painted_ms: performance.now() - startedAt });
    });
    refill();
  }

  function field(name) {
    var el = form ? form.elements[name] : null;
    return el && el.value.trim() ? el.value : null;
  }

  function label(verdict, startedAt) {
    post("label", { verdict: verdict, score: field("score"), corrected_expected: field("corrected_expected"), note: field("note") });
    next(startedAt);
  }

  document.addEventListener("keydown", function (e) {
    if (!mayEdit || e.ctrlKey || e.metaKey || e.altKey) return;
    var tag = (e.target && e.target.tagName) || "";
    if (tag === "INPUT" || tag === "TEXTAREA" || tag === "SELECT") return;
    var end = document.getElementById("queue-done");
    if (end && !end.hidden) return;
    var key = e.key.toLowerCase();
    if (key === "p" || key === "f") {
      e.preventDefault();
      label(key === "p" ? "pass" : "fail", e.timeStamp);
    } else if (key === "s") {
      e.preventDefault();
      post("skip");
      next(e.timeStamp);
    } else if (/^[0-5]$/.test(key) && form && parseFloat(key) <= scoreMax) {
      e.preventDefault();
      form.elements.score.value = key;
    }
  });

  if (form) {
    // The buttons label the same way as the keys when the script runs.
    form.addEventListener("submit", function (e) {
      var verdict = e.submitter && e.submitter.value;
      if (verdict !== "pass" && verdict !== "fail") return;
      e.preventDefault();
      label(verdict, performance.now());
    });
  }
  refill();
})();
