/* The compare page: pick rows A and B; the table shows every board both are on and nothing else, with a
 * pair listed the other way round (B, A) turned to read A − B: its name and value columns swapped and its
 * difference and interval negated. The verdict names the better row, so it reads the same either way. A line
 * above the table counts the verdicts. The chosen pair is kept in the address (?a=…&b=…), so a link or a
 * reload shows the same two rows. Reads what the generated table carries
 * (harness/leaderboard/render_compare.py): a.vb-pair with data-a, data-b and data-winner in the first cell.
 * Dependency-free and fetches nothing, so the site works offline. */
(function () {
  "use strict";
  var A = 2, B = 3, VALUE_A = 4, VALUE_B = 5, DIFFERENCE = 6;  // column positions
  var SIGNED = /^([+-]\d+\.\d+)(?: \[([+-]\d+\.\d+), ([+-]\d+\.\d+)\])?$/;

  function negate(text) {
    var negated = (text.charAt(0) === "-" ? "+" : "-") + text.slice(1);
    return /^[+-]0\.0+$/.test(text) ? "+" + text.slice(1) : negated;
  }

  function flipDifference(text) {
    var match = SIGNED.exec(text.trim());
    if (!match) return text;
    var flipped = negate(match[1]);
    return match[2] ? flipped + " [" + negate(match[3]) + ", " + negate(match[2]) + "]" : flipped;
  }

  function select(name, labels, chosen) {
    var wrapper = document.createElement("label");
    wrapper.textContent = name + " ";
    var element = document.createElement("select");
    element.name = name;
    labels.forEach(function (label) {
      var item = document.createElement("option");
      item.value = item.textContent = label;
      element.appendChild(item);
    });
    element.value = chosen;
    wrapper.appendChild(element);
    return { wrapper: wrapper, select: element };
  }

  function setup(container) {
    var table = container.querySelector("table");
    if (!table || table.dataset.comparable) return;
    table.dataset.comparable = "true";
    var rows = Array.prototype.slice.call(table.tBodies[0].rows).map(function (row) {
      var pair = row.cells[0].querySelector("a.vb-pair");
      return { row: row, a: pair.dataset.a, b: pair.dataset.b, winner: pair.dataset.winner,
               original: Array.prototype.map.call(row.cells, function (c) { return c.innerHTML; }) };
    });
    var labels = [];
    rows.forEach(function (r) { [r.a, r.b].forEach(function (l) { if (labels.indexOf(l) < 0) labels.push(l); }); });
    labels.sort();
    // Start on the first pair the boards actually test (two pretrained rows), else the first pair listed.
    var tested = rows.filter(function (r) { return r.winner === "a" || r.winner === "b" || r.winner === "tie"; });
    var first = tested.length ? tested[0] : rows.length ? rows[0] : { a: labels[0], b: labels[1] };
    var asked = new URLSearchParams(window.location.search);
    if (labels.indexOf(asked.get("a")) >= 0 && labels.indexOf(asked.get("b")) >= 0) {
      first = { a: asked.get("a"), b: asked.get("b") };
    }
    var controls = document.createElement("div");
    controls.className = "vb-controls";
    var pickA = select("A", labels, first.a), pickB = select("B", labels, first.b);
    var summary = document.createElement("output");
    controls.appendChild(pickA.wrapper);
    controls.appendChild(pickB.wrapper);
    controls.appendChild(summary);
    container.insertBefore(controls, container.firstChild);

    function apply() {
      var chosenA = pickA.select.value, chosenB = pickB.select.value;
      var counts = { a: 0, b: 0, tie: 0, other: 0 };
      rows.forEach(function (r) {
        var straight = r.a === chosenA && r.b === chosenB, flipped = r.a === chosenB && r.b === chosenA;
        r.row.style.display = straight || flipped ? "" : "none";
        r.original.forEach(function (html, i) { r.row.cells[i].innerHTML = html; });
        if (!straight && !flipped) return;
        var winner = r.winner;
        if (flipped) {
          r.row.cells[A].innerHTML = r.original[B];
          r.row.cells[B].innerHTML = r.original[A];
          r.row.cells[VALUE_A].innerHTML = r.original[VALUE_B];
          r.row.cells[VALUE_B].innerHTML = r.original[VALUE_A];
          r.row.cells[DIFFERENCE].textContent = flipDifference(r.row.cells[DIFFERENCE].textContent);
          winner = { a: "b", b: "a" }[winner] || winner;
        }
        counts[winner === "a" || winner === "b" || winner === "tie" ? winner : "other"] += 1;
      });
      var boards = counts.a + counts.b + counts.tie + counts.other;
      summary.textContent = chosenA === chosenB ? "choose two different rows"
        : boards === 0 ? "no board holds both"
        : boards + (boards === 1 ? " board" : " boards") + ": " + chosenA + " better on " + counts.a + ", " +
          chosenB + " better on " + counts.b + ", tied on " + counts.tie + ", not tested on " + counts.other;
    }

    function remember() {
      // replaceState: choosing rows is not navigation, so Back still leaves the page
      var address = new URL(window.location.href);
      address.searchParams.set("a", pickA.select.value);
      address.searchParams.set("b", pickB.select.value);
      window.history.replaceState(window.history.state, "", address.toString());
    }

    pickA.select.addEventListener("change", function () { apply(); remember(); });
    pickB.select.addEventListener("change", function () { apply(); remember(); });
    apply();
  }

  function setupAll() { document.querySelectorAll(".vb-compare").forEach(setup); }

  if (typeof document$ !== "undefined") {
    document$.subscribe(setupAll);  // Material: every page load, including instant navigation
  } else if (document.readyState === "loading") {
    document.addEventListener("DOMContentLoaded", setupAll);
  } else {
    setupAll();
  }
})();
