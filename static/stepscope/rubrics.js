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

  // Key presses post one after another, each reading the panel the one before left, so
  // "m m" moves met -> not met however fast it is typed. The panel is replaced with the
  // answer (an error goes to the panel's message box).
  let chain = Promise.resolve();

  function post(pick) {
    chain = chain.then(function () {
      const picked = pick();
      if (!picked) return null;
      const data = new FormData(picked.form);
      Object.keys(picked.values).forEach(function (name) { data.set(name, picked.values[name]); });
      return fetch(picked.form.action, {
        method: "POST", body: data, credentials: "same-origin", headers: { "HX-Request": "true" },
      }).then(function (response) {
        return response.text().then(function (text) {
          const box = document.createElement("template");
          box.innerHTML = text.trim();
          if (!response.ok) {
            say(box.content.textContent.trim() || "The mark was not saved (" + response.status + ").");
            return;
          }
          const panel = box.content.firstElementChild;
          const old = document.getElementById("rubric");
          if (!panel || !old) return;
          old.replaceWith(panel);
          if (window.htmx) window.htmx.process(panel);
          const row = current();
          if (row) row.classList.add("rubric-current");
        });
      }).catch(function () { say("The mark was not saved: the server did not answer."); });
    });
  }

  function mark() {
    if (!current()) next();
    post(function () {
      const row = current();
      const form = row ? row.querySelector("form.rubric-marks") : null;
      if (!form) return null;
      const at = MARKS.indexOf(row.dataset.mark || "");
      return { form: form, values: { mark: MARKS[(at + 1) % MARKS.length] } };
    });
  }

  function evidence(index) {
    if (!current()) next();
    if (index === undefined || index === null) return;
    post(function () {
      const row = current();
      if (!row) return null;
      const form = row.querySelector("form.rubric-link");
      if (!form) {
        say("Mark the criterion first (m), then link its evidence.");
        return null;
      }
      return { form: form, values: { toggle_step: index } };
    });
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

  // A mark saved with the mouse (the panel's own HTMX forms) keeps the current criterion.
  document.addEventListener("htmx:afterSettle", function () {
    const row = current();
    if (row) row.classList.add("rubric-current");
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
