// Interactive charts over the run's time axis (uPlot, vendored from npm: no build step).
//
// The server draws every chart as SVG (readable without JavaScript, kept for documents: the
// "SVG" link downloads it). Where a chart's figures are also in a table on the page, this
// script draws the same chart with uPlot from that table: hovering shows each candidate's
// value worded exactly as the table words it, clicking a legend entry hides or shows that
// candidate, dragging across the chart zooms into that time span ("Reset zoom" undoes it).
// Candidates keep the colours the server's charts give them (their place in the run).
(function () {
  "use strict";
  // charts.rs COLOURS (Okabe–Ito), in the same order.
  var COLOURS = ["#0072b2", "#d55e00", "#009e73", "#cc79a7", "#e69f00", "#56b4e9"];
  // The over-time charts and the column of the table each is drawn from.
  var OVER_TIME = [
    { id: "chart-tok-s-over-time", figure: "tok_s", axis: "output tok/s (all streams)" },
    { id: "chart-ttft-over-time", figure: "ttft", axis: "TTFT p50 (ms)" },
    { id: "chart-errors-over-time", figure: "errors", axis: "failed attempts" },
  ];

  function number(text) {
    var v = parseFloat(String(text).replace(/[^0-9.eE+-]/g, ""));
    return isFinite(v) ? v : null;
  }

  function download(figure, svgBox) {
    var link = document.createElement("a");
    link.textContent = "SVG";
    link.className = "chart-svg-download";
    link.setAttribute("download", figure.id + ".svg");
    link.href = "data:image/svg+xml;charset=utf-8," + encodeURIComponent(svgBox.innerHTML);
    return link;
  }

  function overTime(root) {
    var table = root.querySelector("table.over-time");
    if (!table || !window.uPlot) return;
    var rows = Array.prototype.slice.call(table.querySelectorAll("tbody tr[data-x]"));
    if (rows.length === 0) return;
    var names = [];
    var xs = [];
    rows.forEach(function (r) {
      var name = r.getAttribute("data-candidate");
      var x = number(r.getAttribute("data-x"));
      if (names.indexOf(name) < 0) names.push(name);
      if (x !== null && xs.indexOf(x) < 0) xs.push(x);
    });
    xs.sort(function (a, b) { return a - b; });
    OVER_TIME.forEach(function (spec) {
      var figure = root.querySelector("#" + spec.id);
      if (!figure || figure.getAttribute("data-interactive") === "on") return;
      var svgBox = figure.querySelector(".chart-svg");
      if (!svgBox) return;
      var data = [xs];
      var words = [];
      names.forEach(function (name) {
        var ys = xs.map(function () { return null; });
        var said = xs.map(function () { return null; });
        rows.forEach(function (r) {
          if (r.getAttribute("data-candidate") !== name) return;
          var cell = r.querySelector('[data-figure="' + spec.figure + '"]');
          var i = xs.indexOf(number(r.getAttribute("data-x")));
          if (!cell || i < 0) return;
          ys[i] = number(cell.textContent);
          said[i] = cell.textContent.trim() + " (" + r.getAttribute("data-interval") + ")";
        });
        data.push(ys);
        words.push(said);
      });
      var holder = document.createElement("div");
      holder.className = "uplot-holder";
      var width = Math.max(320, Math.min(svgBox.clientWidth || figure.clientWidth || 720, 960));
      var opts = {
        width: width,
        height: 260,
        scales: { x: { time: false } },
        cursor: { drag: { x: true, y: false } },
        axes: [
          { label: "seconds since the run's first measured request" },
          { label: spec.axis, size: 64 },
        ],
        series: [{ label: "s", value: function (u, v) { return v == null ? "—" : v + " s"; } }].concat(
          names.map(function (name, k) {
            return {
              label: name,
              stroke: COLOURS[k % COLOURS.length],
              width: 2,
              points: { show: true, size: 5 },
              value: function (u, v, si, i) {
                return i == null || words[si - 1][i] == null ? "—" : words[si - 1][i];
              },
            };
          })
        ),
      };
      var plot = new window.uPlot(opts, data, holder);
      holder.uplot = plot;
      var tools = document.createElement("p");
      tools.className = "chart-tools";
      var reset = document.createElement("button");
      reset.type = "button";
      reset.className = "secondary outline small";
      reset.textContent = "Reset zoom";
      reset.addEventListener("click", function () {
        plot.setScale("x", { min: xs[0], max: xs[xs.length - 1] });
      });
      tools.appendChild(reset);
      tools.appendChild(document.createTextNode(" Drag across the chart to zoom; click a name to hide or show it. "));
      tools.appendChild(download(figure, svgBox));
      svgBox.hidden = true;
      svgBox.parentNode.insertBefore(holder, svgBox);
      svgBox.parentNode.insertBefore(tools, svgBox);
      figure.setAttribute("data-interactive", "on");
    });
  }

  function enhance() {
    overTime(document);
  }

  if (document.readyState === "loading") {
    document.addEventListener("DOMContentLoaded", enhance);
  } else {
    enhance();
  }
  // A run's live part is swapped in while it runs: draw the new copy's charts.
  document.addEventListener("htmx:afterSettle", enhance);
})();
