// The composer: drafts kept across a sign-in, sends whose outcome is unknown, errors said beside
// the form that caused them.

import { enhance } from "./enhance.js";

function composerError(text) {
  const box = document.querySelector("[data-composer-errors]");
  if (box) box.textContent = text;
}

// What the person typed survives a trip to the login page: kept per page in this tab.
const draftKey = () => `continuity:draft:${location.pathname}`;
const composerField = () => document.querySelector("#composer textarea");

export function keepDraft() {
  const field = composerField();
  if (field && field.value.trim()) sessionStorage.setItem(draftKey(), field.value);
}

export function restoreDraft() {
  const field = composerField();
  const draft = sessionStorage.getItem(draftKey());
  if (field && draft && !field.value) field.value = draft;
  sessionStorage.removeItem(draftKey());
}

export function signedOut() {
  keepDraft();
  const box = document.querySelector("[data-composer-errors]");
  if (!box) return;
  box.dataset.signedOut = "true";
  const login = document.createElement("a");
  login.href = `/accounts/login/?next=${encodeURIComponent(location.pathname)}`;
  login.textContent = "sign in again";
  box.replaceChildren("You were signed out; ", login, " (your message is kept).");
}

// The server refused this page's socket: the person has too many conversation tabs open. Said
// once, calmly, under the composer; gone when a socket opens again.
export function tooManyTabs(shown) {
  const box = document.querySelector("[data-composer-errors]");
  if (!box) return;
  if (!shown) {
    if (box.dataset.tooManyTabs) box.textContent = "";
    delete box.dataset.tooManyTabs;
    return;
  }
  keepDraft();
  box.dataset.tooManyTabs = "true";
  box.textContent =
    "Too many tabs are open: close a few of your conversation tabs, and this one connects by " +
    "itself (your message is kept).";
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

// Each message carries the sender's time zone: what "tomorrow at 9" means in a reminder.
const timeZone = Intl.DateTimeFormat().resolvedOptions().timeZone;
document.addEventListener("htmx:configRequest", (event) => {
  if (timeZone && event.detail.elt.matches?.("#composer")) event.detail.parameters.time_zone = timeZone;
});
