"""The person's decision on a tool call that a crash left in doubt."""

from __future__ import annotations

from django.http import HttpResponse
from django.shortcuts import get_object_or_404, redirect
from django.views.decorators.cache import never_cache
from django.views.decorators.http import require_POST

from continuity.actions import tool_call_decide
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
