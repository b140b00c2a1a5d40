from __future__ import annotations

from django.http import HttpRequest, HttpResponse
from django.shortcuts import render
from django.views.decorators.cache import never_cache
from django.views.decorators.http import require_GET

from continuity.models import Conversation
from continuity.selectors import message_counts_by_state

from .decorators import staff_required


@never_cache
@require_GET
@staff_required
def index(request: HttpRequest) -> HttpResponse:
    return render(
        request,
        "dashboard/index.html",
        {
            "conversations_total": Conversation.objects.count(),
            "conversations_paused": Conversation.objects.filter(
                state=Conversation.State.PAUSED
            ).count(),
            "message_counts": message_counts_by_state(),
        },
    )
