// Typesets the TeX spans the server marked (span.math, holding their source with its
// delimiters; trajectories/templatetags/step_rendering.py) with KaTeX, on load and after
// every htmx swap. A span KaTeX cannot read keeps its source, marked, with the reason as
// its title. KaTeX's copy-tex puts the TeX source on the clipboard when math is copied.
(function () {
  "use strict";
  if (!window.katex) return;
  const DELIMITERS = [["$$", "$$"], ["\\[", "\\]"], ["\\(", "\\)"], ["$", "$"]];

  function source(text) {
    for (const [open, close] of DELIMITERS) {
      if (text.length >= open.length + close.length && text.startsWith(open) && text.endsWith(close)) {
        return text.slice(open.length, text.length - close.length);
      }
    }
    return text;
  }

  function typeset() {
    document.querySelectorAll("span.math:not([data-typeset])").forEach(function (span) {
      span.dataset.typeset = "";
      try {
        window.katex.render(source(span.textContent), span, {
          displayMode: span.classList.contains("math-display"),
          throwOnError: true,
          trust: false, // no \href, \url or \includegraphics from model output
          strict: "ignore",
          maxExpand: 1000,
          maxSize: 50,
        });
      } catch (error) {
        span.classList.add("math-error");
        span.title = String(error && error.message ? error.message : error);
      }
    });
  }

  typeset();
  document.body.addEventListener("htmx:afterSettle", typeset);
})();
