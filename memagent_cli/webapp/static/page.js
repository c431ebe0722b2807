// memagent serve: the page's own script. The pages read fully without it; it adds what changes
// (a reading's steps as they are recorded, the list of runs), steps loaded as they are scrolled to,
// and keys. It talks only to this server.
"use strict";

const $ = (selector, root = document) => root.querySelector(selector);
const $$ = (selector, root = document) => Array.from(root.querySelectorAll(selector));

function appendSteps(html) {
  const list = $("#steps");
  if (!list) return;
  const holder = document.createElement("ol");
  holder.innerHTML = html;
  for (const item of Array.from(holder.children)) {
    if (!document.getElementById(item.id)) list.appendChild(item);
  }
  markEvidence();
}

// Steps loaded as they are scrolled to (or until the one a link names is there).
let nextSteps = null;
let loadingSteps = false;
async function loadMore() {
  if (!nextSteps || loadingSteps) return;
  loadingSteps = true;
  try {
    const response = await fetch(nextSteps, { credentials: "same-origin" });
    if (!response.ok) return;
    appendSteps(await response.text());
    nextSteps = response.headers.get("X-Next") || null;
    if (!nextSteps) { const more = $("#more"); if (more) more.remove(); }
  } finally {
    loadingSteps = false;
  }
  const wanted = location.hash.match(/^#step-(\d+)$/);
  if (wanted && !document.getElementById(`step-${wanted[1]}`) && nextSteps) {
    await loadMore();
  } else if (wanted) {
    const target = document.getElementById(`step-${wanted[1]}`);
    if (target && !target.dataset.shown) { target.dataset.shown = "1"; target.scrollIntoView(); }
  }
}

function watchMore() {
  const link = $("#more a[data-next]");
  if (!link) return;
  nextSteps = link.dataset.next;
  const observer = new IntersectionObserver((seen) => { if (seen.some((s) => s.isIntersecting)) loadMore(); },
                                            { rootMargin: "1200px" });
  observer.observe($("#more"));
  if (/^#step-\d+$/.test(location.hash) && !$(location.hash)) loadMore();
}

// A long run's evidence marks come once its page is drawn.
let evidence = null;
function markEvidence() {
  if (!evidence) return;
  for (const index of evidence) {
    const step = document.getElementById(`step-${index}`);
    if (step && !step.classList.contains("evidence")) {
      step.classList.add("evidence");
      const badge = $(".badge", step);
      if (badge) badge.hidden = false;
    }
  }
}
async function loadEvidence() {
  const run = $("#run");
  if (!run || !run.dataset.evidence) return;
  const response = await fetch(run.dataset.evidence, { credentials: "same-origin" });
  if (response.ok) { evidence = (await response.json()).evidence; markEvidence(); }
}

// A reading in progress: its steps as they are recorded, its progress, and the page again once it ends.
function followRun() {
  const run = $("#run");
  if (!run || !run.dataset.live) return;
  const source = new EventSource(run.dataset.live);
  source.addEventListener("steps", (event) => { if (!nextSteps) appendSteps(event.data); });
  source.addEventListener("progress", (event) => {
    const state = JSON.parse(event.data);
    for (const id of ["count", "progress"]) { const el = document.getElementById(id); if (el) el.textContent = state.steps; }
    const bar = $("#bar");
    if (bar) { if (state.total) bar.max = state.total; bar.value = state.done; }
    const status = $("#status");
    if (status) { status.textContent = state.status; status.className = `status ${state.status}`; }
  });
  source.addEventListener("ended", () => { source.close(); location.reload(); });
}

// The list of runs, or a watch's table, drawn again when what it shows changes.
function followList() {
  const box = $("#runs") || $("#watch");
  if (!box || !box.dataset.live) return;
  const source = new EventSource(box.dataset.live);
  source.addEventListener("changed", async () => {
    const response = await fetch(box.dataset.fragment, { credentials: "same-origin" });
    if (response.ok) box.innerHTML = await response.text();
  });
}

// A reading the page started: its run once recorded.
function waitForReading() {
  const pending = $("#pending");
  if (!pending) return;
  const poll = async () => {
    const response = await fetch(`${pending.dataset.poll}?json=1`, { credentials: "same-origin" });
    if (response.ok) {
      const state = await response.json();
      if (state.run) { location.assign(state.run); return; }
      if (state.error) { location.reload(); return; }
      const waiting = $("#waiting");
      if (waiting) waiting.textContent = state.waiting;
    }
    setTimeout(poll, 300);
  };
  poll();
}

// Keys: j/k between rows or steps, Enter opens a row, / searches, g then r/c/a goes to a page, ? lists them.
let pendingG = false;
function focusables() { return $$("tr.row, li.step, li.turn"); }
function move(by) {
  const items = focusables();
  if (!items.length) return;
  const at = items.indexOf(document.activeElement);
  const next = items[Math.max(0, Math.min(items.length - 1, at < 0 ? 0 : at + by))];
  if (!next.hasAttribute("tabindex")) next.tabIndex = -1;
  next.focus();
  next.scrollIntoView({ block: "nearest" });
}
document.addEventListener("keydown", (event) => {
  const typing = /^(INPUT|TEXTAREA|SELECT)$/.test(event.target.tagName);
  if (typing || event.ctrlKey || event.metaKey || event.altKey) return;
  if (pendingG) {
    pendingG = false;
    const to = { r: "/", c: "/conversations", w: "/watches", a: "/ask" }[event.key];
    if (to) { location.assign(to); event.preventDefault(); }
    return;
  }
  if (event.key === "j") { move(1); event.preventDefault(); }
  else if (event.key === "k") { move(-1); event.preventDefault(); }
  else if (event.key === "g") { pendingG = true; }
  else if (event.key === "/") { const box = $("[data-key='/']"); if (box) { box.focus(); event.preventDefault(); } }
  else if (event.key === "?") { const keys = $("#keys"); if (keys) keys.showModal(); }
  else if (event.key === "Enter" && document.activeElement && document.activeElement.dataset.href) {
    location.assign(document.activeElement.dataset.href);
  }
});
document.addEventListener("click", (event) => {
  const row = event.target.closest("tr.row");
  if (row && !event.target.closest("a, button, input") && !getSelection().toString()) location.assign(row.dataset.href);
});

document.addEventListener("DOMContentLoaded", () => {
  watchMore();
  loadEvidence();
  followRun();
  followList();
  waitForReading();
});
