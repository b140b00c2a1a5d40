"""A person's conversations: rename, archive, delete, search, export, and the full list."""

from __future__ import annotations

import json

from django import forms
from django.contrib import messages
from django.core.paginator import Paginator
from django.http import HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.utils.html import escape
from django.utils.safestring import mark_safe
from django.utils.text import slugify
from django.views.decorators.cache import never_cache
from django.views.decorators.http import require_GET, require_http_methods, require_POST

from continuity.actions import (
    conversation_archive,
    conversation_brain_set,
    conversation_delete,
    conversation_rename,
)
from continuity.errors import InvalidMessage
from continuity.htmx import HtmxHttpRequest
from continuity.models import Conversation
from continuity.selectors import (
    MARK_END,
    MARK_START,
    conversations_of,
    conversations_search,
    earlier_versions_search,
    search_finds_word_forms,
)

from .exports import export_json, export_markdown, export_zone
from .forms import BrainForm
from .rendering import markdown_plain
from .views import login_required_or_401, own_conversation

PAGE_SIZE = 50


class RenameForm(forms.Form):
    title = forms.CharField(label="Title", max_length=200, strip=True)


def back_to(conversation: Conversation):
    return redirect("chat:conversation", conversation.pk)


@require_POST
@login_required_or_401
def conversation_rename_view(request: HtmxHttpRequest, pk: int) -> HttpResponse:
    conversation = own_conversation(request, pk)
    form = RenameForm(request.POST)
    try:
        if not form.is_valid():
            raise InvalidMessage(form.errors["title"][0])
        conversation_rename(conversation=conversation, title=form.cleaned_data["title"])
    except InvalidMessage as error:
        messages.error(request, f"Not renamed: {error}")
    if request.htmx:
        return render(request, "chat/conversation.html#title", {"conversation": conversation})
    return back_to(conversation)


@require_POST
@login_required_or_401
def conversation_brain_view(request: HttpRequest, pk: int) -> HttpResponse:
    conversation = own_conversation(request, pk)
    form = BrainForm(request.POST)
    if form.is_valid():
        conversation_brain_set(conversation=conversation, brain=form.cleaned_data["brain"])
        label = dict(form.fields["brain"].choices)[form.cleaned_data["brain"]]
        messages.success(request, f"The next messages are answered by {label}.")
    else:
        messages.error(request, "Pick one of the assistants offered.")
    return back_to(conversation)


@require_POST
@login_required_or_401
def conversation_archive_view(request: HttpRequest, pk: int) -> HttpResponse:
    conversation = own_conversation(request, pk)
    archived = request.POST.get("archived", "1") == "1"
    conversation_archive(conversation=conversation, archived=archived)
    messages.success(
        request,
        f"“{conversation}” archived: it is under Archived, and still answered."
        if archived
        else f"“{conversation}” is back in your conversations.",
    )
    return back_to(conversation)


@never_cache
@require_http_methods(["GET", "POST"])
@login_required_or_401
def conversation_delete_view(request: HttpRequest, pk: int) -> HttpResponse:
    """GET asks for confirmation; POST deletes."""
    conversation = own_conversation(request, pk)
    if request.method == "GET":
        # As the person sees them: the shown branch, not the versions they left behind.
        count = conversation.messages.shown().count()
        return render(
            request, "chat/delete.html", {"conversation": conversation, "message_count": count}
        )
    title = str(conversation)
    conversation_delete(conversation=conversation)
    # Focus goes to this notice on the page that follows: what was acted on is gone.
    messages.success(request, f"“{title}” deleted.", extra_tags="focus")
    return redirect("chat:home")


def highlighted(snippet: str) -> str:
    """The search snippet as HTML: its Markdown as the words a reader sees, escaped, the found
    words marked."""
    return mark_safe(  # noqa: S308 - escaped first; only our own <mark> tags are added
        escape(markdown_plain(snippet)).replace(MARK_START, "<mark>").replace(MARK_END, "</mark>")
    )


@never_cache
@require_GET
@login_required_or_401
def search_view(request: HttpRequest) -> HttpResponse:
    query = request.GET.get("q", "")[:200]
    hits = [
        {"hit": hit, "snippet": highlighted(hit.snippet)}
        for hit in conversations_search(owner=request.user, query=query)
    ]
    found = {item["hit"].conversation.pk for item in hits}
    earlier = [
        {"hit": hit, "snippet": highlighted(hit.snippet)}
        for hit in earlier_versions_search(owner=request.user, query=query)
        if hit.conversation.pk not in found  # listed once, where it shows what was found
    ]
    return render(
        request,
        "chat/search.html",
        {
            "query": query,
            "hits": hits,
            "earlier": earlier,
            "word_forms": search_finds_word_forms(),
        },
    )


@never_cache
@require_GET
@login_required_or_401
def conversation_list_view(request: HttpRequest) -> HttpResponse:
    archived = request.GET.get("archived") == "1"
    found = conversations_of(owner=request.user).filter(archived_at__isnull=not archived)
    return render(
        request,
        "chat/conversations.html",
        {
            "archived": archived,
            "page": Paginator(found, PAGE_SIZE).get_page(request.GET.get("page")),
        },
    )


def download(body: str, *, content_type: str, name: str) -> HttpResponse:
    response = HttpResponse(body, content_type=content_type)
    response["Content-Disposition"] = f'attachment; filename="{name}"'
    return response


def export_name(conversation: Conversation, extension: str) -> str:
    return f"{slugify(str(conversation))[:60] or 'conversation'}-{conversation.pk}.{extension}"


@never_cache
@require_GET
@login_required_or_401
def export_markdown_view(request: HttpRequest, pk: int) -> HttpResponse:
    conversation = own_conversation(request, pk)
    return download(
        export_markdown(conversation, export_zone(request.GET.get("tz"))),
        content_type="text/markdown; charset=utf-8",
        name=export_name(conversation, "md"),
    )


@never_cache
@require_GET
@login_required_or_401
def export_json_view(request: HttpRequest, pk: int) -> HttpResponse:
    conversation = own_conversation(request, pk)
    return download(
        json.dumps(
            export_json(conversation, export_zone(request.GET.get("tz"))),
            ensure_ascii=False,
            indent=2,
        ),
        content_type="application/json",
        name=export_name(conversation, "json"),
    )
