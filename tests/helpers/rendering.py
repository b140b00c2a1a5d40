"""What a browser would run in rendered HTML."""

from __future__ import annotations

from html.parser import HTMLParser

ACTIVE_ELEMENTS = {"script", "iframe", "svg", "object", "embed", "style", "form", "base", "meta"}
URL_ATTRIBUTES = {"href", "src", "action", "formaction", "xlink:href"}


class ActiveContentFinder(HTMLParser):
    """Finds what a browser would execute: active elements, event handlers, script URLs."""

    def __init__(self, own_forms: str = "") -> None:
        super().__init__()
        self.found: list[str] = []
        self.own_forms = own_forms

    def handle_starttag(self, tag, attrs):
        own = self.own_forms and (dict(attrs).get("action") or "").startswith(self.own_forms)
        if tag in ACTIVE_ELEMENTS and not (tag == "form" and own):
            self.found.append(f"<{tag}>")
        for name, value in attrs:
            url = (value or "").strip().lower().replace(" ", "")
            if name.startswith("on") or name == "style":
                self.found.append(f"{tag}[{name}]")
            if name in URL_ATTRIBUTES and url.startswith(("javascript:", "data:", "vbscript:")):
                self.found.append(f"{tag}[{name}={value}]")


def active_content(html: str, own_forms: str = "") -> list[str]:
    """`own_forms`: the action prefix of the page's own forms (edit, regenerate), not content."""
    finder = ActiveContentFinder(own_forms)
    finder.feed(html)
    return finder.found
