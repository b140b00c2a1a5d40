"""The person's decisions on tool calls: one a crash left in doubt, one that waits for their
approval."""

from __future__ import annotations

from django.http import HttpResponse
from django.shortcuts import get_object_or_404, redirect
from django.views.decorators.cache import never_cache
from django.views.decorators.http import require_POST

from continuity.actions import tool_call_answer, tool_call_decide
from continuity.htmx import HtmxHttpRequest
from continuity.models import ToolCall

from .views import conversation_url, focus_exchange, login_required_or_401, own_conversation

CHOICES = {ToolCall.Decision.RUN_AGAIN, ToolCall.Decision.SKIP}


@never_cache
@require_POST
@login_required_or_401
def tool_call_decide_view(request: HtmxHttpRequest, pk: int, call_pk: int) -> HttpResponse:
    """*Run again* or *Skip*: 204 (the page shows what follows over its websocket), 400 for
    another choice, 409 when the call is no longer in doubt (decided in another tab)."""
    conversation = own_conversation(request, pk)
    call = get_object_or_404(
        ToolCall.objects.select_related("message"), pk=call_pk, message__conversation=conversation
    )
    choice = request.POST.get("choice", "")
    if choice not in CHOICES:
        return HttpResponse("Choose run_again or skip.", status=400, content_type="text/plain")
    status = 204 if tool_call_decide(call=call, choice=choice, by=request.user) else 409
    if not request.htmx:
        return redirect(conversation_url(conversation))
    return focus_exchange(HttpResponse(status=status), call.message_id)


ANSWERS = {ToolCall.Answer.ALLOW, ToolCall.Answer.ALLOW_HERE, ToolCall.Answer.DENY}


@never_cache
@require_POST
@login_required_or_401
def tool_call_answer_view(request: HtmxHttpRequest, pk: int, call_pk: int) -> HttpResponse:
    """*Allow*, *Deny* or *Allow for this conversation* on a call that waits: 204 (the page
    shows what follows over its websocket), 400 for another answer, 409 when the call no longer
    waits (answered in another tab, or denied meanwhile), with what became of it."""
    conversation = own_conversation(request, pk)
    call = get_object_or_404(
        ToolCall.objects.select_related("message"), pk=call_pk, message__conversation=conversation
    )
    answer = request.POST.get("answer", "")
    if answer not in ANSWERS:
        return HttpResponse(
            "Answer allow, deny or allow_conversation.", status=400, content_type="text/plain"
        )
    if tool_call_answer(call=call, answer=answer, by=request.user):
        response = HttpResponse(status=204)
    else:
        call.refresh_from_db()
        said = f"This call was already answered: {call.get_answer_display().lower()}."
        response = HttpResponse(said, status=409, content_type="text/plain")
    if not request.htmx:
        return redirect(conversation_url(conversation))
    return focus_exchange(response, call.message_id)
