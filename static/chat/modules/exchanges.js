// Exchanges upserted by version, their answer status announced once per change, keyboard focus
// kept, and the composer-side hints (slow, countdown).

import { announce, exchangesBox, nearBottom, scrollToEnd } from "./dom.js";
import { enhance } from "./enhance.js";

// An exchange is replaced only by a rendering at least as new: (version, streamed chunk seq).
const rank = (el) => [Number(el.dataset.version || 0), Number(el.dataset.seq || 0)];
const olderThan = (a, b) => a[0] < b[0] || (a[0] === b[0] && a[1] < b[1]);

export const awaitingSync = new Set();

// The status of answers is announced once per change ("Answering…", "Answered") by a small
// live region, not by the exchanges, which would have a screen reader read every token.
const ANSWER_LABELS = { processing: "Answering…", done: "Answered", dead: "Could not be answered" };
const announcedLabel = new Map(); // message id -> the label last announced (or seen at load)

// A message sent back to the queue after its answer began was cut off: "Answering…" would
// stay the last thing said while it waits.
const AGAIN_LABEL = "Cut off; waiting to be answered again";

export function noteState(exchange, { quietly = false } = {}) {
  const id = Number(exchange.dataset.messageId);
  const again = exchange.dataset.state === "queued" && announcedLabel.get(id) === ANSWER_LABELS.processing;
  const label = again ? AGAIN_LABEL : ANSWER_LABELS[exchange.dataset.state];
  if (!label || announcedLabel.get(id) === label) return;
  announcedLabel.set(id, label);
  // The status by the composer says why a cut-off message waits (paused, counting down, no
  // assistant running) and is announced when it changes: whichever of the two events comes
  // last, that reason stays the last thing said, not the vaguer "waiting again".
  const explained = again && document.querySelector("#conversation-status [data-announce]");
  if (!quietly && !explained) announce(label);
}

// Composer-side hints. A waiting message that has shown no progress (no new rendering, no
// chunk) for SLOW_AFTER_MS gets "taking longer than usual…": the system may still be
// detecting an interruption. A backoff shows a countdown, computed from the seconds left as
// the server saw them, so a client clock that is off does not matter.
const SLOW_AFTER_MS = 5000;
const RECONNECTING_SAYS = "Reconnecting to the server… Your message is kept.";
const pageStart = performance.now();
const lastProgress = new Map(); // message id -> performance.now() of its last progress
export const progressed = (messageId) => lastProgress.set(Number(messageId), performance.now());
let shownStatus = null;
let countdownEnd = null;

function tickCountdown(status, now) {
  if (status !== shownStatus) {
    shownStatus = status;
    const countdown = status && status.querySelector("[data-countdown]");
    countdownEnd = countdown ? now + Number(countdown.dataset.retryIn) * 1000 : null;
  }
  const countdown = status && status.querySelector("[data-countdown]");
  if (!countdown || countdownEnd === null) return false;
  const left = Math.ceil((countdownEnd - now) / 1000);
  if (left > 0) {
    countdown.textContent = `Picking up again in ${left} s…`;
    return true;
  }
  countdown.textContent = "Picking up again now…";
  status.querySelector("[data-retry] form")?.remove();
  return false;
}

export const waiting = (el) => el.dataset.state === "queued" || el.dataset.state === "processing";

// A catch-up sends the status again: the same one stays in place (its live region is not read
// out again, a focused *Retry now* keeps focus), as does a countdown that still agrees.
export function sameStatus(current, incoming) {
  const marks = [
    "[data-paused]", "[data-retry]", "[data-resuming]", "[data-taken-over]", "[data-assistant-back]",
    "[data-approval-due]", "[data-no-worker]",
  ];
  const kind = (el) => [el.dataset.state, ...marks.map((mark) => !!el.querySelector(mark))].join();
  if (kind(current) !== kind(incoming)) return false;
  const countdown = incoming.querySelector("[data-countdown]");
  if (!countdown) return true;
  const now = performance.now();
  const end = now + Number(countdown.dataset.retryIn) * 1000;
  const counting = current === shownStatus && countdownEnd !== null && countdownEnd > now;
  return counting && Math.abs(end - countdownEnd) < 2000;
}

// A running tool call shows how long it has run: from the seconds the server counted when it
// rendered the block, so a client clock that is off does not matter.
const runningSince = new WeakMap(); // element -> performance.now() when it had run 0 s

function tickToolCalls(now) {
  for (const el of document.querySelectorAll("[data-running-for]")) {
    if (!runningSince.has(el)) runningSince.set(el, now - Number(el.dataset.runningFor) * 1000);
    el.textContent = `${Math.floor((now - runningSince.get(el)) / 1000)} s`;
  }
}

