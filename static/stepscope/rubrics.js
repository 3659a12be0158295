// The trajectory page's rubric and episode-verdict panels (labeling/_rubric.html and
// labeling/_episode.html, loaded after the page). labeling.js binds the keys and sends
// them here as events:
//   b  next criterion (the current one is outlined; it stays current across saves)
//   m  cycle the current criterion's mark: met, not met, n/a
//   e  link (or unlink) the current step as the criterion's evidence; Alt+click a step
//      does the same
//   v  the episode verdict: its first question; Ctrl/Cmd+Enter saves, Esc goes back
// Every mark and link is a plain HTMX form post, so without this script they still save.
(function () {
  "use strict";

  const MARKS = ["met", "not_met", "na"];
  let currentId = null; // id of the current criterion row, stable across swaps

  function rows() {
    return Array.from(document.querySelectorAll("#rubric .rubric-row"));
  }

  function current() {
    return currentId ? document.getElementById(currentId) : null;
  }

  function setCurrent(row) {
    rows().forEach(function (each) { each.classList.remove("rubric-current"); });
    if (!row) return;
    currentId = row.id;
    row.classList.add("rubric-current");
    row.scrollIntoView({ block: "nearest" });
  }

  function say(message) {
    const box = document.getElementById("rubric-error");
    if (!box) return;
    box.innerHTML = "";
    const p = document.createElement("p");
    p.className = "flash-message";
    p.textContent = message;
    box.appendChild(p);
  }

  function next() {
    const all = rows();
    if (!all.length) return;
    const at = all.indexOf(current());
    setCurrent(all[(at + 1) % all.length]);
  }

  function mark() {
    if (!current()) next();
    const row = current();
    if (!row) return;
    const at = MARKS.indexOf(row.dataset.mark || "");
    const button = row.querySelector('[data-mark-button="' + MARKS[(at + 1) % MARKS.length] + '"]');
    if (button) button.click();
  }

  function evidence(index) {
    if (!current()) next();
    const row = current();
    if (!row || index === undefined || index === null) return;
    const form = row.querySelector("form.rubric-link");
    if (!form) {
      say("Mark the criterion first (m), then link its evidence.");
      return;
    }
    form.querySelector("input[name=toggle_step]").value = index;
    form.requestSubmit();
  }

  document.addEventListener("stepscope:rubric", function (event) {
    const action = event.detail.action;
    if (action === "next") next();
    else if (action === "mark") mark();
    else if (action === "evidence") evidence(event.detail.index);
  });

  // Alt+click on a step links it to the current criterion (and makes it current).
  document.addEventListener("click", function (event) {
    if (!event.altKey || !document.querySelector("#rubric .rubric-row")) return;
    const row = event.target instanceof Element ? event.target.closest("[data-row]") : null;
    if (!row) return;
    event.preventDefault();
    evidence(row.dataset.index);
  }, true);

  // Clicking a criterion makes it current.
  document.addEventListener("click", function (event) {
    const row = event.target instanceof Element ? event.target.closest("#rubric .rubric-row") : null;
    if (row) setCurrent(row);
  });

  document.addEventListener("htmx:afterSwap", function (event) {
    if (event.target && event.target.id === "rubric" || document.getElementById("rubric")) {
      const row = current();
      if (row) row.classList.add("rubric-current");
    }
  });

  document.addEventListener("stepscope:episode", function () {
    const first = document.querySelector("#episode select:not([disabled])");
    if (!first) return;
    first.scrollIntoView({ block: "center" });
    first.focus();
  });

  document.addEventListener("keydown", function (event) {
    const target = event.target;
    const form = target instanceof Element ? target.closest(".episode-form") : null;
    if (!form) return;
    if (event.key === "Enter" && (event.ctrlKey || event.metaKey)) {
      event.preventDefault();
      form.requestSubmit();
    } else if (event.key === "Escape" && target instanceof HTMLElement) {
      event.preventDefault();
      target.blur();
    }
  });
})();
