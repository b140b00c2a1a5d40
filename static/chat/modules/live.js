// The live channel: a websocket per conversation page, its events applied, catch-ups asked for,
// and reconnects with equal jitter (docs/live-protocol.md).

import { keepDraft, signedOut, tooManyTabs } from "./composer.js";
import { announce, exchangesBox, fragmentOf, nearBottom, scrollToEnd } from "./dom.js";
import { awaitingSync, waiting, progressed, sameStatus, upsertFragment } from "./exchanges.js";
import { localTimes } from "./enhance.js";
import { renderSoon } from "./markdown.js";

const SESSION_ENDED = 4401; // the server closed the socket: logout, new password, deactivated
const CONVERSATION_DELETED = 4404; // deleted, from this tab or another one
const TOO_MANY_SOCKETS = 4429; // this person has CONTINUITY_SOCKETS_PER_USER sockets open
// Reconnecting: the backoff doubles from RECONNECT_BASE_MS, at most RECONNECT_SOON_CAP_MS for
// the first RECONNECT_SOON_MS after the socket was lost (a restarted web server is back within
// seconds, and the page must be live within about one of it), then up to RECONNECT_CAP_MS.
const RECONNECT_BASE_MS = 250;
const RECONNECT_SOON_CAP_MS = 1000;
const RECONNECT_SOON_MS = 30000;
const RECONNECT_CAP_MS = 10000;

