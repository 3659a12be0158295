// The trajectory page's tree of spans and agent lanes. Steps carry data-parent (the
// index of the step that called them) and data-depth; the page indents by depth, and a
// step with children gets a toggle that hides everything below it. With two or more
// agents, a lane switch offsets each agent's steps into its own column and colour, and
// a checkbox per agent shows or hides that agent's steps (the agents are those of the
// steps loaded so far, in the order they first act). Hidden steps drop out of the
// j / k walk (labeling.js skips hidden rows). Steps loaded later or swapped after a
// label are decorated again. When the evidence strip lists agents' Shapley credits
// ([data-agent-credit], scoring/_agent_credits.html), each agent's lane header (its
// filter) shows its credit.
(function () {
  "use strict";
  const timeline = document.getElementById("steps");
  const tools = document.getElementById("timeline-tools");
  if (!timeline || !tools) return;
  const collapsed = new Set(); // indexes of the steps whose subtrees are hidden
  const lanesSwitch = tools.querySelector("[data-lanes]");
  const filterBox = tools.querySelector(".agent-filters");
  const filters = []; // one checkbox per agent, in the order they first act
  const agents = [];

  function addAgent(agent) {
    agents.push(agent);
    const label = document.createElement("label");
    label.className = "agent-filter";
    label.style.setProperty("--lane", String(agents.length));
    const box = document.createElement("input");
    box.type = "checkbox";
    box.checked = true;
    box.value = agent;
    box.dataset.agentFilter = "";
    const credit = document.createElement("span");
    credit.className = "agent-credit";
    label.append(box, " " + agent, credit);
    filterBox.append(label);
    filters.push(box);
  }

  function steps() {
    return Array.from(timeline.querySelectorAll("li.step"));
  }

  // Steps that name no agent (Claude Code's main thread beside its subagents) act in a
  // lane of their own, "main", once a named agent acts: without it one subagent alone
  // would never make two lanes.
  const MAIN = "main";
  let named = false;

  function laneOf(row) {
    const agent = row.dataset.agent;
    if (agent !== undefined) return agent;
    return named ? MAIN : undefined;
  }

  function decorate() {
    const all = steps();
    named = named || all.some(function (row) { return row.dataset.agent !== undefined; });
    all.forEach(function (row) {
      const agent = laneOf(row);
      if (agent !== undefined && agents.indexOf(agent) < 0) addAgent(agent);
    });
    if (agents.length > 1) {
      tools.hidden = false;
      lanesSwitch.closest("label").hidden = false;
      filterBox.hidden = false;
    }
    const parents = new Set(all.map(function (row) { return row.dataset.parent; }));
    let tree = false;
    all.forEach(function (row) {
      const depth = Number(row.dataset.depth || 0);
      row.style.setProperty("--depth", String(Math.min(depth, 8)));
      if (row.dataset.parent !== undefined) tree = true;
      const lane = agents.indexOf(laneOf(row));
      if (lane >= 0) row.style.setProperty("--lane", String(lane + 1));
      const head = row.querySelector(".step-head");
      if (head && parents.has(row.dataset.index) && !head.querySelector(".tree-toggle")) {
        const toggle = document.createElement("button");
        toggle.type = "button";
        toggle.className = "tree-toggle";
        toggle.dataset.toggle = row.dataset.index;
        head.prepend(toggle);
      }
    });
    if (tree) {
      tools.hidden = false;
      tools.querySelector(".tree-tools").hidden = false;
    }
    timeline.style.setProperty("--lanes", String(Math.max(agents.length, 1)));
    credits();
  }

  function credits() {
    const byAgent = new Map();
    document.querySelectorAll("[data-agent-credit]").forEach(function (item) {
      byAgent.set(item.dataset.agentCredit, item.dataset.credit || "");
    });
    filters.forEach(function (box) {
      const slot = box.parentElement.querySelector(".agent-credit");
      const value = byAgent.get(box.value);
      slot.textContent = value ? value : "";
      slot.title = value ? "Shapley credit of " + box.value : "";
    });
  }

  function apply() {
    const shown = new Set(filters.filter(function (box) { return box.checked; })
      .map(function (box) { return box.value; }));
    const below = new Set(); // indexes hidden because an ancestor is collapsed
    steps().forEach(function (row) {
      const parent = row.dataset.parent;
      const folded = parent !== undefined && (collapsed.has(parent) || below.has(parent));
      if (folded) below.add(row.dataset.index);
      const agent = laneOf(row);
      row.hidden = folded || (agent !== undefined && agents.length > 1 && !shown.has(agent));
      const toggle = row.querySelector(".tree-toggle");
      if (toggle) {
        const open = !collapsed.has(row.dataset.index);
        toggle.setAttribute("aria-expanded", String(open));
        toggle.setAttribute("aria-label", (open ? "Hide" : "Show") + " the steps below step " + row.dataset.index);
        toggle.textContent = open ? "▾" : "▸";
      }
    });
  }

  timeline.addEventListener("click", function (event) {
    const toggle = event.target instanceof Element ? event.target.closest(".tree-toggle") : null;
    if (!toggle) return;
    const index = toggle.dataset.toggle;
    if (collapsed.has(index)) collapsed.delete(index);
    else collapsed.add(index);
    apply();
  });

  tools.addEventListener("click", function (event) {
    const button = event.target instanceof Element ? event.target.closest("[data-tree]") : null;
    if (!button) return;
    collapsed.clear();
    if (button.dataset.tree === "collapse") {
      timeline.querySelectorAll(".tree-toggle").forEach(function (toggle) {
        collapsed.add(toggle.dataset.toggle);
      });
    }
    apply();
  });

  tools.addEventListener("change", function (event) {
    if (event.target === lanesSwitch) timeline.classList.toggle("lanes", lanesSwitch.checked);
    apply();
  });

  document.body.addEventListener("htmx:afterSettle", function () {
    decorate();
    apply();
  });

  decorate();
  apply();
})();
