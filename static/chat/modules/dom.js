// The page's shared parts: the exchanges box and its scrolling, parsing HTML, and the live
// region that announces changes.

export const exchangesBox = () => document.getElementById("exchanges");

// On the chat page the exchanges scroll in their own box (app.css); elsewhere, the page does.
export function scroller() {
  const box = exchangesBox();
  const own = box && getComputedStyle(box).overflowY !== "visible";
  return own ? box : document.scrollingElement;
}

export function nearBottom() {
  const el = scroller();
  return el.scrollHeight - el.scrollTop - el.clientHeight < 120;
}

export function scrollToEnd(wasNearBottom) {
  const el = scroller();
  if (wasNearBottom) el.scrollTop = el.scrollHeight;
}

export function announce(text) {
  const status = document.querySelector("[data-answer-status]");
  if (status) status.textContent = text;
}

export function fragmentOf(html) {
  const template = document.createElement("template");
  template.innerHTML = html;
  return template.content;
}

// A code block wider than the bubble scrolls sideways: keyboard users need to reach it too.
export function scrollableByKeyboard(pre) {
  pre.tabIndex = 0;
}
