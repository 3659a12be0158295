// The trajectory page's decisive-failure panel (labeling/_decisive.html, loaded after
// the page). Key d (labeling.js) puts the current step in it, with "the step's agent",
// and moves to the reason; Ctrl/Cmd+Enter saves, Esc leaves the panel. The form is a
// plain HTMX post, so without this script it still saves.
(function () {
  "use strict";

  document.addEventListener("stepscope:decisive", function (event) {
    const form = event.target;
    if (!(form instanceof HTMLFormElement)) return;
    const step = form.querySelector("#decisive-step");
    const agent = form.querySelector("#decisive-agent");
    const reason = form.querySelector("#decisive-reason");
    if (step) step.value = event.detail.index;
    if (agent) agent.value = "";
    form.scrollIntoView({ block: "center" });
    if (reason) reason.focus();
  });

  document.addEventListener("keydown", function (event) {
    const target = event.target;
    const form = target instanceof Element ? target.closest("#decisive-form") : null;
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
