// Continuity chat: upserts of versioned exchanges, live reply streaming (shown as Markdown),
// copy buttons, local times, the conversations drawer, and the keyboard shortcuts.
(() => {
  "use strict";

  // An exchange is replaced only by a rendering at least as new: (version, streamed chunk seq).
  const rank = (el) => [Number(el.dataset.version || 0), Number(el.dataset.seq || 0)];
  const olderThan = (a, b) => a[0] < b[0] || (a[0] === b[0] && a[1] < b[1]);

  const exchangesBox = () => document.getElementById("exchanges");
  const SESSION_ENDED = 4401; // the server closed the socket: logout, new password, deactivated
  const CONVERSATION_DELETED = 4404; // deleted, from this tab or another one
  // Reconnecting: the backoff doubles from RECONNECT_BASE_MS up to RECONNECT_CAP_MS.
  const RECONNECT_BASE_MS = 250;
  const RECONNECT_CAP_MS = 10000;
  const awaitingSync = new Set();

  // On the chat page the exchanges scroll in their own box (app.css); elsewhere, the page does.
  function scroller() {
    const box = exchangesBox();
    const own = box && getComputedStyle(box).overflowY !== "visible";
    return own ? box : document.scrollingElement;
  }

  function nearBottom() {
    const el = scroller();
    return el.scrollHeight - el.scrollTop - el.clientHeight < 120;
  }

  function scrollToEnd(wasNearBottom) {
    const el = scroller();
    if (wasNearBottom) el.scrollTop = el.scrollHeight;
  }

  // The status of answers is announced once per change ("Answering…", "Answered") by a small
  // live region, not by the exchanges, which would have a screen reader read every token.
  const ANSWER_LABELS = { processing: "Answering…", done: "Answered", dead: "Could not be answered" };
  const announcedLabel = new Map(); // message id -> the label last announced (or seen at load)

  function announce(text) {
    const status = document.querySelector("[data-answer-status]");
    if (status) status.textContent = text;
  }

  function noteState(exchange, { quietly = false } = {}) {
    const id = Number(exchange.dataset.messageId);
    const label = ANSWER_LABELS[exchange.dataset.state];
    if (!label || announcedLabel.get(id) === label) return;
    announcedLabel.set(id, label);
    if (!quietly) announce(label);
  }

  // Composer-side hints. A pending message that has shown no progress (no new rendering, no
  // chunk) for SLOW_AFTER_MS gets "taking longer than usual…": the system may still be
  // detecting an interruption. A backoff shows a countdown, computed from the seconds left as
  // the server saw them, so a client clock that is off does not matter.
  const SLOW_AFTER_MS = 5000;
  const pageStart = performance.now();
  const lastProgress = new Map(); // message id -> performance.now() of its last progress
  const progressed = (messageId) => lastProgress.set(Number(messageId), performance.now());
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

  const pending = (el) => el.dataset.state === "queued" || el.dataset.state === "processing";

  // A catch-up sends the status again: the same one stays in place (its live region is not read
  // out again, a focused *Retry now* keeps focus), as does a countdown that still agrees.
  function sameStatus(current, incoming) {
    const marks = [
      "[data-paused]", "[data-retry]", "[data-resuming]", "[data-taken-over]", "[data-assistant-back]",
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

  // onSlow: called when the hint appears, which may be the only sign that updates were lost.
  function tickHints(onSlow) {
    const now = performance.now();
    const status = document.getElementById("conversation-status");
    // A countdown at zero ("Picking up again now…") still explains the wait.
    tickCountdown(status, now);
    const waitExplained = !!status?.querySelector(
      "[data-paused], [data-resuming], [data-retry], [data-taken-over]",
    );
    const hint = document.querySelector("[data-slow-hint]");
    if (!hint) return;
    const slow = [...document.querySelectorAll("[data-exchange]")].some(
      (el) =>
        pending(el) &&
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
    // Catch-ups render pending exchanges again and again: one that has not changed is neither
    // progress (a slow hint stays) nor replaced (focus, a selection, the streamed text stay).
    const unchanged = current && !olderThan(rank(current), rank(incoming));
    if (unchanged && pending(current) && current.dataset.state === incoming.dataset.state) return;
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

  function upsertFragment(fragment) {
    const box = exchangesBox();
    if (!box) return;
    const wasNearBottom = nearBottom();
    fragment.querySelectorAll("[data-exchange]").forEach((el) => upsertExchange(box, el));
    scrollToEnd(wasNearBottom);
  }

  function fragmentOf(html) {
    const template = document.createElement("template");
    template.innerHTML = html;
    return template.content;
  }

  // A streaming reply is shown as Markdown while it grows. Its chunks are untrusted text (a
  // model can be prompt-injected), so the text so far is rendered by marked with the server's
  // rules (raw HTML escaped, images turned into links, as chat/rendering.py does), then
  // sanitized by DOMPurify into a DOM fragment: nothing unsanitized is ever parsed into the page,
  // and the CSP would refuse an inline handler anyway. The raw text stays in .streamed (hidden):
  // chunks append to it and a catch-up replaces it. The finished reply is rendered on the server.
  const SAFE_URL = /^(?:(?:https?|mailto):|[^a-z]|[a-z+.-]+(?:[^a-z+.\-:]|$))/i;
  const PURIFY = {
    USE_PROFILES: { html: true },
    FORBID_TAGS: ["img", "picture", "video", "audio", "source", "iframe", "style", "form", "input",
      "button", "textarea", "select"],
    FORBID_ATTR: ["style", "class", "id", "srcset"],
    ALLOWED_URI_REGEXP: SAFE_URL,
    RETURN_DOM_FRAGMENT: true,
  };
  let streamParser; // undefined: not set up yet; null: no Markdown (the raw text shows)

  function streamMarkdown() {
    if (streamParser !== undefined) return streamParser;
    if (!window.marked || !window.DOMPurify || !DOMPurify.isSupported) return (streamParser = null);
    const escape = (text) => String(text).replace(/[&<>"']/g, (c) => `&#${c.charCodeAt(0)};`);
    streamParser = new marked.Marked({
      gfm: true,
      breaks: true,
      renderer: {
        html: ({ text }) => escape(text),
        image: ({ href, text }) => `<a href="${escape(href || "")}">${escape(text || href || "")}</a>`,
        // A task list item shows its box as the stored reply does: as the text "[ ]" or "[x]".
        checkbox: ({ checked }) => (checked ? "[x] " : "[ ] "),
      },
    });
    DOMPurify.addHook("afterSanitizeAttributes", (node) => {
      if (node.tagName === "A") node.setAttribute("rel", "noopener noreferrer nofollow");
    });
    return streamParser;
  }

  function renderStreamed(bubble) {
    const parser = streamMarkdown();
    const raw = bubble.querySelector(".streamed");
    if (!parser || !raw) return;
    let shown = bubble.querySelector("[data-streamed-html]");
    if (!shown) {
      shown = document.createElement("div");
      shown.className = "streamed-html markdown";
      shown.dataset.streamedHtml = "";
      raw.after(shown);
      bubble.classList.add("rendered");
    }
    const fragment = DOMPurify.sanitize(parser.parse(raw.textContent), PURIFY);
    // The cursor goes at the end of the last line of text, not below the last block.
    let end = fragment;
    while (end.lastElementChild && !/^(PRE|TABLE|HR|BR)$/.test(end.lastElementChild.tagName)) {
      end = end.lastElementChild;
    }
    const cursor = document.createElement("span");
    cursor.className = "cursor";
    cursor.setAttribute("aria-hidden", "true");
    end.append(cursor);
    fragment.querySelectorAll("pre").forEach(scrollableByKeyboard);
    shown.replaceChildren(fragment);
  }

  // At most one rendering per frame, however many chunks arrive in it.
  const toRender = new Set();

  function renderSoon(bubble) {
    if (!toRender.size) {
      requestAnimationFrame(() => {
        const wasNearBottom = nearBottom();
        toRender.forEach((el) => el.isConnected && renderStreamed(el));
        toRender.clear();
        scrollToEnd(wasNearBottom);
      });
    }
    toRender.add(bubble);
  }

  // Copy buttons need the asynchronous clipboard, which browsers give only to secure contexts
  // (HTTPS, or localhost): elsewhere none is shown.
  function copyButton(label, text) {
    const button = document.createElement("button");
    button.type = "button";
    button.className = "copy";
    button.setAttribute("aria-label", label);
    button.addEventListener("click", async () => {
      let done = true;
      try {
        await navigator.clipboard.writeText(text());
      } catch {
        done = false;
      }
      delete button.dataset.copied;
      delete button.dataset.copyFailed;
      button.dataset[done ? "copied" : "copyFailed"] = "";
      announce(done ? "Copied" : "Could not copy");
      setTimeout(() => {
        delete button.dataset.copied;
        delete button.dataset.copyFailed;
      }, 2000);
    });
    return button;
  }

  // A code block wider than the bubble scrolls sideways: keyboard users need to reach it too.
  function scrollableByKeyboard(pre) {
    pre.tabIndex = 0;
  }

  function addCopyButtons(root) {
    if (!navigator.clipboard || !window.isSecureContext) return;
    root.querySelectorAll(".bubble.assistant.markdown pre").forEach((pre) => {
      if (pre.parentElement.classList.contains("code-block")) return;
      const block = document.createElement("div");
      block.className = "code-block";
      pre.before(block);
      block.append(pre, copyButton("Copy code", () => pre.textContent.replace(/\n$/, "")));
    });
    root.querySelectorAll(".bubble.user > .meta").forEach((meta) => {
      if (meta.querySelector(".copy")) return;
      const text = meta.parentElement.querySelector(":scope > .text");
      meta.append(copyButton("Copy what you wrote", () => text.innerText));
    });
    root.querySelectorAll("[data-reply-meta]").forEach((meta) => {
      if (meta.querySelector(".copy")) return;
      const reply = meta.previousElementSibling;
      meta.append(copyButton("Copy reply", () => reply.innerText));
    });
  }

  // Times come from the server in its time zone; the reader sees their own, with the date
  // when it is not today, and the full date and time in the title.
  function localTimes(root) {
    const now = new Date();
    root.querySelectorAll("time[data-local-time]").forEach((el) => {
      const at = new Date(el.getAttribute("datetime"));
      if (Number.isNaN(at.getTime())) return;
      const clock = { hour: "2-digit", minute: "2-digit" };
      const day = { day: "numeric", month: "short" };
      if (at.getFullYear() !== now.getFullYear()) day.year = "numeric";
      el.textContent = at.toDateString() === now.toDateString()
        ? at.toLocaleTimeString([], clock)
        : at.toLocaleString([], { ...day, ...clock });
      el.title = at.toLocaleString([], { dateStyle: "full", timeStyle: "short" });
    });
  }

  // Exports are written in the reader's time zone, with its offset from UTC.
  function exportsInLocalTime(root) {
    const zone = Intl.DateTimeFormat().resolvedOptions().timeZone;
    if (!zone) return;
    root.querySelectorAll("a[data-in-local-time]").forEach((link) => {
      const url = new URL(link.href, location.href);
      url.searchParams.set("tz", zone);
      link.href = url.pathname + url.search;
    });
  }

  const onMac = /Mac|iPhone|iPad/.test(navigator.platform || navigator.userAgent);

  function enhance(root) {
    root.querySelectorAll("[data-streaming]").forEach(renderStreamed);
    root.querySelectorAll(".markdown pre").forEach(scrollableByKeyboard);
    addCopyButtons(root);
    localTimes(root);
    exportsInLocalTime(root);
    if (onMac) root.querySelectorAll("kbd[data-mod-key]").forEach((kbd) => (kbd.textContent = "⌘"));
  }

  // Declared on the composer itself: its response replaces the composer (out of band) before
  // the main swap runs, and a detached element no longer inherits extensions from <body>.
  htmx.defineExtension("upsert", {
    handleSwap(swapStyle, target, fragment) {
      if (swapStyle !== "upsert") return false;
      upsertFragment(fragment);
      return true;
    },
  });

  function composerError(text) {
    const box = document.querySelector("[data-composer-errors]");
    if (box) box.textContent = text;
  }

  // What the person typed survives a trip to the login page: kept per page in this tab.
  const draftKey = () => `continuity:draft:${location.pathname}`;
  const composerField = () => document.querySelector("#composer textarea");

  function keepDraft() {
    const field = composerField();
    if (field && field.value.trim()) sessionStorage.setItem(draftKey(), field.value);
  }

  function restoreDraft() {
    const field = composerField();
    const draft = sessionStorage.getItem(draftKey());
    if (field && draft && !field.value) field.value = draft;
    sessionStorage.removeItem(draftKey());
  }

  function signedOut() {
    keepDraft();
    const box = document.querySelector("[data-composer-errors]");
    if (!box) return;
    box.dataset.signedOut = "true";
    const login = document.createElement("a");
    login.href = `/accounts/login/?next=${encodeURIComponent(location.pathname)}`;
    login.textContent = "sign in again";
    box.replaceChildren("You were signed out; ", login, " (your message is kept).");
  }

  // After a lost response the message may have been stored under its client id, so a retry of
  // the same text keeps that id (the server then returns the stored message, not a copy). Once
  // the text is edited it is a different message: it gets a new id, or the server would answer
  // the resend with the old message and the edit would be lost.
  let unsure = null; // {text, clientId, freshId} of the send whose outcome is unknown

  function newClientId() {
    if (window.crypto && crypto.randomUUID) return crypto.randomUUID();
    const b = crypto.getRandomValues(new Uint8Array(16)); // randomUUID needs a secure context
    b[6] = (b[6] & 0x0f) | 0x40;
    b[8] = (b[8] & 0x3f) | 0x80;
    const hex = [...b].map((x) => x.toString(16).padStart(2, "0")).join("");
    return `${hex.slice(0, 8)}-${hex.slice(8, 12)}-${hex.slice(12, 16)}-${hex.slice(16, 20)}-${hex.slice(20)}`;
  }

  const clientIdField = () => document.querySelector("#composer input[name=client_id]");

  function sendUnsure() {
    const field = composerField();
    const id = clientIdField();
    if (field && id && !unsure) unsure = { text: field.value, clientId: id.value, freshId: newClientId() };
  }

  document.addEventListener("input", (event) => {
    if (!unsure || !event.target.matches || !event.target.matches("#composer textarea")) return;
    const id = clientIdField();
    // Spacing alone does not make another message, for the server either.
    const words = (text) => text.split(/\s+/).filter(Boolean).join(" ");
    const same = words(event.target.value) === words(unsure.text);
    if (id) id.value = same ? unsure.clientId : unsure.freshId;
  });

  document.addEventListener("htmx:sendError", () => {
    sendUnsure();
    composerError("Could not reach the server. Your message is still here: press Enter to retry.");
  });
  // The database is briefly away (503): keep the text and send it again by itself, with the
  // same client id, so a send that did get through is not stored twice.
  function resendLater(form, seconds) {
    const text = form.querySelector("textarea")?.value;
    composerError(`The service is briefly unavailable. Your message is kept and will be sent again in ${seconds} s.`);
    setTimeout(() => {
      if (form.isConnected && form.querySelector("textarea")?.value === text) form.requestSubmit();
    }, seconds * 1000);
  }

  // Forms next to a message (edit, regenerate, versions) say why they were refused beside it.
  function formError(form, text) {
    const box = form.querySelector("[data-form-error]");
    if (box) box.textContent = text;
  }

  document.addEventListener("htmx:beforeRequest", (event) => {
    const form = event.detail.elt.closest?.("[data-inline-errors]");
    if (form) formError(form, "");
  });

  // Content swapped in by htmx elsewhere (the memory page's edits) shows times as the rest.
  document.addEventListener("htmx:load", (event) => localTimes(event.detail.elt));

  // Scrolling up loads one older page at a time, and the exchange the reader was on stays where
  // it was on screen: the older page goes in above it and the view moves down by its height
  // (the browser's own scroll anchoring is off for the exchanges, see app.css). Left at the
  // top instead, the next page's marker would show at once and load every page in a cascade.
  let olderAnchor = null; // {exchange, top} while an older page is swapped in
  const loadsOlder = (event) => event.detail.requestConfig?.elt?.matches?.("[data-load-older]");

  document.addEventListener("htmx:beforeSwap", (event) => {
    if (!loadsOlder(event)) return;
    const exchange = event.detail.requestConfig.elt.nextElementSibling;
    if (exchange) olderAnchor = { exchange, top: exchange.getBoundingClientRect().top };
  });

  // An older page of exchanges arrived: back to the reader's place, then copy buttons, local
  // times and so on.
  // htmx sends afterSwap once per element of the page, after the whole page went in.
  document.addEventListener("htmx:afterSwap", (event) => {
    if (!loadsOlder(event) || !olderAnchor) return;
    const box = exchangesBox();
    enhance(box); // first: its copy buttons make the new exchanges taller
    box.querySelectorAll("[data-exchange]").forEach((el) => noteState(el, { quietly: true }));
    if (olderAnchor.exchange.isConnected) {
      scroller().scrollTop += olderAnchor.exchange.getBoundingClientRect().top - olderAnchor.top;
    }
    olderAnchor = null;
  });

  document.addEventListener("htmx:responseError", (event) => {
    const status = event.detail.xhr.status;
    const inline = event.detail.elt.closest?.("[data-inline-errors]");
    if (status === 401) signedOut();
    else if (inline) {
      const said = event.detail.xhr.getResponseHeader("Content-Type")?.startsWith("text/plain");
      formError(inline, said ? event.detail.xhr.responseText : `The server answered ${status}; try again.`);
    }
    else if (status === 503 && event.detail.elt.matches("#composer")) {
      sendUnsure();
      resendLater(event.detail.elt, Number(event.detail.xhr.getResponseHeader("Retry-After")) || 3);
    } else if (status !== 409 && status !== 422 && status !== 429) {
      sendUnsure();
      composerError(`The server answered ${status}. Your message is still here: press Enter to retry.`);
    }
  });
  document.addEventListener("htmx:oobAfterSwap", (event) => {
    if (event.detail.target.id !== "composer") return;
    unsure = null; // the server answered: the new composer carries the id to use
    enhance(event.detail.target);
    event.detail.target.querySelector("textarea")?.focus();
  });

  // Below 720px the sidebar is a drawer. Without JavaScript its link opens it as the :target;
  // here the link acts as a button that toggles it and moves focus in and back out.
  const sidebar = () => document.getElementById("conversations");
  const drawerToggle = () => document.querySelector("[data-drawer-open]");
  const drawerShown = () => !!sidebar() && getComputedStyle(sidebar()).display !== "none";

  function setDrawer(open) {
    const nav = sidebar();
    const toggle = drawerToggle();
    if (!nav) return;
    nav.classList.toggle("open", open);
    toggle?.setAttribute("aria-expanded", String(open));
    if (open) nav.querySelector("a:not([data-drawer-close]), input")?.focus();
    else {
      if (nav.matches(":target")) location.hash = ""; // opened without script, or reloaded so
      toggle?.focus();
    }
  }

  document.addEventListener("click", (event) => {
    if (!event.target.closest) return;
    if (event.target.closest("[data-drawer-open]")) {
      event.preventDefault();
      setDrawer(!sidebar()?.classList.contains("open"));
    } else if (event.target.closest("[data-drawer-close]")) {
      event.preventDefault();
      setDrawer(false);
    }
  });

  function focusSearch() {
    const search = document.getElementById("search-q");
    if (!search) return;
    if (!drawerShown()) setDrawer(true);
    search.focus();
    search.select();
  }

  // Ctrl+K (⌘K on a Mac) searches the conversations and Ctrl+Shift+O (⇧⌘O) starts a new one,
  // on the chat pages, which show them in the composer's hint; Esc stops the reply being
  // written (the newest Stop button), unless a menu or the drawer is what Esc should close.
  function shortcut(event) {
    if (event.key === "Escape" && !event.target.closest?.("details[open], [data-drawer]")) {
      const stops = document.querySelectorAll("[data-stop]");
      if (!stops.length) return false;
      stops[stops.length - 1].click();
      event.preventDefault();
      return true;
    }
    const mod = onMac ? event.metaKey && !event.ctrlKey : event.ctrlKey && !event.metaKey;
    if (!mod || event.altKey || !document.getElementById("search-q")) return false;
    const key = event.key.toLowerCase();
    if (key === "k" && !event.shiftKey) focusSearch();
    else if (key === "o" && event.shiftKey) {
      window.location.assign(document.querySelector(".new-conversation")?.href || "/");
    } else return false;
    event.preventDefault();
    return true;
  }

  document.addEventListener("keydown", (event) => {
    if (event.key === "Escape" && sidebar()?.classList.contains("open")) {
      event.preventDefault(); // Esc closes the drawer, and focus goes back to its toggle
      setDrawer(false);
      return;
    }
    if (shortcut(event)) return;
    if (event.key === " " && event.target.matches?.("[data-drawer-open]")) {
      event.preventDefault(); // a link that acts as a button answers Space too
      event.target.click();
      return;
    }
    const field = event.target;
    if (!field.matches || !field.matches("#composer textarea")) return;
    if (event.key === "Enter" && !event.shiftKey && !event.isComposing) {
      event.preventDefault();
      field.form.requestSubmit();
    }
  });

  function liveChannel(main) {
    const indicator = main.querySelector("[data-live-indicator]");
    let socket = null;
    let failures = 0;

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

    function sync(pending) {
      if (!socket || socket.readyState !== WebSocket.OPEN) return;
      socket.send(JSON.stringify({ type: "sync", after: syncedUpTo, pending }));
    }

    // Live updates are at-most-once (a stalled Redis drops them, see docs/live-protocol.md): while an
    // exchange is queued or being answered the page asks for it again, at a random moment
    // within resyncMs each time (full jitter: pages that lost the same updates do not all ask
    // at once), and when the slow hint appears.
    const resyncMs = Number(main.dataset.resyncMs ?? 15000);
    function resyncPending() {
      const ids = unfinishedIds();
      if (ids.length) sync(ids);
    }
    function resyncLater() {
      setTimeout(() => {
        resyncPending();
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
      if (exchange && !pending(exchange)) return;
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
      if (focused) incoming.querySelector(`a[href="${CSS.escape(focused)}"]`)?.focus();
    }

    function open() {
      const scheme = location.protocol === "https:" ? "wss" : "ws";
      socket = new WebSocket(`${scheme}://${location.host}${main.dataset.wsPath}`);
      socket.addEventListener("open", () => {
        failures = 0;
        // Signed in again (another tab, or this session survived a password change).
        const errors = document.querySelector("[data-composer-errors][data-signed-out]");
        if (errors) {
          errors.textContent = "";
          delete errors.dataset.signedOut;
        }
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
          setLive("signed out", false);
          signedOut();
        } else setLive("reconnecting…", false);
        failures += 1;
        // Full jitter: a random wait up to the backoff, so that the pages a restarted server
        // dropped come back spread out, not all in the same instant.
        setTimeout(open, Math.random() * Math.min(RECONNECT_CAP_MS, RECONNECT_BASE_MS * 2 ** failures));
      });
    }

    open();
    return resyncPending;
  }

  // The account menu is open in the bar on a wide screen, a fold-out on a narrow one.
  function accountMenu() {
    const menu = document.querySelector("[data-account-menu]");
    if (!menu) return;
    const wide = matchMedia("(min-width: 721px)");
    const fit = () => (menu.open = wide.matches);
    wide.addEventListener("change", fit);
    fit();
    document.addEventListener("keydown", (event) => {
      if (event.key !== "Escape" || wide.matches || !menu.open || !menu.contains(event.target)) return;
      menu.open = false;
      menu.querySelector("summary").focus();
    });
    document.addEventListener("click", (event) => {
      if (!wide.matches && menu.open && !menu.contains(event.target)) menu.open = false;
    });
  }

  document.addEventListener("DOMContentLoaded", () => {
    accountMenu();
    restoreDraft();
    enhance(document);
    document.querySelector("[data-focus-on-load]")?.focus(); // e.g. "“Trip plans” deleted."
    const toggle = drawerToggle();
    if (toggle) {
      toggle.setAttribute("role", "button");
      toggle.setAttribute("aria-controls", "conversations");
      toggle.setAttribute("aria-expanded", String(!!sidebar()?.matches(":target")));
    }
    const main = document.getElementById("conversation");
    if (!main) return; // other pages (memory, account) open at their top
    document.querySelectorAll("[data-exchange]").forEach((el) => noteState(el, { quietly: true }));
    const resync = liveChannel(main);
    setInterval(() => tickHints(resync), 500);
    tickHints(resync);
    // A search result links to its exchange; otherwise the conversation opens at its end.
    const hash = location.hash.slice(1);
    const linked = hash.startsWith("exchange-") && document.getElementById(hash);
    if (linked) linked.scrollIntoView();
    else scrollToEnd(true);
  });
})();
