// Interactive charts over the run's time axis (uPlot, vendored from npm: no build step).
//
// The server draws every chart as SVG (readable without JavaScript, kept for documents: the
// "SVG" link downloads it). Where a chart's figures are also in a table on the page, this
// script draws the same chart with uPlot from that table: hovering shows each candidate's
// value worded exactly as the table words it, clicking a legend entry hides or shows that
// candidate, dragging across the chart zooms into that time span ("Reset zoom" undoes it).
// Candidates keep the colours the server gives them (`data-colour`: one colour per candidate on
// every page, settled by domain/src/palette.rs), never their place in the table.
(function () {
  "use strict";
  // Only when a row names no colour (a page cached before colours were kept): the palette's first.
  var FALLBACK = "#0072b2";
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

  // A scale's range with a tenth of the span (or of the value, when all are equal) either side.
  function padded(u, min, max) {
    var pad = (max - min) * 0.1 || Math.abs(max) * 0.1 || 1;
    return [min - pad, max + pad];
  }

  // The chart's width: its figure's own width (the SVG's box is hidden once drawn), at most
  // 960 px, and never wider than the figure — at a phone's width the chart shrinks with it
  // rather than sticking out (uPlot draws at a fixed pixel size).
  var MIN_WIDTH = 200;
  function widthOf(figure, svgBox) {
    var style = window.getComputedStyle(figure);
    var box = figure.clientWidth
      ? figure.clientWidth - (parseFloat(style.paddingLeft) || 0) - (parseFloat(style.paddingRight) || 0)
      : (svgBox && svgBox.clientWidth) || 720;
    return Math.max(MIN_WIDTH, Math.min(box, 960));
  }

  // Every drawn chart follows its figure's width when the window is resized.
  var drawn = [];
  function follow(plot, figure, height) {
    drawn.push({ plot: plot, figure: figure, height: height });
  }
  var pending = null;
  window.addEventListener("resize", function () {
    if (pending) return;
    pending = window.requestAnimationFrame(function () {
      pending = null;
      drawn.forEach(function (d) {
        if (!d.figure.isConnected) return;
        var w = widthOf(d.figure, null);
        if (w !== d.plot.width) d.plot.setSize({ width: w, height: d.height });
      });
    });
  });

  // A dash pattern "8 4" as uPlot wants it ([8, 4]); none for a solid line.
  function dashOf(text) {
    var parts = String(text || "").trim().split(/\s+/).map(Number).filter(function (v) { return v > 0; });
    return parts.length === 2 ? parts : undefined;
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
    var colours = [];
    var xs = [];
    rows.forEach(function (r) {
      var name = r.getAttribute("data-candidate");
      var x = number(r.getAttribute("data-x"));
      if (names.indexOf(name) < 0) {
        names.push(name);
        colours.push(r.getAttribute("data-colour") || FALLBACK);
      }
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
      var width = widthOf(figure, svgBox);
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
              stroke: colours[k],
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
      follow(plot, figure, 260);
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

  // The scorecard's charts, each drawn from the table of its figures under it (`table.chart-data`):
  // hovering a point shows the figure as that table words it; clicking a name hides or shows
  // that candidate; "SVG" downloads the server's drawing.
  function dataCharts(root) {
    if (!window.uPlot) return;
    Array.prototype.forEach.call(root.querySelectorAll("table.chart-data[data-chart]"), function (table) {
      var figure = document.getElementById(table.getAttribute("data-chart"));
      if (!figure || figure.getAttribute("data-interactive") === "on") return;
      var svgBox = figure.querySelector(".chart-svg");
      if (!svgBox) return;
      var rows = Array.prototype.slice.call(table.querySelectorAll("tbody tr[data-series]"));
      if (rows.length === 0) return;
      var names = [];
      var colours = [];
      var dashes = [];
      var xs = [];
      rows.forEach(function (r) {
        var name = r.getAttribute("data-series");
        if (names.indexOf(name) < 0) {
          names.push(name);
          // The line as drawn: the candidate's colour, or a shade and dash of it for its later
          // prompt sizes (domain/src/palette.rs: shade, dash).
          colours.push(r.getAttribute("data-stroke") || r.getAttribute("data-colour") || FALLBACK);
          dashes.push(dashOf(r.getAttribute("data-dash")));
        }
        var x = number(r.getAttribute("data-x"));
        if (x !== null && xs.indexOf(x) < 0) xs.push(x);
      });
      xs.sort(function (a, b) { return a - b; });
      var data = [xs];
      var words = [];
      names.forEach(function (name) {
        var ys = xs.map(function () { return null; });
        var said = xs.map(function () { return null; });
        rows.forEach(function (r) {
          if (r.getAttribute("data-series") !== name) return;
          var i = xs.indexOf(number(r.getAttribute("data-x")));
          if (i < 0) return;
          ys[i] = number(r.getAttribute("data-y"));
          var cells = r.querySelectorAll("td");
          said[i] = r.querySelector("[data-figure]").textContent.trim() +
            (cells.length > 1 ? " at " + cells[0].textContent.trim() : "");
        });
        data.push(ys);
        words.push(said);
      });
      var log2 = table.getAttribute("data-x-log2") === "true";
      var lines = table.getAttribute("data-lines") === "true";
      var holder = document.createElement("div");
      holder.className = "uplot-holder";
      var width = widthOf(figure, svgBox);
      var plot = new window.uPlot({
        width: width,
        height: 300,
        // A scatter's points keep a margin from the edges (uPlot's own range puts the extremes
        // on the frame, where a dot is half hidden and hard to hover).
        scales: {
          x: log2 ? { time: false, distr: 3, log: 2 } : lines ? { time: false } : { time: false, range: padded },
          y: lines ? {} : { range: padded },
        },
        cursor: { drag: { x: false, y: false } },
        axes: [
          { label: table.getAttribute("data-x-label") },
          { label: table.getAttribute("data-y-label"), size: 64 },
        ],
        series: [{ label: table.getAttribute("data-x-label"), value: function (u, v) { return v == null ? "—" : String(v); } }].concat(
          names.map(function (name, k) {
            return {
              label: name,
              stroke: colours[k],
              dash: dashes[k],
              width: lines ? 2 : 0,
              spanGaps: true,
              paths: lines ? undefined : function () { return null; },
              points: { show: true, size: lines ? 6 : 11, fill: colours[k] },
              value: function (u, v, si, i) {
                return i == null || words[si - 1][i] == null ? "—" : words[si - 1][i];
              },
            };
          })
        ),
      }, data, holder);
      holder.uplot = plot;
      follow(plot, figure, 300);
      var tools = document.createElement("p");
      tools.className = "chart-tools";
      tools.appendChild(document.createTextNode("Hover for each candidate's figure as the table words it; click a name to hide or show it. "));
      tools.appendChild(download(figure, svgBox));
      svgBox.hidden = true;
      svgBox.parentNode.insertBefore(holder, svgBox);
      svgBox.parentNode.insertBefore(tools, svgBox);
      figure.setAttribute("data-interactive", "on");
    });
  }

  function enhance() {
    overTime(document);
    dataCharts(document);
  }

  if (document.readyState === "loading") {
    document.addEventListener("DOMContentLoaded", enhance);
  } else {
    enhance();
  }
  // A run's live part is swapped in while it runs: draw the new copy's charts.
  document.addEventListener("htmx:afterSettle", enhance);
})();
