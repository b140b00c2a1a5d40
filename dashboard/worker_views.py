"""The Workers page: each worker's pool, read and changed through Celery's remote control."""

from __future__ import annotations

from django.conf import settings
from django.contrib import messages
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import get_object_or_404, redirect, render
from django.views.decorators.cache import never_cache
from django.views.decorators.http import require_GET, require_http_methods

from continuity.models import StaffAction, Worker
from continuity.worker import (
    COMMANDS,
    BrokerUnavailable,
    CommandRefused,
    pools_of,
    worker_command,
)

from . import selectors
from .decorators import staff_required
from .forms import WorkerCommandForm

WORKER_ACTIONS = [command.kind for command in COMMANDS.values()]
BROKER_DOWN = (
    "The broker (Redis) does not answer, so no worker can be asked for its pool or sent a "
    "command. The table shows what each worker last wrote to the database; attempts already "
    "running go on."
)


@never_cache
@require_GET
@staff_required
def workers_view(request: HttpRequest) -> HttpResponse:
    workers = list(selectors.workers_overview())
    broker_down = False
    try:
        pools = pools_of([worker.name for worker in workers if worker.status == "live"])
    except BrokerUnavailable:
        pools, broker_down = {}, True
    for worker in workers:
        worker.pool = pools.get(worker.name)
    return render(
        request,
        "dashboard/workers.html",
        {
            "workers": workers,
            "broker_down": broker_down,
            "broker_down_text": BROKER_DOWN,
            "actions": StaffAction.objects.filter(kind__in=WORKER_ACTIONS)[:50],
            "heartbeat_seconds": settings.CONTINUITY_HEARTBEAT_SECONDS,
        },
    )


@never_cache
@require_http_methods(["GET", "POST"])
@staff_required
def worker_command_view(request: HttpRequest, pk: int, action: str) -> HttpResponse:
    """One command to one worker, after a confirmation page that asks why."""
    if action not in COMMANDS:
        raise Http404("No such worker command.")
    worker = get_object_or_404(Worker, pk=pk)
    if request.method == "GET":
        return command_page(request, worker, action, WorkerCommandForm())
    form = WorkerCommandForm(request.POST)
    if not form.is_valid():
        return command_page(request, worker, action, form, status=422)
    try:
        said = worker_command(
            worker=worker, action=action, by=request.user, reason=form.cleaned_data["reason"]
        )
    except BrokerUnavailable:
        return command_page(request, worker, action, form, refused=BROKER_DOWN, status=503)
    except CommandRefused as refused:
        return command_page(request, worker, action, form, refused=str(refused), status=409)
    messages.success(request, said)
    return redirect("dashboard:workers")


ACTION_TITLES = {
    "shutdown": "Shut down {name} gracefully?",
    "grow": "Grow the pool of {name}?",
    "shrink": "Shrink the pool of {name}?",
    "restart": "Restart the pool of {name}?",
}


def command_page(request, worker, action, form, *, refused="", status=200) -> HttpResponse:
    return render(
        request,
        "dashboard/worker_command.html",
        {
            "worker": worker,
            "action": action,
            "title": ACTION_TITLES[action].format(name=worker.name),
            "form": form,
            "refused": refused,
        },
        status=status,
    )
