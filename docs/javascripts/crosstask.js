/* The home page's cross-task table: narrow it to one level or one dataset, and recompute each row's mean
 * normalised rank over the boards left, under the page's own rule: the mean over the boards shown that the
 * row has a result on, with how many that is and which it lacks; never for a control. Reads what the
 * generated table carries (harness/leaderboard/render_crosstask.py): a.vb-board heads with data-level,
 * data-dataset and data-label; a.vb-nr cells with the exact normalised rank in data-nr; the name's
 * data-control; the spans marking the mean, coverage and missing columns. With every board shown, the
 * generated text is put back.
 * Dependency-free and fetches nothing, so the site works offline. */
(function () {
  "use strict";
  var NONE = "\u2014";
  var LISTED = 3;  // name at most this many missing boards, as the generated table does

  function option(value, text) {
    var element = document.createElement("option");
    element.value = value;
    element.textContent = text;
    return element;
  }

  function picker(label, values, name) {
    var wrapper = document.createElement("label");
    wrapper.textContent = label + " ";
    var select = document.createElement("select");
    select.name = name;
    select.appendChild(option("", "all"));
    values.forEach(function (value) { select.appendChild(option(value, value)); });
    wrapper.appendChild(select);
    return { wrapper: wrapper, select: select };
  }

  function unique(values) {
    return values.filter(function (value, i) { return values.indexOf(value) === i; });
  }

  function setup(container) {
    var table = container.querySelector("table");
    if (!table || table.dataset.filterable || !table.tHead) return;
    table.dataset.filterable = "true";
    var head = table.tHead.rows[table.tHead.rows.length - 1];
    var columns = [], roles = {};
    Array.prototype.forEach.call(head.cells, function (th, index) {
      var board = th.querySelector("a.vb-board");
      if (board) columns.push({ index: index, level: board.dataset.level, dataset: board.dataset.dataset,
                                label: board.dataset.label });
      var role = th.querySelector("[data-role]");
      if (role) roles[role.dataset.role] = index;
    });
    var rows = Array.prototype.slice.call(table.tBodies[0].rows);
    rows.forEach(function (row) {
      row.dataset.mean = row.cells[roles.mean].textContent;
      row.dataset.coverage = row.cells[roles.coverage].textContent;
      row.dataset.why = row.cells[roles.why].textContent;
    });

    var controls = document.createElement("div");
    controls.className = "vb-controls";
    var level = picker("Level", unique(columns.map(function (c) { return c.level; })), "level");
    var dataset = picker("Dataset", unique(columns.map(function (c) { return c.dataset; })).sort(), "dataset");
    var status = document.createElement("output");
    controls.appendChild(level.wrapper);
    controls.appendChild(dataset.wrapper);
    controls.appendChild(status);
    container.insertBefore(controls, container.firstChild);

    function apply() {
      var shown = columns.filter(function (c) {
        return (!level.select.value || c.level === level.select.value) &&
               (!dataset.select.value || c.dataset === dataset.select.value);
      });
      var all = shown.length === columns.length;
      var visible = {};
      shown.forEach(function (c) { visible[c.index] = true; });
      [head].concat(rows).forEach(function (row) {
        columns.forEach(function (c) { row.cells[c.index].style.display = visible[c.index] ? "" : "none"; });
      });
      rows.forEach(function (row) {
        var values = [], missing = [];
        shown.forEach(function (c) {
          var cell = row.cells[c.index].querySelector("a[data-nr]");
          if (cell) values.push(parseFloat(cell.dataset.nr)); else missing.push(c.label);
        });
        row.style.display = all || values.length ? "" : "none";
        if (all) {
          row.cells[roles.mean].textContent = row.dataset.mean;
          row.cells[roles.coverage].textContent = row.dataset.coverage;
          row.cells[roles.why].textContent = row.dataset.why;
          return;
        }
        var named = row.cells[0].querySelector("[data-control]");
        var control = named.dataset.control === "true";
        var mean = NONE, why = "";
        if (control) {
          why = (named.dataset.baseline === "true" ? "baseline" : "control") + ": never aggregated";
        } else {
          if (values.length) {
            mean = (values.reduce(function (a, b) { return a + b; }, 0) / values.length).toFixed(2);
          }
          if (missing.length) {
            why = "no result on " + (missing.length <= LISTED ? missing.join(", ")
                                     : missing.length + " of " + shown.length + " boards");
          }
        }
        row.cells[roles.mean].textContent = mean;
        row.cells[roles.coverage].textContent = values.length + " of " + shown.length;
        row.cells[roles.why].textContent = why;
      });
      status.textContent = all ? "all " + columns.length + " boards"
        : shown.length + " of " + columns.length + " boards shown; means over these only";
    }

    level.select.addEventListener("change", apply);
    dataset.select.addEventListener("change", apply);
    apply();
  }

  function setupAll() { document.querySelectorAll(".vb-crosstask").forEach(setup); }

  if (typeof document$ !== "undefined") {
    document$.subscribe(setupAll);  // Material: every page load, including instant navigation
  } else if (document.readyState === "loading") {
    document.addEventListener("DOMContentLoaded", setupAll);
  } else {
    setupAll();
  }
})();
