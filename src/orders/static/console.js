"use strict";
// The operator console. Everything it shows comes from the HTTP API of the same app, called with what
// the browser already holds (the session cookie of App Service authentication): no key, no address
// carrying one. The server says in <body data-actions> whether this caller may act ("on": an operator),
// only approve or reject what waits for an approval ("approve": an approver), or only read ("off"); a
// reader's page has no action buttons, an approver's only Approve and Reject (and the API would refuse
// the other actions anyway).
(() => {
  const CAN_ACT = document.body.dataset.actions === "on";
  const CAN_APPROVE = CAN_ACT || document.body.dataset.actions === "approve";
  // Each operator action as the server declares it: on a step or on the order, what it asks for.
  const ACTIONS = JSON.parse(document.body.dataset.operatorActions);
  const BASE = location.pathname.replace(/[^/]*$/, ""); // the page is /api/console: calls go to /api/...
  const REFRESH_MS = 4000;
  const SLOW_EVERY = 4; // counts and dead letters cost more to read: every fourth refresh
  const IN_FLIGHT = ["Pending", "Processing", "Waiting", "Compensating"];
  const MAX_IN_FLIGHT = 25;
  const MAX_APPROVALS = 100;
  const STALE = "The order changed since you loaded it; reload. (It has been reloaded below.)";

  const $ = (id) => document.getElementById(id);
  let selected = null; // {order, etag, audit, loadedAt}: the version the operator looks at
  let tick = 0;
  let timer = null;
  let refreshing = false;
  let listings = new Map(); // this refresh's listings by query: tables that read the same one share it

  // ---- helpers -------------------------------------------------------------------------------
  function el(tag, attrs, ...children) {
    const node = document.createElement(tag);
    for (const [name, value] of Object.entries(attrs || {})) {
      if (value === null || value === undefined || value === false) continue;
      if (name === "text") node.textContent = value;
      else if (name === "onclick") node.addEventListener("click", value);
      else node.setAttribute(name, value === true ? "" : String(value));
    }
    for (const child of children) {
      if (child !== null && child !== undefined) node.append(child);
    }
    return node;
  }

  // An event handler's failure (the API unreachable, the key refused) goes to the status line.
  const guard = (fn) => (...args) => Promise.resolve(fn(...args)).catch((e) => say(e.message, "error"));

  function say(text, kind) {
    const status = $("status");
    status.textContent = text;
    status.className = kind || "";
  }

  async function call(method, path, options = {}) {
    const headers = { accept: "application/json" };
    if (options.etag) headers["if-match"] = options.etag;
    let body;
    if (options.body !== undefined) {
      headers["content-type"] = "application/json";
      body = JSON.stringify(options.body);
    }
    const response = await fetch(BASE + path, {
      method, headers, body, credentials: "same-origin", cache: "no-store",
    });
    let data = null;
    if ((response.headers.get("content-type") || "").includes("json")) data = await response.json();
    if (response.status === 401) {
      throw new Error("You are not signed in any more: reload the page to sign in again.");
    }
    return { status: response.status, data, etag: response.headers.get("etag") };
  }

  const enc = encodeURIComponent;
  const message = (reply) => (reply.data && reply.data.error ? reply.data.error.message : `HTTP ${reply.status}`);
  const when = (iso) => (iso ? new Date(iso).toLocaleTimeString() : "");
  // A time that may be days away (a wait's): with its date unless it is today.
  const dated = (iso) => {
    if (!iso) return "";
    const at = new Date(iso);
    return at.toDateString() === new Date().toDateString() ? at.toLocaleTimeString() : at.toLocaleString();
  };

  // One page of orders in a state (``query`` after "orders?"), read once per refresh.
  function listing(query) {
    if (!listings.has(query)) listings.set(query, call("GET", `orders?${query}`));
    return listings.get(query);
  }

  function stateCell(value) {
    return el("span", { class: `state-${value}`, text: value });
  }

  // A countdown to a deadline, ticked in the page once a second.
  function countdown(iso) {
    if (!iso) return el("span", { text: "-" });
    const node = el("time", { datetime: iso, "data-deadline": iso });
    paint(node, Date.now());
    return node;
  }

  function paint(node, now) {
    const left = Math.round((Date.parse(node.dataset.deadline) - now) / 1000);
    node.textContent = left >= 0 ? `${span(left)} left` : `${span(-left)} overdue`;
    node.classList.toggle("overdue", left < 0);
  }

  function span(seconds) {
    if (seconds < 120) return `${seconds} s`;
    if (seconds < 7200) return `${Math.floor(seconds / 60)} min ${seconds % 60} s`;
    return `${Math.floor(seconds / 3600)} h ${Math.floor((seconds % 3600) / 60)} min`;
  }

  function ticking() {
    const now = Date.now();
    document.querySelectorAll("[data-deadline]").forEach((node) => paint(node, now));
  }

  // What a Waiting order waits for and until when (an approval's deadline, a timer's time), ticking; an
  // approval past its deadline (its order in Error) reads overdue.
  function waitFor(o) {
    if (!o.waitingFor) return el("span", { text: "-" });
    const until = o.waitingFor === "approval" ? "by" : "at";
    return el("span", { class: "wait", "data-waiting-for": o.waitingFor },
      el("span", { class: "step", text: `${o.waitingFor} ${until} ${dated(o.waitUntil)}` }),
      el("span", { class: "step" }, countdown(o.waitUntil)));
  }

  // Whether ``step`` of ``order`` is its current step and waits for a person's approval (in Error too,
  // once its deadline passed): the one an approver may approve or reject.
  const awaitsApproval = (order, step) => order.waitingFor === "approval" && step.state === "Waiting";

  function fill(tbody, rows, empty, columns) {
    tbody.replaceChildren(...rows);
    if (!rows.length) tbody.append(el("tr", {}, el("td", { colspan: columns, text: empty })));
  }

  function openButton(orderId) {
    return el("button", {
      type: "button", class: "link", text: orderId, "aria-label": `Open order ${orderId}`,
      onclick: guard(() => openOrder(orderId)),
    });
  }

  // ---- the confirmation dialog ---------------------------------------------------------------
  function confirmAction({ title, text, seconds = false, noteRequired = false, input = null }) {
    const dialog = $("confirm");
    $("confirm-title").textContent = title;
    $("confirm-text").textContent = text;
    $("confirm-seconds-row").hidden = !seconds;
    $("confirm-seconds").required = seconds;
    // An update asks for the new values, shown as they stand now.
    $("confirm-input-row").hidden = input === null;
    $("confirm-input").required = input !== null;
    $("confirm-input").value = input === null ? "" : JSON.stringify(input, null, 2);
    $("confirm-note").value = "";
    $("confirm-note").required = noteRequired;
    $("confirm-note-label").textContent = noteRequired
      ? "Note for the audit trail (required)" : "Note for the audit trail (optional)";
    dialog.returnValue = "";
    return new Promise((resolve) => {
      dialog.addEventListener("close", () => {
        if (dialog.returnValue !== "confirm") return resolve(null);
        const note = $("confirm-note").value.trim();
        const answer = note ? { note } : {};
        if (seconds) answer.seconds = Number($("confirm-seconds").value);
        if (input !== null) {
          try {
            answer.input = JSON.parse($("confirm-input").value);
          } catch (e) {
            answer.input = $("confirm-input").value; // refused by the API with 400, which the page says
          }
        }
        resolve(answer);
      }, { once: true });
      dialog.showModal();
      (seconds ? $("confirm-seconds") : $("confirm-ok")).focus();
    });
  }

  // ---- one order -------------------------------------------------------------------------------
  async function openOrder(orderId, quiet) {
    const [order, audit] = await Promise.all([
      call("GET", `orders/${enc(orderId)}`),
      call("GET", `orders/${enc(orderId)}/audit`),
    ]);
    if (order.status !== 200) {
      say(`Order ${orderId}: ${message(order)}`, "error");
      return;
    }
    if (selected && selected.order.orderId !== order.data.orderId) chosen = null; // another order's call
    selected = { order: order.data, etag: order.etag, audit: audit.status === 200 ? audit.data.items : [], loadedAt: new Date() };
    renderOrder();
    if (!quiet) {
      say(`Loaded order ${orderId}.`, "ok");
      $("order-heading").scrollIntoView({ block: "start" });
      $("order-heading").focus();
    }
  }

  function renderOrder() {
    const { order, audit, loadedAt } = selected;
    $("order-detail").hidden = false;
    $("order-heading").textContent = `Order ${order.orderId} (${order.workflow} v${order.workflowVersion})`;
    $("order-loaded").textContent = loadedAt.toLocaleTimeString();
    const facts = [
      ["State", stateCell(order.processState)],
      ...(order.storefront ? [["Storefront", order.storefront]] : []),
      ["Failures", String(order.failureCount)],
      ["Locked by", order.lockedBy || "-"],
      ["Time left", countdown(order.completeBy)],
      ["Held by a breaker until", order.heldUntil ? when(order.heldUntil) : "-"],
      ...(order.waitingFor ? waitFacts(order) : []),
      ["Created", when(order.createdAt)],
      ["Updated", when(order.updatedAt)],
      ["Last error", order.lastError || "-"],
      // Application Insights' operation_Id of every span of the order; locally: orders-trace <orderId>.
      ["Trace", order.traceId ? el("code", { id: "order-trace", text: order.traceId }) : "-"],
    ];
    $("order-summary").replaceChildren(...facts.flatMap(([name, value]) => [el("dt", { text: name }), el("dd", {}, value)]));
    // The order's input as stored: what its steps' bodies and conditions read.
    $("order-input-box").hidden = order.input === undefined;
    $("order-input").textContent = order.input === undefined ? "" : JSON.stringify(order.input, null, 2);
    const update = $("order-update"); // absent for a reader
    if (update) update.hidden = !(order.updatable || []).length;
    const live = (s) => s.state === "Running" || s.state === "Compensating" || s.state === "Waiting";
    // Steps of a group run side by side: bracketed together, the group named on its first row.
    const firstOfGroup = (i) => order.steps[i].group && (i === 0 || order.steps[i - 1].group !== order.steps[i].group);
    const steps = order.steps.map((step, i) => el("tr", {
      "data-step": step.name,
      "data-group": step.group || null,
      class: [`step-${step.state}`, step.group ? "in-group" : "", firstOfGroup(i) ? "group-start" : ""].filter(Boolean).join(" "),
    },
      el("th", { scope: "row" },
        firstOfGroup(i) ? el("span", { class: "group-name", text: `side by side: ${step.group}` }) : null,
        step.name),
      el("td", {}, stateCell(step.state)),
      el("td", { class: "num", text: step.attempts }),
      el("td", { class: "num", text: step.compensationAttempts }),
      el("td", {}, live(step) ? countdown(step.completeBy) : "-"),
      el("td", { class: "reason", text: step.reason || "" }),
      el("td", { class: "result" }, ...resultValues(step.result)),
      el("td", { text: step.lastError || "" }),
      CAN_APPROVE ? el("td", {},
        CAN_ACT ? stepButton(step.name, "retry", "Retry") : null,
        CAN_ACT ? stepButton(step.name, "extend", "Extend") : null,
        CAN_ACT ? stepButton(step.name, "skip", "Skip") : null,
        awaitsApproval(order, step) ? stepButton(step.name, "approve", "Approve") : null,
        awaitsApproval(order, step) ? stepButton(step.name, "reject", "Reject") : null) : null,
    ));
    fill($("order-steps").tBodies[0], steps, "no steps", CAN_APPROVE ? 9 : 8);
    const groupOf = Object.fromEntries(order.steps.filter((s) => s.group).map((s) => [s.name, s.group]));
    const events = [{ at: order.createdAt, actor: "", action: "submitted", processStateAfter: "Pending" }, ...audit];
    const rows = events.map((e) => el("tr", {},
      el("td", { text: new Date(e.at).toLocaleString() }),
      el("td", { text: e.actor || "" }),
      el("td", { text: e.action }),
      el("td", { text: e.step ? e.step + (groupOf[e.step] ? ` (side by side: ${groupOf[e.step]})` : "") : "" }),
      el("td", { text: [e.processStateBefore, e.processStateAfter].filter(Boolean).join(" → ") }),
      el("td", { text: [e.stepStateBefore, e.stepStateAfter].filter(Boolean).join(" → ") }),
      el("td", { text: e.note || "" }),
      el("td", { text: e.detail || "" }),
    ));
    fill($("order-timeline").tBodies[0], rows, "nothing yet", 8);
    renderChart(order, audit, loadedAt);
  }

  // What the order waits for, until when, and (an approval in Error) that its deadline has passed.
  function waitFacts(order) {
    const approval = order.waitingFor === "approval";
    const step = order.steps.find((s) => s.state === "Waiting");
    const what = { approval: "an approval", timer: "a timer", callback: "its service's callback" }[order.waitingFor] || order.waitingFor;
    const facts = [
      ["Waiting for", el("span", { "data-waiting-for": order.waitingFor, text: step ? `${what} (step ${step.name})` : what })],
      [approval ? "Deadline" : "Until", el("span", {}, `${dated(order.waitUntil)} (`, countdown(order.waitUntil), ")")],
    ];
    if (approval && order.processState === "Error") {
      facts.push(["Approval", el("span", {
        class: "overdue", "data-overdue": "",
        text: "overdue: its deadline passed and the order is in Error; it can still be approved or rejected",
      })]);
    }
    return facts;
  }

  // The values a step's service returned, passed on to later steps: one "name: value" line each.
  function resultValues(result) {
    return Object.entries(result || {}).map(([name, value]) => el("span", {
      class: "step", "data-result": name, text: `${name}: ${typeof value === "string" ? value : JSON.stringify(value)}`,
    }));
  }

  // ---- the order's timeline: one lane per step, a bar per dispatch ------------------------------
  // Positions are set through the CSSOM (node.style), which the page's style-src policy allows; a style
  // attribute in markup would be refused.
  const KINDS = { call: "call", undo: "undo", wait: "wait" };
  const KIND_TEXT = {
    call: "a call to the step's service",
    undo: "an undo: the call that reverses the step's effect",
    wait: "a wait (for a time, a person's approval or the service's callback)",
  };
  const TICKS = [1, 2, 5, 10, 15, 30].map((s) => s * 1000)
    .concat([1, 2, 5, 10, 15, 30].map((m) => m * 60_000))
    .concat([1, 2, 3, 6, 12].map((h) => h * 3_600_000))
    .concat([1, 2, 7, 14, 30].map((d) => d * 86_400_000));
  const MAX_TICKS = 8;
  const ENGINE = /^(scheduler|supervisor|agent)(:|$)/; // how the engine's own audit entries name their actor
  let chosen = null; // the dispatch whose details are shown: {step, kind, attempt, dispatched}

  const ms = (iso) => (iso ? Date.parse(iso) : NaN);
  const precise = (iso) => new Date(iso).toLocaleString(undefined, {
    month: "short", day: "numeric", hour: "2-digit", minute: "2-digit", second: "2-digit", fractionalSecondDigits: 3,
  });
  function took(millis) {
    if (millis < 1000) return `${Math.round(millis)} ms`;
    if (millis < 120_000) return `${(millis / 1000).toFixed(2)} s`;
    return span(Math.round(millis / 1000));
  }
  const outcomeClass = (outcome) => `outcome-${(outcome || "running").replace(/\s+/g, "-")}`;

  // Where the axis starts and ends: from the order's creation to the time the page loaded it while it is
  // in flight, else to its last event (a finished order's axis is not stretched by the time since).
  function axisOf(order, audit, loadedAt) {
    const start = ms(order.createdAt);
    const times = [ms(order.updatedAt), ...audit.map((e) => ms(e.at))];
    for (const step of order.steps) {
      for (const c of step.calls || []) times.push(...[c.dispatched, c.started, c.ended, c.answered].map(ms));
    }
    const last = Math.max(start, ...times.filter(Number.isFinite));
    const end = Math.max(IN_FLIGHT.includes(order.processState) ? Math.max(last, loadedAt.getTime()) : last,
      start + 1000); // a second at least: no division by nothing
    return { start, until: end, end: end + (end - start) * 0.02 }; // room: the last bar off the edge
  }

  function ticks(start, end) {
    const step = TICKS.find((t) => (end - start) / t <= MAX_TICKS) || TICKS[TICKS.length - 1];
    // Hours and days on the local clock's boundaries, not UTC's.
    const offset = step >= 3_600_000 ? new Date(start).getTimezoneOffset() * -60_000 : 0;
    const first = Math.ceil((start + offset) / step) * step - offset;
    const label = (t) => (step >= 86_400_000 ? new Date(t).toLocaleDateString()
      : new Date(t).toLocaleTimeString(undefined, step >= 60_000
        ? { hour: "2-digit", minute: "2-digit" } : { hour: "2-digit", minute: "2-digit", second: "2-digit" }));
    const found = [];
    for (let t = first; t <= end; t += step) found.push({ at: t, text: label(t) });
    return found;
  }

  function renderChart(order, audit, loadedAt) {
    const { start, until, end } = axisOf(order, audit, loadedAt);
    const x = (t) => `${Math.min(100, Math.max(0, ((t - start) / (end - start)) * 100)).toFixed(3)}%`;
    const place = (node, t) => { node.style.left = x(t); return node; };
    const live = IN_FLIGHT.includes(order.processState);
    $("chart-span").textContent = `From ${dated(order.createdAt)} (submitted) to ${dated(new Date(until).toISOString())}`
      + ` (${live ? "loaded" : "its last event"}): ${took(until - start)}.`;

    const track = (lane, ...children) => el("div", { class: "track", "data-lane": lane }, ...children);
    const label = (...children) => el("div", { class: "lane-label" }, ...children);
    const grid = el("div", { class: "gridlines", "aria-hidden": "true" });
    const axis = el("div", { class: "axis", "aria-hidden": "true" });
    for (const t of ticks(start, end)) {
      // A label near an end of the axis is anchored on that side, so as not to stick out of the chart.
      const at = (t.at - start) / (end - start);
      const side = at < 0.05 ? " tick-first" : at > 0.93 ? " tick-last" : "";
      axis.append(place(el("span", { class: `tick${side}`, "data-at": new Date(t.at).toISOString(), text: t.text }), t.at));
      grid.append(place(el("span", { class: "gridline" }), t.at));
    }

    // The audit's entries: the engine putting the order in Error, another of its decisions (a step left
    // out), or a person's action; on its step's lane, else on the order's.
    const names = new Set(order.steps.map((s) => s.name));
    const marks = new Map();
    for (const e of audit) {
      const lane = e.step && names.has(e.step) ? e.step : "";
      const kind = e.action === "error" ? "error" : ENGINE.test(e.actor || "") ? "engine" : "operator";
      const text = `${dated(e.at)} ${e.actor || "?"}: ${e.action}${e.note ? ` (“${e.note}”)` : ""}`
        + `${e.detail ? `; ${e.detail}` : ""}${e.processStateAfter ? `; order ${e.processStateBefore} → ${e.processStateAfter}` : ""}`;
      const mark = el("span", {
        class: `marker m-${kind}`, role: "img", "aria-label": text, title: text,
        "data-marker": kind, "data-at": e.at, "data-actor": e.actor || "",
        "data-action": e.action, "data-step": e.step || null,
      });
      if (!marks.has(lane)) marks.set(lane, []);
      marks.get(lane).push(place(mark, ms(e.at)));
    }

    const lanes = [];
    if (marks.has("")) lanes.push(label(el("span", { class: "lane-name", text: "order" })), track("", ...marks.get("")));
    order.steps.forEach((step, i) => {
      const first = step.group && (i === 0 || order.steps[i - 1].group !== step.group);
      const entries = step.calls || [];
      const bars = entries.map((c, j) => callBar(step, c, entries[j + 1], until, x, place));
      const pair = [
        label(first ? el("span", { class: "group-name", text: `side by side: ${step.group}` }) : null,
          el("span", { class: "lane-name", text: step.name }), " ", stateCell(step.state)),
        track(step.name, ...bars.flat(), ...(marks.get(step.name) || []),
          step.state === "LeftOut" ? el("span", { class: "lane-note", text: "left out by its condition" }) : null,
          !entries.length && step.state !== "LeftOut" && step.attempts > 0
            ? el("span", { class: "lane-note", text: "no dispatch kept" }) : null),
      ];
      // A group's lanes bracketed together, as its rows are in the steps table.
      for (const node of pair) {
        if (step.group) node.classList.add("in-group");
        if (first) node.classList.add("group-start");
      }
      lanes.push(...pair);
    });
    // Marks above the bars at (nearly) the same moment, the Supervisor's recovery and the Error it caused
    // say, are set side by side rather than on top of each other.
    for (const lane of lanes.filter((node) => node.classList.contains("track"))) {
      let anchor = -Infinity;
      let beside = 0;
      const above = [...lane.querySelectorAll(".m-recovery, .m-operator, .m-error, .m-engine")]
        .sort((a, b) => parseFloat(a.style.left) - parseFloat(b.style.left));
      for (const mark of above) {
        const left = parseFloat(mark.style.left);
        beside = left - anchor < 1.2 ? beside + 1 : 0;
        if (!beside) anchor = left;
        if (beside) mark.style.marginLeft = `${(left > 90 ? -beside : beside) * 1.05}rem`; // inwards
      }
    }
    // Rows placed by hand: the gridlines span every lane's row, under the lanes.
    lanes.forEach((node, i) => { node.style.gridRow = String(Math.floor(i / 2) + 2); });
    grid.style.gridRow = `2 / span ${Math.max(1, lanes.length / 2)}`;
    $("chart").replaceChildren(el("div", { class: "lane-label axis-label", text: "time" }), axis, grid, ...lanes);

    const again = chosen && order.steps.find((s) => s.name === chosen.step);
    const call = again && (again.calls || []).find((c) => c.kind === chosen.kind && c.attempt === chosen.attempt
      && c.dispatched === chosen.dispatched);
    if (call) showCall(again, call, false);
    else hideCall();
  }

  // One dispatch: its bar (from dispatched to ended; still running, to the axis' end; never ended but
  // followed by another dispatch, to that one) and its marks (the Agent's start, a callback, the
  // Supervisor's recovery).
  function callBar(step, c, next, end, x, place) {
    const from = ms(c.dispatched);
    const superseded = !c.ended && c.outcome == null && next !== undefined;
    const to = c.ended ? ms(c.ended) : superseded ? ms(next.dispatched) : end;
    const kind = KINDS[c.kind] || "call";
    const outcome = c.outcome || (superseded ? "superseded" : "running");
    const tip = [
      `${step.name}: ${kind} attempt ${c.attempt}, ${outcome}`,
      `dispatched ${precise(c.dispatched)}`,
      c.started ? `Agent started ${precise(c.started)}` : null,
      c.ended ? `ended ${precise(c.ended)} (${took(ms(c.ended) - from)})` : superseded ? "no end recorded: a later dispatch replaced it" : "still running when loaded",
      c.answered ? `callback ${precise(c.answered)}` : null,
      c.instance ? `instance ${c.instance}` : null,
      c.tries != null ? `tries ${c.tries}` : null,
      c.status != null ? `HTTP ${c.status}` : null,
      c.reason ? `reason: ${c.reason}` : null,
      c.recovery ? `Supervisor: ${c.recovery}` : null,
    ].filter(Boolean).join("\n");
    const bar = el("button", {
      type: "button", class: `bar kind-${kind} ${outcomeClass(superseded ? "superseded" : c.outcome)}`,
      title: tip, "aria-label": `Step ${step.name}, ${kind} attempt ${c.attempt}: ${outcome}. Show its details`,
      "aria-controls": "call-detail", "aria-expanded": "false",
      "data-step": step.name, "data-attempt": c.attempt, "data-kind": c.kind, "data-outcome": c.outcome || "",
      "data-start": c.dispatched, "data-end": c.ended || "",
      onclick: () => showCall(step, c, true),
    });
    place(bar, from);
    bar.style.width = `calc(${x(to)} - ${x(from)})`;
    const marks = [bar];
    if (c.started) {
      marks.push(place(el("span", { class: "marker m-started", "data-marker": "started", "data-step": step.name,
        "data-attempt": c.attempt, "data-at": c.started, title: `Agent started calling: ${precise(c.started)}` }), ms(c.started)));
    }
    if (c.answered) {
      marks.push(place(el("span", { class: "marker m-callback", "data-marker": "callback", "data-step": step.name,
        "data-attempt": c.attempt, "data-at": c.answered, title: `Callback came: ${precise(c.answered)}` }), ms(c.answered)));
    }
    if (c.recovery) {
      // The Supervisor acted when it found the dispatch past its CompleteBy: that is when it ended it.
      const at = c.ended || c.completeBy || c.dispatched;
      const text = `Supervisor, ${precise(at)}: ${c.recovery}`;
      marks.push(place(el("span", { class: "marker m-recovery", role: "img", "aria-label": text, title: text,
        "data-marker": "recovery", "data-step": step.name, "data-attempt": c.attempt, "data-at": at,
        "data-text": c.recovery }), ms(at)));
    }
    return marks;
  }

  // The details of one dispatch, for a person who supports the order: what was sent, what came back, when.
  function showCall(step, c, focus) {
    chosen = { step: step.name, kind: c.kind, attempt: c.attempt, dispatched: c.dispatched };
    document.querySelectorAll("#chart .bar").forEach((b) => {
      const mine = b.dataset.step === step.name && b.dataset.kind === c.kind
        && b.dataset.attempt === String(c.attempt) && b.dataset.start === c.dispatched;
      b.classList.toggle("selected", mine);
      b.setAttribute("aria-expanded", String(mine));
    });
    const from = ms(c.dispatched);
    const at = (iso, after) => (iso ? el("span", {},
      el("time", { datetime: iso, text: precise(iso) }),
      after !== undefined ? ` (${took(ms(iso) - after)} after it was dispatched)` : "") : "-");
    const outcome = c.outcome || "none yet: no answer had come when the order was loaded";
    const facts = [
      ["kind", "What", KIND_TEXT[c.kind] || c.kind],
      ["attempt", "Attempt", String(c.attempt)],
      ["outcome", "Outcome", outcome],
      ["dispatched", "Dispatched by the Scheduler", at(c.dispatched)],
      ["completeBy", "Had to complete by", at(c.completeBy, from)],
      ["started", "Agent started calling", at(c.started, from)],
      ["ended", "Ended", at(c.ended, from)],
      ["duration", "Took", c.ended ? [c.started ? `${took(ms(c.ended) - ms(c.started))} calling` : null,
        `${took(ms(c.ended) - from)} from dispatch`].filter(Boolean).join("; ") : "-"],
      ["answered", "Callback came", at(c.answered, from)],
      ["instance", "Agent process", c.instance || "-"],
      ["tries", "Tries", c.tries != null ? String(c.tries) : "-"],
      ["status", "Last HTTP status", c.status != null ? String(c.status) : "-"],
      ["reason", "Reason given", c.reason || "-"],
      ["recovery", "The Supervisor", c.recovery || "-"],
    ];
    $("call-title").textContent = `Step ${step.name}: ${c.kind} attempt ${c.attempt} (${c.outcome || "running"})`;
    $("call-facts").replaceChildren(...facts.flatMap(([key, name, value]) => [
      el("dt", { text: name }), el("dd", { "data-fact": key }, value)]));
    const json = (value, none) => (value == null ? none : JSON.stringify(value, null, 2));
    $("call-body").textContent = json(c.body, c.kind === "wait" ? "Nothing: a wait calls no service."
      : "Not recorded: no reply came from the Agent for this dispatch (it may have given up at its deadline).");
    $("call-body").toggleAttribute("data-empty", c.body == null);
    $("call-result").textContent = [
      `HTTP status: ${c.status != null ? c.status : "-"}`,
      `Outcome: ${c.outcome || "-"}`,
      c.reason ? `Reason: ${c.reason}` : null,
      `Returned: ${json(c.result, "nothing")}`,
    ].filter(Boolean).join("\n");
    $("call-detail").hidden = false;
    if (focus) $("call-title").focus();
  }

  function hideCall() {
    chosen = null;
    $("call-detail").hidden = true;
    document.querySelectorAll("#chart .bar.selected").forEach((b) => {
      b.classList.remove("selected");
      b.setAttribute("aria-expanded", "false");
    });
  }

  function stepButton(step, verb, label) {
    return el("button", {
      type: "button", text: label, "aria-label": `${label} step ${step}`, "data-step": step, "data-action": verb,
      onclick: guard(() => act(verb, `${label} step ${step}`, step)),
    });
  }

  const WHAT = {
    retry: "Dispatch this step again now, as a new attempt.",
    extend: "Push this step's CompleteBy and re-send its request with the new deadline.",
    skip: "Mark this step done by hand; the order then continues with the next step.",
    resubmit: "Send this order in Error back to Pending.",
    cancel: "Undo every step that may have had an effect.",
    approve: "Approve what this step waits for: the order goes on with its next step.",
    reject: "Reject it: the order is undone (every step that may have had an effect).",
    update: "Change input fields of this order: the steps that read them have not started yet.",
  };

  async function act(verb, title, step) {
    if (!selected) return;
    const { order, etag } = selected;
    const declared = ACTIONS[verb];
    const path = declared.onStep ? `steps/${enc(step)}/${verb}` : verb;
    // An update offers the fields the order may still change, with their values now.
    const fields = declared.input ? (order.updatable || []).flatMap((u) => u.fields) : [];
    const current = Object.fromEntries(fields.map((f) => [f, (order.input || {})[f] ?? null]));
    const until = (order.updatable || []).map((u) => `${u.fields.join(", ")} until ${u.until} starts`);
    const answer = await confirmAction({
      title: `${title} of order ${order.orderId}?`,
      text: declared.input ? `${WHAT[verb]} (${until.join("; ")})` : WHAT[verb],
      seconds: declared.seconds, noteRequired: declared.note, input: declared.input ? current : null,
    });
    if (!answer) {
      say("Nothing was changed.");
      return;
    }
    const reply = await call("POST", `orders/${enc(order.orderId)}/${path}`, { etag, body: answer });
    if (reply.status === 202) {
      say(`${title}: done. The order is now ${reply.data.processState}.`, "ok");
    } else if (reply.status === 412) {
      say(STALE, "error");
    } else {
      say(`${title}: refused (${message(reply)}).`, "error");
    }
    await openOrder(order.orderId, true);
    refresh();
  }

  // ---- finding orders ------------------------------------------------------------------------------
  // A search's page may hold fewer than pageSize before the end: a click reads on until it has a page's
  // worth or a few pages, and More goes on from there.
  const FIND_PAGE = 25;
  const FIND_READS = 5;
  let finding = null; // {query, token, seen}: the search shown, and where its next page starts

  // The query the form asks for, or a sentence saying why there is none.
  function findQuery() {
    const query = new URLSearchParams();
    const text = (id) => $(id).value.trim();
    if (text("find-customer")) query.set("customerId", text("find-customer"));
    if (text("find-step")) query.set("step", text("find-step"));
    if (text("find-minutes")) {
      const minutes = Number(text("find-minutes"));
      if (!Number.isFinite(minutes)) return "The minutes at the step must be a number.";
      query.set("atStepSeconds", String(Math.round(minutes * 60))); // the API says which values it refuses
    }
    if ($("find-state").value) query.set("processState", $("find-state").value);
    for (const [id, name] of [["find-from", "submittedFrom"], ["find-to", "submittedTo"]]) {
      if (!$(id).value) continue;
      const at = new Date($(id).value); // the browser's local time, sent in UTC
      if (Number.isNaN(at.getTime())) return `${name} is no time.`;
      query.set(name, at.toISOString());
    }
    return [...query.keys()].length ? query : "Fill in at least one thing to find orders by.";
  }

  async function findOrders(more) {
    if (!more) {
      const query = findQuery();
      if (typeof query === "string") {
        showFound(query, "error");
        return;
      }
      finding = { query, token: null, seen: new Set() };
      $("found").tBodies[0].replaceChildren();
      $("found").hidden = true;
      $("find-more").hidden = true;
    }
    if (!finding) return;
    showFound("Searching…");
    let added = 0;
    for (let reads = 0; reads < FIND_READS && added < FIND_PAGE; reads += 1) {
      const query = new URLSearchParams(finding.query);
      query.set("pageSize", String(FIND_PAGE));
      if (finding.token) query.set("continuationToken", finding.token);
      const reply = await call("GET", `orders?${query}`);
      if (reply.status !== 200) {
        finding.token = null;
        $("find-more").hidden = true;
        showFound(`The search was refused: ${message(reply)}`, "error");
        return;
      }
      const fresh = reply.data.items.filter((o) => !finding.seen.has(o.orderId));
      fresh.forEach((o) => finding.seen.add(o.orderId));
      $("found").tBodies[0].append(...fresh.map(foundRow));
      added += fresh.length;
      finding.token = reply.data.continuationToken || null;
      if (!finding.token) break;
    }
    const count = finding.seen.size;
    $("found").hidden = count === 0;
    $("find-more").hidden = !finding.token;
    showFound(count === 0 && !finding.token ? "No order matches."
      : `${count} found${finding.token ? "; there may be more: More reads on." : "."}`, "ok");
  }

  function foundRow(o) {
    return el("tr", { "data-order": o.orderId },
      el("th", { scope: "row" }, openButton(o.orderId)),
      el("td", { text: `${o.workflow} v${o.workflowVersion}` }),
      el("td", {}, stateCell(o.processState)),
      el("td", { "data-current-step": o.currentStep || "", text: o.currentStep || "-" }),
      el("td", {}, o.atStepSince ? el("time", { datetime: o.atStepSince, text: dated(o.atStepSince) }) : "-"),
      el("td", {}, el("time", { datetime: o.createdAt, text: dated(o.createdAt) })),
    );
  }

  function showFound(text, kind) {
    $("found-note").textContent = text;
    $("found-note").className = `meta ${kind || ""}`.trim();
  }

  // ---- the lists -------------------------------------------------------------------------------
  async function loadCounts() {
    const reply = await call("GET", "order-counts");
    if (reply.status !== 200) throw new Error(`counts: ${message(reply)}`);
    const number = (count) => (reply.data.atLeast ? `${count}+` : count);
    // The Waiting orders by what they wait for, under Waiting (when the API says).
    const kinds = (state) => (state === "Waiting" ? reply.data.waiting || [] : []).map((w) => el("tr",
      { class: "sub", "data-waiting-for": w.waitingFor },
      el("th", { scope: "row", text: `for ${w.waitingFor}` }),
      el("td", { class: "num", text: number(w.count) })));
    const rows = reply.data.items.flatMap((i) => [el("tr", {},
      el("th", { scope: "row" }, stateCell(i.processState)),
      el("td", { class: "num", text: number(i.count) }),
    ), ...kinds(i.processState)]);
    fill($("counts").tBodies[0], rows, "none", 2);
    $("counts-note").textContent = reply.data.atLeast ? "Counting stopped at its limit: at least these many." : "";
  }

  async function loadInFlight() {
    const pages = await Promise.all(IN_FLIGHT.map((state) =>
      listing(`processState=${state}&pageSize=${MAX_IN_FLIGHT}`)));
    const summaries = pages.flatMap((p) => (p.status === 200 ? p.data.items : [])).slice(0, MAX_IN_FLIGHT);
    const more = pages.some((p) => p.status === 200 && p.data.continuationToken);
    const orders = (await Promise.all(summaries.map((s) => call("GET", `orders/${enc(s.orderId)}`))))
      .filter((r) => r.status === 200).map((r) => r.data);
    // Orders of different workflows (and versions) have different steps: one column per step position,
    // each cell naming its step.
    const width = Math.max(0, ...orders.map((o) => o.steps.length));
    $("inflight").tHead.replaceChildren(el("tr", {},
      el("th", { scope: "col", text: "Order" }), el("th", { scope: "col", text: "Workflow" }),
      el("th", { scope: "col", text: "State" }),
      el("th", { scope: "col", text: "Failures" }), el("th", { scope: "col", text: "Time left" }),
      el("th", { scope: "col", text: "Waits for" }),
      ...Array.from({ length: width }, (_, i) => el("th", { scope: "col", text: `Step ${i + 1}` }))));
    const rows = orders.map((o) => el("tr", { "data-order": o.orderId },
      el("th", { scope: "row" }, openButton(o.orderId)),
      el("td", { text: `${o.workflow} v${o.workflowVersion}` }),
      el("td", {}, stateCell(o.processState)),
      el("td", { class: "num", text: o.failureCount }),
      el("td", {}, countdown(o.completeBy), o.heldUntil ? el("span", { class: "step", text: "held: breaker open" }) : null),
      el("td", { class: "waits" }, waitFor(o)),
      ...o.steps.map((s) => el("td", { "data-step": s.name, title: s.reason },
        el("span", { class: "step", text: s.name }),
        el("span", { class: "step" }, stateCell(s.state)),
        el("span", { class: "step", text: `attempts ${s.attempts}` }),
        ["Running", "Compensating", "Waiting"].includes(s.state) ? el("span", { class: "step" }, countdown(s.completeBy)) : null)),
    ));
    fill($("inflight").tBodies[0], rows, "No order is in flight.", 6 + width);
    $("inflight-note").textContent = more || summaries.length >= MAX_IN_FLIGHT
      ? `Showing the first ${orders.length}; open any order by id above.` : "";
  }

  async function loadErrors() {
    const reply = await listing(`processState=Error&pageSize=${MAX_IN_FLIGHT}`);
    if (reply.status !== 200) throw new Error(`orders in Error: ${message(reply)}`);
    const rows = reply.data.items.map((o) => el("tr", { "data-order": o.orderId },
      el("th", { scope: "row" }, openButton(o.orderId)),
      el("td", { class: "num", text: o.failureCount }),
      el("td", { text: o.lastError || "" }),
      el("td", { class: "waits" }, waitFor(o)),
      el("td", { text: when(o.updatedAt) }),
    ));
    fill($("errors").tBodies[0], rows, "No order is in Error.", 5);
    $("errors-note").textContent = reply.data.continuationToken ? `Showing the first ${rows.length}.` : "";
  }

  // What waits for a person: the Waiting orders that wait for an approval (the API filters them where it
  // can; the page filters again), and those of the orders in Error listed above whose approval's deadline
  // passed. Soonest deadline first.
  async function loadApprovals() {
    const [waiting, errors] = await Promise.all([
      listing(`processState=Waiting&waitingFor=approval&pageSize=${MAX_APPROVALS}`),
      listing(`processState=Error&pageSize=${MAX_IN_FLIGHT}`),
    ]);
    if (waiting.status !== 200) throw new Error(`orders waiting for approval: ${message(waiting)}`);
    const errored = errors.status === 200 ? errors.data.items : [];
    // An order that went from Waiting to Error between the two reads is in both: listed once, as it is now.
    const byId = new Map();
    for (const o of [...waiting.data.items, ...errored].filter((o) => o.waitingFor === "approval")) {
      const seen = byId.get(o.orderId);
      if (!seen || Date.parse(o.updatedAt) >= Date.parse(seen.updatedAt)) byId.set(o.orderId, o);
    }
    const orders = [...byId.values()].sort((a, b) => Date.parse(a.waitUntil) - Date.parse(b.waitUntil));
    const rows = orders.map((o) => el("tr", { "data-order": o.orderId },
      el("th", { scope: "row" }, openButton(o.orderId)),
      el("td", { text: `${o.workflow} v${o.workflowVersion}` }),
      el("td", {}, stateCell(o.processState)),
      el("td", { text: dated(o.waitUntil) }),
      el("td", {}, countdown(o.waitUntil)),
    ));
    fill($("approvals").tBodies[0], rows, "Nothing waits for an approval.", 5);
    const more = waiting.data.continuationToken || (errors.status === 200 && errors.data.continuationToken);
    $("approvals-note").textContent = more
      ? "More orders wait than one page holds: these are among the first ones listed." : "";
  }

  async function loadBreakers() {
    const reply = await call("GET", "breakers");
    const body = $("breakers").tBodies[0];
    if (reply.status === 404) {
      $("breakers").hidden = true;
      $("breakers-note").textContent = "breakers unavailable";
      return;
    }
    if (reply.status !== 200) throw new Error(`breakers: ${message(reply)}`);
    $("breakers").hidden = false;
    $("breakers-note").textContent = "";
    const rows = reply.data.breakers.map((b) => el("tr", {},
      el("th", { scope: "row", text: b.service }),
      el("td", {}, stateCell(b.state)),
      el("td", { class: "num", text: b.consecutiveFailures }),
      el("td", { text: when(b.openedAt) || "-" }),
      el("td", {}, b.state === "open" ? countdown(b.openUntil) : "-"),
      el("td", { text: when(b.probeBy) || "-" }),
    ));
    fill(body, rows, "no breakers", 6);
  }

  async function loadDeadLetters() {
    const reply = await call("GET", "deadletters");
    if (reply.status !== 200) throw new Error(`dead letters: ${message(reply)}`);
    const rows = reply.data.items.map((q) => el("tr", { "data-queue": q.queue },
      el("th", { scope: "row", text: q.queue }),
      el("td", { class: "num", text: q.atLeast ? `${q.count}+` : q.count }),
      el("td", {}, q.count > 0 ? el("button", {
        type: "button", text: "Show", "aria-label": `Show dead letters of ${q.queue}`,
        onclick: guard(() => showDeadLetters(q.queue)),
      }) : "-"),
    ));
    fill($("deadletters").tBodies[0], rows, "no queues", 3);
  }

  async function showDeadLetters(queue) {
    const reply = await call("GET", `deadletters/${enc(queue)}?pageSize=50`);
    if (reply.status !== 200) {
      say(`Dead letters of ${queue}: ${message(reply)}`, "error");
      return;
    }
    $("deadletter-list").hidden = false;
    $("deadletter-caption").textContent = `Dead letters of ${queue}`;
    const rows = reply.data.items.map((m) => el("tr", {},
      el("th", { scope: "row", class: "num", text: m.sequenceNumber }),
      el("td", { text: m.messageId || "" }),
      el("td", {}, m.orderId ? openButton(m.orderId) : "-"),
      el("td", { text: [m.reason, m.description].filter(Boolean).join(": ") }),
      el("td", { text: when(m.enqueuedAt) }),
      el("td", { class: "num", text: m.deliveryCount }),
      CAN_ACT ? el("td", {}, el("button", {
        type: "button", text: "Replay", "aria-label": `Replay message ${m.sequenceNumber} of ${queue}`,
        onclick: guard(() => replay(queue, m.sequenceNumber)),
      })) : null,
    ));
    fill($("deadletter-items").tBodies[0], rows, "empty", CAN_ACT ? 7 : 6);
  }

  async function replay(queue, sequenceNumber) {
    const answer = await confirmAction({
      title: `Replay message ${sequenceNumber} of ${queue}?`,
      text: "Send a copy to its queue, then drop the dead letter.",
    });
    if (!answer) {
      say("Nothing was changed.");
      return;
    }
    const reply = await call("POST", `deadletters/${enc(queue)}/${enc(sequenceNumber)}/replay`, { body: answer });
    if (reply.status === 200) say(`Message ${sequenceNumber} of ${queue} replayed.`, "ok");
    else say(`Replay refused (${message(reply)}).`, "error");
    await Promise.all([loadDeadLetters(), showDeadLetters(queue)]);
  }

  // ---- the declared workflows -----------------------------------------------------------------
  // Read once from the API's document: the body of POST /api/orders is one schema per workflow
  // (components.schemas.OrderRequest.oneOf), each the envelope (orderId, workflow) and the workflow's input.
  const ENVELOPE = ["orderId", "workflow"];

  async function loadWorkflows() {
    const reply = await call("GET", "openapi.json");
    if (reply.status !== 200) throw new Error(`workflows: ${message(reply)}`);
    const schemas = reply.data.components.schemas;
    const resolve = (schema) => {
      let found = schema || {};
      for (let hops = 0; found.$ref && hops < 20; hops += 1) found = schemas[found.$ref.split("/").pop()] || {};
      return found;
    };
    const variants = (schema) => [schema, ...(schema.anyOf || []), ...(schema.oneOf || [])].map(resolve);
    const typeOf = (schema) => {
      const s = resolve(schema);
      if (s.anyOf || s.oneOf) return [...new Set((s.anyOf || s.oneOf).map(typeOf))].join(" or ");
      if (s.const !== undefined) return JSON.stringify(s.const);
      if (s.enum) return `one of ${s.enum.map((v) => JSON.stringify(v)).join(", ")}`;
      if (s.type === "array") return `list of ${typeOf(s.items)}`;
      if (s.type === "object" && s.properties) return s.title || "object";
      return [].concat(s.type || "any").join(" or ");
    };
    const about = (schema) => {
      const notes = [];
      for (const s of variants(schema)) {
        if (s.description && !notes.includes(s.description)) notes.push(s.description);
        if (s.minLength !== undefined || s.maxLength !== undefined) notes.push(`${s.minLength ?? 0} to ${s.maxLength ?? "any"} characters`);
        if (s.minimum !== undefined || s.maximum !== undefined) notes.push(`from ${s.minimum ?? "any"} to ${s.maximum ?? "any"}`);
        if (s.exclusiveMinimum !== undefined) notes.push(`over ${s.exclusiveMinimum}`);
        if (s.exclusiveMaximum !== undefined) notes.push(`under ${s.exclusiveMaximum}`);
        if (s.minItems !== undefined || s.maxItems !== undefined) notes.push(`${s.minItems ?? 0} to ${s.maxItems ?? "any"} items`);
        if (s.pattern) notes.push(`pattern ${s.pattern}`);
        if (s.format) notes.push(s.format);
      }
      if (schema.default !== undefined) notes.push(`default ${JSON.stringify(schema.default)}`);
      // A sensitive field (engine.workflow.sensitive): the order's input panel shows it [redacted].
      if (schema.writeOnly) notes.push("sensitive: never shown, kept sealed until no step needs it");
      return notes.join("; ");
    };
    // One row per field, nested ones by path as conditions name them (items[].sku).
    const rows = (schema, prefix, depth) => Object.entries(schema.properties || {})
      .filter(([name]) => depth > 0 || !ENVELOPE.includes(name))
      .flatMap(([name, field]) => {
        const path = prefix + name;
        const target = resolve(field);
        const inner = target.type === "array" ? resolve(target.items) : target;
        const below = inner.properties && depth < 5 ? rows(inner, target.type === "array" ? `${path}[].` : `${path}.`, depth + 1) : [];
        return [el("tr", { "data-field": path },
          el("th", { scope: "row" }, el("code", { text: path })),
          el("td", { text: typeOf(field) }),
          el("td", { text: (schema.required || []).includes(name) ? "required" : "optional" }),
          el("td", { text: about(field) }),
        ), ...below];
      });
    const workflows = (schemas.OrderRequest.oneOf || [schemas.OrderRequest]).map((ref) => {
      const schema = resolve(ref);
      const name = schema.title;
      const isDefault = !(schema.required || []).includes("workflow");
      const fields = rows(schema, "", 0);
      const table = el("table", {},
        el("caption", { text: "Input fields" }),
        el("thead", {}, el("tr", {}, ...["Field", "Type", "Required", "About"].map((h) => el("th", { scope: "col", text: h })))),
        el("tbody", {}));
      fill(table.tBodies[0], fields, schema.additionalProperties === false ? "no input fields" : "any fields", 4);
      const examples = schema.examples || [];
      return el("article", { class: "workflow", "data-workflow": name },
        el("h3", { text: `${name} v${schema["x-workflow-version"] ?? "?"}` }),
        el("p", { text: schema.description || "" }),
        el("p", { class: "meta", text: isDefault
          ? "The default: a body that names no workflow runs it."
          : `Name it in the body: "workflow": "${name}".` }),
        table,
        examples.length ? el("details", {},
          el("summary", { text: `Examples (${examples.length})` }),
          ...examples.map((e) => el("pre", { class: "json", text: JSON.stringify(e, null, 2) }))) : null);
    });
    $("workflows").replaceChildren(...workflows);
    $("workflows-note").textContent = workflows.length ? "" : "No workflow is declared.";
  }

  // ---- refresh loop ----------------------------------------------------------------------------
  async function refresh() {
    if (refreshing) return;
    refreshing = true;
    clearTimeout(timer);
    const slow = tick % SLOW_EVERY === 0;
    tick += 1;
    listings = new Map();
    const parts = [loadInFlight(), loadErrors(), loadApprovals(), loadBreakers()];
    if (slow) parts.push(loadCounts(), loadDeadLetters());
    const results = await Promise.allSettled(parts);
    const failed = results.filter((r) => r.status === "rejected").map((r) => r.reason.message);
    if (failed.length) say(`Could not refresh everything: ${failed.join("; ")}`, "error");
    $("refreshed").textContent = new Date().toLocaleTimeString();
    document.body.dataset.refreshes = String(tick);
    refreshing = false;
    timer = setTimeout(refresh, REFRESH_MS);
  }

  if (!CAN_ACT) {
    // Read only: no action controls at all, not even disabled ones. An approver keeps what approving
    // and rejecting need (the steps' action column, the confirmation), and nothing else.
    if (CAN_APPROVE) document.querySelectorAll("[data-approves]").forEach((node) => node.removeAttribute("data-acts"));
    document.querySelectorAll("[data-acts]").forEach((node) => node.remove());
  }
  $("refresh").addEventListener("click", () => { tick = 0; refresh(); });
  $("order-reload").addEventListener("click", guard(() => selected && openOrder(selected.order.orderId)));
  if (CAN_ACT) {
    $("order-resubmit").addEventListener("click", guard(() => act("resubmit", "Resubmit")));
    $("order-cancel").addEventListener("click", guard(() => act("cancel", "Cancel")));
    $("order-update").addEventListener("click", guard(() => act("update", "Update input")));
  }
  $("open-order").addEventListener("submit", guard((event) => {
    event.preventDefault();
    return openOrder($("order-id").value.trim());
  }));
  $("find-orders").addEventListener("submit", guard((event) => {
    event.preventDefault();
    return findOrders(false);
  }));
  $("find-more").addEventListener("click", guard(() => findOrders(true)));
  $("call-close").addEventListener("click", hideCall);
  $("order-heading").tabIndex = -1;
  document.addEventListener("visibilitychange", () => { if (!document.hidden) refresh(); });
  setInterval(ticking, 1000);
  refresh();
  // The workflows change only with a deployment, which serves a new page: read them once.
  guard(loadWorkflows)();
})();
