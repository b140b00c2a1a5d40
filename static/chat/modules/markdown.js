// A streaming reply shown as Markdown while it grows (rendered by marked, sanitized by
// DOMPurify), at most once per frame.

import { nearBottom, scrollToEnd, scrollableByKeyboard } from "./dom.js";

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

export function renderStreamed(bubble) {
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

export function renderSoon(bubble) {
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
