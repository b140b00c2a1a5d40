from __future__ import annotations

from functools import wraps

from django.contrib.auth.decorators import login_required
from django.core.exceptions import PermissionDenied
from django_htmx.http import HttpResponseClientRefresh

from continuity.htmx import HtmxHttpRequest


def staff_required(view):
    """Anonymous users go to the login page; signed-in users who are not staff get 403.

    An htmx poll from a page whose session has ended is told to reload the page instead, so
    the login page is shown whole rather than swapped into a part of the old one."""

    @wraps(view)
    def gate(request: HtmxHttpRequest, *args, **kwargs):
        if request.htmx and not request.user.is_authenticated:
            return HttpResponseClientRefresh()
        return staff_only(request, *args, **kwargs)

    @login_required
    def staff_only(request, *args, **kwargs):
        if not request.user.is_staff:
            raise PermissionDenied("Staff only.")
        return view(request, *args, **kwargs)

    return gate