export function liveChannel(main) {
  const indicator = main.querySelector("[data-live-indicator]");
  let socket = null;
  let failures = 0;
  let lostAt = null; // performance.now() when the socket was lost; null while it is open
  let signedIn = true; // false from a SESSION_ENDED close until a socket opens again
  let crowded = false; // true from a TOO_MANY_SOCKETS close until a socket opens again

  const setLive = (text, live) => {
    if (!indicator) return;
    indicator.textContent = text;
    indicator.classList.toggle("on", live);
  };

  // Everything up to this message id has reached the page from the server's catch-up
  // renderings (live events may have been missed, so they do not move it).
  let syncedUpTo = Number(exchangesBox().dataset.syncedUpTo || 0);
  const unfinishedIds = () =>
    [...exchangesBox().querySelectorAll("[data-exchange]")]
      .filter((el) => el.dataset.state === "queued" || el.dataset.state === "processing")
      .map((el) => Number(el.dataset.messageId));

  function sync(waiting) {
    if (!socket || socket.readyState !== WebSocket.OPEN) return;
    socket.send(JSON.stringify({ type: "sync", after: syncedUpTo, waiting }));
  }

  // Live updates are at-most-once (a stalled Redis drops them, see docs/live-protocol.md): while an
  // exchange is queued or being answered the page asks for it again, at a random moment
  // within resyncMs each time (full jitter: pages that lost the same updates do not all ask
  // at once), and when the slow hint appears.
  const resyncMs = Number(main.dataset.resyncMs ?? 15000);
  function resyncWaiting() {
    const ids = unfinishedIds();
    if (ids.length) sync(ids);
  }
  function resyncLater() {
    setTimeout(() => {
      resyncWaiting();
      resyncLater();
    }, Math.random() * resyncMs);
  }
  if (resyncMs > 0) resyncLater();

  function syncOne(messageId) {
    if (awaitingSync.has(messageId)) return;
    awaitingSync.add(messageId);
    sync([messageId]);
  }

  function applyChunk(event) {
    const exchange = document.getElementById(`exchange-${event.message_id}`);
    // Chunks held back behind a rendering come after it: one already answered (or that
    // could not be, or is hidden) has all it will show, and asks for nothing.
    if (exchange && !waiting(exchange)) return;
    const box = exchange && exchange.querySelector("[data-streaming]");
    if (!box || Number(box.dataset.run) !== event.run_id) {
      if (!box || Number(box.dataset.run) < event.run_id) syncOne(event.message_id);
      return;
    }
    const seen = Number(exchange.dataset.seq || 0);
    if (event.seq <= seen) return;
    if (event.seq !== seen + 1) {
      syncOne(event.message_id); // a chunk went missing: fetch the stored reply instead
      return;
    }
    const wasNearBottom = nearBottom();
    box.querySelector(".streamed").textContent += event.text;
    exchange.dataset.seq = String(event.seq);
    progressed(event.message_id);
    renderSoon(box);
    scrollToEnd(wasNearBottom);
  }

  // How often the shown branch had changed when the page last learned of it: a catch-up
  // that reports another count means a change was missed while offline, so the page reloads.
  // Unless the change's own event follows: a catch-up read just after a switch was committed
  // overtakes it on the socket, and the event then hides and shows the right exchanges.
  const box = exchangesBox();
  const BRANCH_EVENT_GRACE_MS = 2000;
  let reloadUnlessBranch = null; // {branch, timer} while a catch-up's branch count is unmet
  function reloadKeepingDraft() {
    keepDraft();
    window.location.reload();
  }
  function branchLearned(branch) {
    box.dataset.branch = String(branch);
    if (reloadUnlessBranch && branch >= reloadUnlessBranch.branch) {
      clearTimeout(reloadUnlessBranch.timer);
      reloadUnlessBranch = null;
    }
  }

  function receive(event) {
    if (event.type === "exchanges") {
      const catchUp = event.up_to !== undefined;
      if (catchUp && event.branch !== Number(box.dataset.branch)) {
        if (event.branch < Number(box.dataset.branch)) return reloadKeepingDraft();
        if (!reloadUnlessBranch) {
          const timer = setTimeout(reloadKeepingDraft, BRANCH_EVENT_GRACE_MS);
          reloadUnlessBranch = { branch: event.branch, timer };
        }
      } else if (event.branch !== undefined) branchLearned(event.branch);
      upsertFragment(fragmentOf(event.html));
      if (event.status) showStatus(event.status);
      if (event.up_to) syncedUpTo = Math.max(syncedUpTo, event.up_to);
    }
    else if (event.type === "reload") reloadKeepingDraft();
    else if (event.type === "chunk") applyChunk(event);
    else if (event.type === "status") showStatus(event.html);
    else if (event.type === "conversations") showConversations(event.html);
    else if (event.type === "error") console.warn("Continuity:", event.error);
  }

  // The status by the composer, with the conversation's title (renamed, titled after its
  // first reply, archived).
  function showStatus(html) {
    const fragment = fragmentOf(html);
    const status = document.getElementById("conversation-status");
    const incoming = fragment.getElementById("conversation-status");
    if (status && incoming && !sameStatus(status, incoming)) {
      status.replaceWith(incoming);
      htmx.process(incoming); // its *Retry now* form posts with htmx (and the CSRF header)
      localTimes(incoming); // a deadline it names, in the reader's time
      // Said by the page's one live region: a banner inserted anew is not read out by every
      // screen reader, and "Answering…" must not stay the last thing said.
      const said = incoming.querySelector("[data-announce]");
      if (said) announce(said.dataset.announce);
    }
    const title = document.getElementById("conversation-title");
    const newTitle = fragment.getElementById("conversation-title");
    if (title && newTitle && title.innerHTML !== newTitle.innerHTML) {
      title.replaceWith(newTitle);
      const name = newTitle.firstChild.textContent.trim();
      document.title = document.title.replace(/^.*?(?= · Continuity$)/, () => name);
    }
  }

  // The person's conversations, as the sidebar lists them: started, titled, renamed,
  // archived, paused, resumed or deleted, here or in another tab.
  function showConversations(html) {
    const list = document.getElementById("conversation-list");
    const incoming = fragmentOf(html).getElementById("conversation-list");
    if (!list || !incoming || list.innerHTML === incoming.innerHTML) return;
    const focused = list.contains(document.activeElement) && document.activeElement.getAttribute("href");
    list.replaceWith(incoming);
    localTimes(incoming); // when two of the same title were started, in the reader's time
    if (focused) incoming.querySelector(`a[href="${CSS.escape(focused)}"]`)?.focus();
  }

  function open() {
    const scheme = location.protocol === "https:" ? "wss" : "ws";
    socket = new WebSocket(`${scheme}://${location.host}${main.dataset.wsPath}`);
    socket.addEventListener("open", () => {
      failures = 0;
      lostAt = null;
      signedIn = true;
      // Signed in again (another tab, or this session survived a password change).
      const errors = document.querySelector("[data-composer-errors][data-signed-out]");
      if (errors) {
        errors.textContent = "";
        delete errors.dataset.signedOut;
      }
      if (crowded) tooManyTabs(false);
      crowded = false;
      awaitingSync.clear();
      setLive("live", true);
      sync(unfinishedIds());
    });
    socket.addEventListener("message", (message) => receive(JSON.parse(message.data)));
    socket.addEventListener("close", (closed) => {
      if (closed.code === CONVERSATION_DELETED) {
        setLive("deleted", false);
        window.location.assign("/");
        return;
      }
      if (closed.code === SESSION_ENDED) {
        signedIn = false;
        signedOut();
      }
      if ((closed.code === TOO_MANY_SOCKETS) !== crowded) {
        // Refused for too many tabs, or no longer: a later close for another reason (a network
        // loss, a sign-out) says that reason, and reconnects at the usual pace.
        crowded = !crowded;
        tooManyTabs(crowded);
      }
      // Signed out, the page keeps trying (a sign-in in another tab lets it back in), and each
      // refused try is still "signed out", not a network trouble. Refused for too many tabs,
      // it tries at the slow pace: a tab closed elsewhere lets it in.
      setLive(crowded ? "too many tabs" : signedIn ? "reconnecting…" : "signed out", false);
      failures += 1;
      lostAt ??= performance.now();
      const soon = !crowded && performance.now() - lostAt < RECONNECT_SOON_MS;
      const backoff = Math.min(
        soon ? RECONNECT_SOON_CAP_MS : RECONNECT_CAP_MS,
        RECONNECT_BASE_MS * 2 ** failures,
      );
      // Equal jitter: between half the backoff and all of it, so that the pages a restarted
      // server dropped come back spread out, and none waits longer than the backoff.
      setTimeout(open, backoff / 2 + (Math.random() * backoff) / 2);
    });
  }

  open();
  return resyncWaiting;
}
