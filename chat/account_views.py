"""A forgotten password, reset through a link mailed to the account's address, and the page
where a person sets that address."""

from __future__ import annotations

import math
import threading

from django import forms
from django.conf import settings
from django.contrib import messages
from django.contrib.auth import forms as auth_forms
from django.contrib.auth import views as auth_views
from django.contrib.auth.decorators import login_required
from django.http import HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.urls import reverse_lazy
from django.utils.decorators import method_decorator
from django.views.decorators.cache import never_cache
from django.views.decorators.http import require_http_methods

from .lockout import client_ip
from .throttles import rate_limit_wait

# The name of the threads that send reset mail (tests wait for them).
RESET_MAIL_THREAD = "password-reset-mail"


class PasswordResetForm(auth_forms.PasswordResetForm):
    def send_mail(self, *args, **kwargs) -> None:
        """Sent off the request: an SMTP round trip made only for an address that has an
        account would tell, by the time the page takes, which addresses do. Django's send_mail
        logs a failure itself."""
        threading.Thread(
            target=super().send_mail, args=args, kwargs=kwargs, name=RESET_MAIL_THREAD
        ).start()


@method_decorator(never_cache, name="dispatch")
class PasswordResetView(auth_views.PasswordResetView):
    """Django's view: the same answer whether or not an address has an account, and a mail
    only to active accounts with that address. Requests are limited per client address, as
    logins are, and the mail's link starts with SITE_URL, not the request's Host."""

    form_class = PasswordResetForm
    email_template_name = "registration/password_reset_email.txt"
    subject_template_name = "registration/password_reset_subject.txt"
    success_url = reverse_lazy("password_reset_done")

    def form_valid(self, form):
        if seconds := rate_limit_wait(action="password_reset", who=client_ip(self.request)):
            form.add_error(
                None,
                f"Too many reset requests from here: try again in {math.ceil(seconds / 60)} "
                "minutes.",
            )
            return self.render_to_response(self.get_context_data(form=form), status=429)
        self.extra_email_context = {"site_url": settings.SITE_URL}
        address = form.cleaned_data["email"].lower()
        if rate_limit_wait(action="password_reset_mail", who=address):
            # Enough mail to this address for now, whoever asks: the same answer as a sent one,
            # so that it says nothing of the account.
            return redirect(self.get_success_url())
        return super().form_valid(form)


class EmailForm(forms.Form):
    """The address a reset link goes to can take the account over: setting it asks for the
    password, as changing the password does, so a borrowed session is not enough."""

    email = forms.EmailField(
        label="Email address",
        required=False,
        max_length=254,  # the column's
        help_text="Where a link to reset your password goes if you forget it. Leave it empty "
        "to have none.",
    )
    password = forms.CharField(
        label="Your password",
        strip=False,
        widget=forms.PasswordInput(attrs={"autocomplete": "current-password"}),
    )

    def __init__(self, *args, user, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.user = user

    def clean_password(self) -> str:
        password = self.cleaned_data["password"]
        if not self.user.check_password(password):
            raise forms.ValidationError("That is not your password.")
        return password


@never_cache
@require_http_methods(["GET", "POST"])
@login_required
def email_change_view(request: HttpRequest) -> HttpResponse:
    form = EmailForm(request.POST or None, initial={"email": request.user.email}, user=request.user)
    if request.method == "POST" and form.is_valid():
        request.user.email = form.cleaned_data["email"]
        request.user.save(update_fields=["email"])
        messages.success(
            request,
            "Email address saved." if request.user.email else "Email address removed.",
        )
        return redirect("email_change")
    return render(
        request,
        "registration/email_change.html",
        {"form": form},
        status=422 if form.errors else 200,
    )
