/* Stepscope labeling keys.

   The page works without this script (every button is a form, every link a real href);
   the script adds the keyboard, a highlighted current step, moving on after a label, and
   error messages shown in the page. Labels are saved by the forms' own HTMX posts: a key
   press only clicks the button the mouse would.

     j / k        next / previous step          t / r / c   tags / rationale / correction
     schema keys  label the current step        u           undo the last label or span
     f            mark the first error          h           the step's label history
     s            submit the trajectory         n           next item in the queue
     d            the decisive failure: the current step and its agent (decisive.js)
     b / m / e    rubric: next criterion / cycle its mark / the current step as evidence
     v            the episode verdict (rubrics.js)
     g            guidelines                    ?           shortcuts
     Shift+j / Shift+k  select a run of steps; a span value's key then labels it
     Esc          close what is open            Ctrl+Enter  save an open editor
*/
(function () {
  "use strict";

  const root = document.querySelector("[data-labeling]");
  if (!root) return;

  const review = root.hasAttribute("data-review");
  let currentId = null; // id of the current row element, stable across swaps
  let since = performance.now(); // when the current step became current (time spent)
  let pending = null; // a move waiting for the next page of steps: {count, advance}

  // The sticky labeling bar's height, for the steps' scroll margin (stepscope.css): a
  // step scrolled to by "go to step" or a #step link lands below the bar, however many
  // lines the bar wraps to (three on a phone).
  const bar = document.getElementById("labeling-bar");
  if (bar && window.ResizeObserver) {
    new ResizeObserver(function () {
      document.documentElement.style.setProperty("--labeling-bar-height", bar.offsetHeight + "px");
    }).observe(bar);
  }

  // --- Rows and the current step -------------------------------------------------------

  function rows() {
    // Steps hidden by the span tree or an agent filter (tree.js) are not walked.
    return Array.from(root.querySelectorAll("[data-row]")).filter(function (row) { return !row.hidden; });
  }

  function current() {
    return currentId ? document.getElementById(currentId) : null;
  }

  function setCurrent(row, scroll, keepClock) {
    const before = current();
    if (before) {
      before.classList.remove("is-current");
      before.removeAttribute("aria-current");
    }
    if (!row) {
      currentId = null;
      return;
    }
    currentId = row.id;
    row.classList.add("is-current");
    row.setAttribute("aria-current", "step");
    if (!keepClock) since = performance.now();
    if (scroll !== false) row.scrollIntoView({ block: "center", behavior: "auto" });
  }

  function loadMore() {
    const more = document.getElementById("steps-more");
    if (more && window.htmx) window.htmx.trigger(more, "stepscope:more");
    return Boolean(more);
  }

  function move(delta) {
    const all = rows();
    if (!all.length) return;
    const here = current();
    let index = here ? all.indexOf(here) + delta : delta > 0 ? 0 : all.length - 1;
    if (index >= all.length) {
      // Past the last loaded step: load the next page and move once it is in.
      if (loadMore()) pending = { count: all.length, advance: false };
      else focusFinish();
      return;
    }
    index = Math.max(0, index);
    setCurrent(all[index]);
  }

  function isDone(row) {
    return row.classList.contains("is-labelled") || row.classList.contains("after-first-error");
  }

  // After a label: the next step that still needs one, else the finish panel.
  function advance(fromRow) {
    const all = rows();
    const start = fromRow ? all.indexOf(fromRow) + 1 : 0;
    for (let i = start; i < all.length; i += 1) {
      if (!isDone(all[i])) {
        setCurrent(all[i]);
        return;
      }
    }
    if (loadMore()) {
      pending = { count: all.length, advance: true };
      return;
    }
    const firstOpen = all.find(function (row) { return !isDone(row); });
    if (firstOpen) setCurrent(firstOpen);
    else focusFinish();
  }

  // The decisive-failure panel takes the current step (decisive.js fills it in).
  function decisive() {
    const row = current();
    const form = document.getElementById("decisive-form");
    if (!row || !form) return false;
    form.dispatchEvent(new CustomEvent("stepscope:decisive", { bubbles: true, detail: { index: row.dataset.index } }));
    return true;
  }

  // The rubric and episode-verdict panels (rubrics.js acts on these events).
  function rubric(action) {
    if (!document.querySelector("#rubric .rubric-row")) return false;
    const row = current();
    document.dispatchEvent(new CustomEvent("stepscope:rubric", { detail: { action: action, index: row ? row.dataset.index : null } }));
    return true;
  }

  function episode() {
    if (!document.querySelector("#episode select:not([disabled])")) return false;
    document.dispatchEvent(new CustomEvent("stepscope:episode"));
    return true;
  }

  function focusFinish() {
    const submit = document.getElementById("finish-submit");
    if (!submit) return;
    submit.scrollIntoView({ block: "center" });
    submit.focus();
  }

  // A form htmx swapped in is only wired up when the swap settles (some 20 ms later); a
  // key pressed before that would submit it as a plain page POST and leave the page.
  // Processing it first (htmx skips a form it has processed already) keeps it in place.
  function submitForm(form, submitter) {
    if (window.htmx) window.htmx.process(form);
    form.requestSubmit(submitter);
  }

  // Key s: submit the trajectory, as the shortcuts say (a refusal shows beside the button).
  function submitFinish() {
    const submit = document.getElementById("finish-submit");
    if (!submit) return;
    focusFinish();
    submitForm(submit.form, submit);
  }

  // --- First-error mode ----------------------------------------------------------------

  // Steps after the annotator's first error are not asked for; the progress counter
  // carries the index, and rows loaded or swapped later are marked the same way.
  function markAfterFirstError() {
    if (root.dataset.firstErrorMode !== "true") return;
    const progress = document.getElementById("label-progress");
    const raw = progress ? progress.dataset.firstError : "";
    const first = raw === "" || raw === undefined ? null : Number(raw);
    rows().forEach(function (row) {
      const after = first !== null && Number(row.dataset.index) > first;
      row.classList.toggle("after-first-error", after);
    });
  }

  // --- Actions -------------------------------------------------------------------------

  function clickIn(row, selector) {
    const button = row && row.querySelector(".label-form " + selector);
    if (button && !button.disabled) {
      button.click();
      return true;
    }
    return false;
  }

  function openEditor(field) {
    const row = current();
    const link = row && row.querySelector("[data-editor]");
    if (!link || !window.htmx) return;
    if (field === "correction" && root.dataset.errorValue !== "" &&
        row.dataset.value !== root.dataset.errorValue) {
      flash("A correction goes with a step labelled as an error: label it first.");
      return;
    }
    const url = link.getAttribute("hx-get").replace(/field=[a-z]+/, "field=" + field);
    window.htmx.ajax("GET", url, { target: "#step-editor-" + row.dataset.step, swap: "innerHTML" });
  }

  function closeEditors() {
    root.querySelectorAll(".step-editor, .step-extra").forEach(function (box) {
      box.innerHTML = "";
    });
    const row = current();
    if (row) row.scrollIntoView({ block: "nearest" });
    if (document.activeElement && document.activeElement !== document.body) {
      document.activeElement.blur();
    }
  }

  function toggleHistory() {
    const row = current();
    if (!row || !window.htmx) return;
    const box = document.getElementById("step-extra-" + row.dataset.step);
    const link = row.querySelector("[data-history]");
    if (!box || !link) return;
    if (box.innerHTML.trim()) box.innerHTML = "";
    else window.htmx.ajax("GET", link.getAttribute("hx-get"), { target: box, swap: "innerHTML" });
  }

  function undo() {
    const url = root.dataset.undoUrl;
    if (url && window.htmx && root.dataset.canLabel === "true") {
      window.htmx.ajax("POST", url, { target: current() || "#steps", swap: "outerHTML" });
    }
  }

  function nextItem() {
    const form = document.getElementById("queue-next-form");
    if (form) submitForm(form);
  }

  function openDialog(id) {
    const dialog = document.getElementById(id);
    if (dialog && !dialog.open) dialog.showModal();
  }

  function flash(message) {
    const box = document.getElementById("flash");
    if (!box) return;
    box.innerHTML = "";
    const p = document.createElement("p");
    p.className = "flash-message";
    p.textContent = message;
    box.appendChild(p);
  }

  // --- Keys ----------------------------------------------------------------------------

  // Controls that take no typed text: with one of these focused (the agent-lanes switch,
  // an agent filter, an outcome radio) the page's keys still work.
  const UNTYPED_INPUTS = /^(checkbox|radio|button|submit|reset|image|file|color|range)$/;

  function typing(target) {
    if (!(target instanceof HTMLElement)) return false;
    if (target.isContentEditable || /^(TEXTAREA|SELECT)$/.test(target.tagName)) return true;
    return target instanceof HTMLInputElement && !UNTYPED_INPUTS.test(target.type);
  }

  document.addEventListener("keydown", function (event) {
    const target = event.target;
    const editor = target instanceof Element ? target.closest("[data-editor-form]") : null;

    // Inside an editor: Ctrl/Cmd+Enter saves, Enter on a checkbox or radio saves, Esc closes.
    if (editor) {
      const choice = target.type === "checkbox" || target.type === "radio";
      if (event.key === "Enter" && (event.ctrlKey || event.metaKey || choice)) {
        event.preventDefault();
        submitForm(editor);
      } else if (event.key === "Escape") {
        event.preventDefault();
        closeEditors();
      }
      return;
    }
    if (event.key === "Escape") {
      closeEditors();
      return;
    }
    if (event.defaultPrevented || event.ctrlKey || event.metaKey || event.altKey) return;
    if (typing(target) || document.querySelector("dialog[open]")) return;

    const key = event.key;
    let handled = true;
    if (key === "j") move(1);
    else if (key === "k") move(-1);
    else if (key === "?") openDialog("shortcuts-dialog");
    else if (key === "g") openDialog("guidelines-dialog");
    else if (review) handled = current() ? clickIn(current(), 'button[data-key="' + CSS.escape(key) + '"]') : false;
    else if (key === "f") handled = clickIn(current(), 'button[name="first_error"]');
    else if (key === "t") openEditor("tags");
    else if (key === "r") openEditor("rationale");
    else if (key === "c") openEditor("correction");
    else if (key === "u") undo();
    else if (key === "h") toggleHistory();
    else if (key === "s") submitFinish();
    else if (key === "d") handled = decisive();
    else if (key === "n") nextItem();
    else if (key === "b" && rubric("next")) handled = true;
    else if (key === "m" && rubric("mark")) handled = true;
    else if (key === "e" && rubric("evidence")) handled = true;
    else if (key === "v" && episode()) handled = true;
    else handled = current() ? clickIn(current(), 'button[name="value"][data-key="' + CSS.escape(key) + '"]') : false;
    if (handled) event.preventDefault();
  });

  // Clicking into a step makes it current, so the keys act where the mouse is.
  root.addEventListener("click", function (event) {
    const row = event.target instanceof Element ? event.target.closest("[data-row]") : null;
    if (row && row.id !== currentId) setCurrent(row, false, true);
  });

  root.querySelectorAll("[data-dialog]").forEach(function (opener) {
    opener.addEventListener("click", function (event) {
      event.preventDefault();
      openDialog(opener.dataset.dialog);
    });
  });

  // --- HTMX ----------------------------------------------------------------------------

  // Send the time spent on the step with its label.
  document.body.addEventListener("htmx:configRequest", function (event) {
    const form = event.detail.elt;
    if (form instanceof Element && form.matches(".label-form, [data-editor-form]")) {
      event.detail.parameters.time_spent_ms = Math.round(performance.now() - since);
    }
  });

  // A refused request (4xx) carries a message: show it in the page instead of dropping it.
  document.body.addEventListener("htmx:beforeSwap", function (event) {
    const status = event.detail.xhr.status;
    if (status >= 400 && status < 500) {
      event.detail.shouldSwap = true;
      event.detail.isError = false;
      // The server may name a message box beside the control used (a refused submit);
      // otherwise the message goes to the page's flash area.
      const named = event.detail.xhr.getResponseHeader("HX-Retarget");
      event.detail.target = (named && document.querySelector(named)) || document.getElementById("flash");
    } else if (status >= 500) {
      flash("The server failed to save this (" + status + "). Nothing was lost that was saved before; try again.");
    }
  });

  // A message beside a control may wrap below it (on a phone): bring all of it into view.
  document.body.addEventListener("htmx:afterSwap", function () {
    const finishError = document.getElementById("finish-error");
    if (finishError && finishError.textContent.trim()) finishError.scrollIntoView({ block: "nearest" });
  });

  document.body.addEventListener("htmx:sendError", function () {
    flash("The server cannot be reached. This label was not saved; try again.");
  });

  document.body.addEventListener("htmx:beforeRequest", function (event) {
    const box = document.getElementById("flash");
    if (box && event.detail.elt !== box) box.innerHTML = "";
    const finishError = document.getElementById("finish-error");
    if (finishError) finishError.textContent = "";
  });

  document.body.addEventListener("htmx:afterSettle", function () {
    // A swapped row is a new element: give it the current mark back.
    const row = current();
    if (row && !row.classList.contains("is-current")) {
      row.classList.add("is-current");
      row.setAttribute("aria-current", "step");
    }
    markAfterFirstError();
    const all = rows();
    if (pending && all.length > pending.count) {
      const lastBefore = all[pending.count - 1];
      const advancing = pending.advance;
      pending = null;
      if (advancing) advance(lastBefore);
      else setCurrent(all.indexOf(lastBefore) >= 0 ? all[all.indexOf(lastBefore) + 1] : all[0]);
    }
  });

  document.body.addEventListener("stepscope:labelled", function (event) {
    const row = document.getElementById("step-" + event.detail.step);
    markAfterFirstError();
    if (event.detail.stop) focusFinish();
    else advance(row);
  });

  // "Go to step N": the step gone to is current (its digits label it), not the box.
  document.body.addEventListener("stepscope:goto", function (event) {
    const target = document.getElementById("step-" + event.detail.step);
    if (!target) return;
    const all = rows();
    const row = target.hasAttribute("data-row") ? target
      : all.find(function (r) { return Number(r.dataset.index) > Number(target.dataset.index); });
    if (row) setCurrent(row, false);
    if (document.activeElement instanceof HTMLElement && document.activeElement.closest("#step-goto")) {
      document.activeElement.blur();
    }
  });

  // Review: after a final label the next step is current, as after a label.
  document.body.addEventListener("stepscope:finalised", function (event) {
    const all = rows();
    const row = document.getElementById("review-" + event.detail.step);
    const next = row ? all[all.indexOf(row) + 1] : null;
    if (next) setCurrent(next);
  });

  document.body.addEventListener("stepscope:undone", function (event) {
    // Undo lands on the step it changed.
    const row = document.getElementById("step-" + event.detail.step);
    if (row) setCurrent(row);
    markAfterFirstError();
  });

  // --- Span labels ---------------------------------------------------------------------

  // Shift+j / Shift+k select a run of steps from the current one (the anchor); while a
  // run is selected, a span value's key (the span panel's data, labeling/_spans.html)
  // labels it through the panel's form, and Esc, j or k clears it. Spans are drawn as
  // brackets beside the steps they cover, one lane each. The listener runs in the
  // capture phase, before the keys above, so a span key never also labels the step.
  let spanAnchor = null; // data-index of the step the selection started from

  function spanData() {
    const node = document.getElementById("spans");
    if (!node || !node.dataset.spans) return null;
    try {
      return JSON.parse(node.dataset.spans);
    } catch (error) {
      return null;
    }
  }

  function stepRows() {
    return Array.from(root.querySelectorAll("li.step[data-index]"));
  }

  function selectionRange() {
    const row = current();
    if (spanAnchor === null || !row) return null;
    const here = Number(row.dataset.index);
    return [Math.min(spanAnchor, here), Math.max(spanAnchor, here)];
  }

  function markSelection() {
    const range = selectionRange();
    stepRows().forEach(function (row) {
      const i = Number(row.dataset.index);
      row.classList.toggle("in-span-selection", Boolean(range) && i >= range[0] && i <= range[1]);
    });
  }

  function clearSelection() {
    spanAnchor = null;
    markSelection();
  }

  function extendSelection(delta) {
    const row = current();
    if (row && spanAnchor === null) spanAnchor = Number(row.dataset.index);
    move(delta);
    markSelection();
  }

  function labelSpan(key) {
    const range = selectionRange();
    const data = spanData();
    const form = document.getElementById("span-form");
    if (!range || !data || !form) return false;
    let found = null;
    data.schemas.some(function (schema) {
      const entry = schema.values.find(function (v) { return v.key && v.key.toLowerCase() === key.toLowerCase(); });
      if (entry) found = { schema: schema.id, value: entry.value };
      return Boolean(entry);
    });
    if (!found) return false;
    form.querySelector("#span-schema").value = String(found.schema);
    form.querySelector("#span-start").value = String(range[0]);
    form.querySelector("#span-end").value = String(range[1]);
    form.querySelector("#span-value").value = found.value;
    submitForm(form);
    clearSelection();
    return true;
  }

  function drawSpans() {
    const rowsByIndex = new Map();
    stepRows().forEach(function (row) {
      row.querySelectorAll(".span-bracket").forEach(function (mark) { mark.remove(); });
      rowsByIndex.set(Number(row.dataset.index), row);
    });
    const data = spanData();
    if (!data) return;
    // A span takes the first lane that is free at its start (spans come by start).
    const laneEnds = [];
    data.spans.forEach(function (span) {
      let lane = laneEnds.findIndex(function (end) { return end < span.start; });
      if (lane < 0) {
        lane = laneEnds.length;
        laneEnds.push(span.end);
      } else {
        laneEnds[lane] = span.end;
      }
      for (let i = span.start; i <= span.end; i += 1) {
        const row = rowsByIndex.get(i);
        if (!row) continue;
        const mark = document.createElement("span");
        mark.className = "span-bracket" + (i === span.start ? " is-first" : "") + (i === span.end ? " is-last" : "");
        mark.style.setProperty("--span-color", span.color);
        mark.style.setProperty("--lane", String(lane));
        mark.dataset.spanValue = span.value;
        mark.title = span.value + " · " + span.annotator + " · steps " + span.start + "–" + span.end;
        (row.querySelector(":scope > .step-body") || row).appendChild(mark);
      }
    });
    // Every step keeps room for all lanes, so the steps line up whatever spans they are in.
    const timeline = document.getElementById("steps");
    if (timeline) {
      timeline.classList.toggle("has-spans", laneEnds.length > 0);
      timeline.style.setProperty("--span-lanes", String(laneEnds.length));
    }
  }

  document.addEventListener("keydown", function (event) {
    if (event.ctrlKey || event.metaKey || event.altKey) return;
    const target = event.target;
    if (typing(target) || document.querySelector("dialog[open]")) return;
    if (target instanceof Element && target.closest("[data-editor-form]")) return;
    if (root.dataset.canLabel !== "true" || !document.getElementById("span-form")) return;
    const key = event.key;
    if (event.shiftKey && (key === "J" || key === "K")) {
      event.preventDefault();
      extendSelection(key === "J" ? 1 : -1);
    } else if (spanAnchor !== null && (key === "Escape" || key === "j" || key === "k")) {
      clearSelection();
    } else if (spanAnchor !== null && labelSpan(key)) {
      event.preventDefault();
    }
  }, true);

  document.body.addEventListener("htmx:afterSettle", function () {
    drawSpans();
    markSelection();
  });

  // Start on the first step that still needs a label (or the one in the URL's #fragment).
  const fromHash = window.location.hash ? document.getElementById(window.location.hash.slice(1)) : null;
  const start = fromHash && fromHash.hasAttribute("data-row") ? fromHash
    : rows().find(function (row) { return !isDone(row); }) || rows()[0];
  if (start) setCurrent(start, Boolean(fromHash) || window.scrollY > 0 || rows().indexOf(start) > 0);
  markAfterFirstError();
})();
