/* Sortable tables: click a header cell (or focus it and press Enter or Space) of any table in the page
 * content to sort its rows by that column; click again to reverse. A cell that starts with a number
 * ("0.8225 [0.78, 0.86]", "-3", "1e-4") sorts by that number; in a column holding numbers, the other
 * cells ("control", "n/a", "") go last in either direction, in their current order. A column without
 * numbers sorts as text. The header's aria-sort shows the order (Material draws the arrow from it).
 * Dependency-free and fetches nothing, so the site works offline. */
(function () {
  "use strict";
  var LEADING_NUMBER = /^([+-]?(?:\d+(?:\.\d*)?|\.\d+)(?:e[+-]?\d+)?)/i;
  var collator = new Intl.Collator(undefined, { numeric: true, sensitivity: "base" });

  function sortKey(cell) {
    var text = cell ? cell.textContent.trim().replace(/\u2212/g, "-") : "";
    var match = LEADING_NUMBER.exec(text);
    return { num: match ? parseFloat(match[1]) : null, text: text };
  }

  function sortBy(table, header) {
    var ascending = header.getAttribute("aria-sort") !== "ascending";
    var body = table.tBodies[0];
    var rows = Array.prototype.map.call(body.rows, function (row, position) {
      return { row: row, key: sortKey(row.cells[header.cellIndex]), position: position };
    });
    var numeric = rows.some(function (r) { return r.key.num !== null; });
    rows.sort(function (a, b) {
      var x = a.key, y = b.key, order;
      if (numeric && (x.num === null || y.num === null)) {
        order = (x.num === null) - (y.num === null);  // non-numbers last, whatever the direction
        return order || a.position - b.position;
      }
      order = numeric ? x.num - y.num : collator.compare(x.text, y.text);
      return (ascending ? order : -order) || a.position - b.position;
    });
    rows.forEach(function (r) { body.appendChild(r.row); });
    Array.prototype.forEach.call(header.parentNode.cells, function (cell) { cell.removeAttribute("aria-sort"); });
    header.setAttribute("aria-sort", ascending ? "ascending" : "descending");
  }

  function makeSortable() {
    document.querySelectorAll(".md-typeset table").forEach(function (table) {
      if (table.dataset.sortable || !table.tHead || !table.tHead.rows.length || !table.tBodies.length) return;
      table.dataset.sortable = "true";
      var headers = table.tHead.rows[table.tHead.rows.length - 1].cells;
      Array.prototype.forEach.call(headers, function (header) {
        header.setAttribute("role", "columnheader");
        header.tabIndex = 0;
        header.addEventListener("click", function () { sortBy(table, header); });
        header.addEventListener("keydown", function (event) {
          if (event.key !== "Enter" && event.key !== " ") return;
          event.preventDefault();
          sortBy(table, header);
        });
      });
    });
  }

  if (typeof document$ !== "undefined") {
    document$.subscribe(makeSortable);  // Material: every page load, including instant navigation
  } else if (document.readyState === "loading") {
    document.addEventListener("DOMContentLoaded", makeSortable);
  } else {
    makeSortable();
  }
})();