// onSlow: called when the hint appears, which may be the only sign that updates were lost.
export function tickHints(onSlow) {
  const now = performance.now();
  const status = document.getElementById("conversation-status");
  // A countdown at zero ("Picking up again now…") still explains the wait.
  tickCountdown(status, now);
  tickToolCalls(now);
  const waitExplained = !!status?.querySelector(
    "[data-paused], [data-resuming], [data-retry], [data-taken-over], [data-approval-due], [data-deciding], [data-no-worker]",
  );
  const hint = document.querySelector("[data-slow-hint]");
  if (!hint) return;
  // Not connected: the wait is the connection's, not the assistant's.
  hint.dataset.assistantSays ??= hint.textContent;
  const offline = !!document.querySelector("[data-live-indicator]:not(.on)");
  const says = offline ? RECONNECTING_SAYS : hint.dataset.assistantSays;
  if (hint.textContent !== says) hint.textContent = says;
  const slow = [...document.querySelectorAll("[data-exchange]")].some(
    (el) =>
      waiting(el) &&
      now - (lastProgress.get(Number(el.dataset.messageId)) ?? pageStart) > SLOW_AFTER_MS,
  );
  const wasHidden = hint.hidden;
  hint.hidden = waitExplained || !slow;
  if (wasHidden && !hint.hidden) onSlow();
}

// Exchanges that a new version or a switch of versions hid: (version, seq) at removal, so
// that an older rendering arriving late does not bring them back.
const removedAt = new Map();

// Only the shown window is kept live: older exchanges load with their page (scrolling up),
// and a page opened on older messages (?before=) does not grow at its end.
function outsideWindow(box, id) {
  const older = box.querySelector("[data-load-older]");
  const end = Number(box.dataset.windowEnd || 0);
  return (older && id < Number(older.dataset.loadOlder)) || (end && id >= end);
}

// Keyboard focus follows what it was on: an in-thread action's answer names the exchange
// to focus (the one acted on, or its replacement: a new version, the message asked again),
// which may reach the page only later, over the websocket; and an exchange rendered again
// while focus is inside it keeps focus on the same control, or on itself.
let focusWanted = null; // the message id of the exchange to focus once it is shown
let focusWantedUntil = 0; // …if it is shown soon: later, the reader has moved on
const FOCUS_WAIT_MS = 15000;

function focusExchange(id) {
  const exchange = document.getElementById(`exchange-${id}`);
  if (!exchange || exchange.hidden) {
    focusWanted = id;
    focusWantedUntil = performance.now() + FOCUS_WAIT_MS;
    return;
  }
  focusWanted = null;
  exchange.tabIndex = -1;
  exchange.focus();
}

document.addEventListener("continuity:focus-exchange", (event) => focusExchange(event.detail.id));

// Controls that a new rendering of an exchange has again, found by what they are.
const SAME_CONTROLS = ["[data-stop]", "[data-retry-message]", "[data-regenerate] button",
  "[data-continue] button", "[data-edit] > summary", "[data-earlier-attempts] > summary",
  "[data-recovery] a", ".copy"];

function keepFocus(current, incoming) {
  const focused = document.activeElement;
  if (!focused || focused === document.body || !current.contains(focused)) return null;
  return () => {
    const same = SAME_CONTROLS.find((control) => focused.matches(control));
    const target = (same && incoming.querySelector(same)) || incoming;
    if (target === incoming) incoming.tabIndex = -1;
    target.focus({ preventScroll: true });
  };
}

function upsertExchange(box, incoming) {
  const current = document.getElementById(incoming.id);
  const id = Number(incoming.dataset.messageId);
  awaitingSync.delete(id);
  if (removedAt.has(id) && olderThan(rank(incoming), removedAt.get(id))) return;
  if (current && olderThan(rank(incoming), rank(current))) return;
  // Catch-ups render waiting exchanges again and again: one that has not changed is neither
  // progress (a slow hint stays) nor replaced (focus, a selection, the streamed text stay).
  const unchanged = current && !olderThan(rank(current), rank(incoming));
  if (unchanged && waiting(current) && current.dataset.state === incoming.dataset.state) return;
  if (!unchanged) progressed(id);
  if ("hidden" in incoming.dataset) {
    removedAt.set(id, rank(incoming));
    current?.remove();
    return;
  }
  const refocus = current && keepFocus(current, incoming);
  if (current) current.replaceWith(incoming);
  else {
    if (outsideWindow(box, id)) return;
    const next = [...box.querySelectorAll("[data-exchange]")].find(
      (el) => Number(el.dataset.messageId) > id,
    );
    box.insertBefore(incoming, next || box.querySelector(".newer"));
  }
  htmx.process(incoming); // its Stop and Retry forms post with htmx (and the CSRF header)
  enhance(incoming);
  noteState(incoming);
  refocus?.();
  if (id === focusWanted && performance.now() < focusWantedUntil) focusExchange(id);
}

export function upsertFragment(fragment) {
  const box = exchangesBox();
  if (!box) return;
  const wasNearBottom = nearBottom();
  fragment.querySelectorAll("[data-exchange]").forEach((el) => upsertExchange(box, el));
  scrollToEnd(wasNearBottom);
}
