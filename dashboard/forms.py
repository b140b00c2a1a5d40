from __future__ import annotations

from django import forms

from continuity.models import DeadLetter

REASON_WIDGET = forms.Textarea(attrs={"rows": 2})


class ReasonForm(forms.Form):
    """Every staff action says why; the reason goes in the audit log."""

    reason = forms.CharField(label="Reason", max_length=2000, widget=REASON_WIDGET)


class RetryNowForm(forms.Form):
    reason = forms.CharField(label="Why end its wait now", max_length=2000, widget=REASON_WIDGET)


class PauseForm(forms.Form):
    reason = forms.CharField(label="Why pause it", max_length=2000, widget=REASON_WIDGET)


class StopForm(forms.Form):
    reason = forms.CharField(label="Why stop it", max_length=2000, widget=REASON_WIDGET)


class OptionalReasonForm(forms.Form):
    reason = forms.CharField(
        label="Reason (optional)", max_length=2000, required=False, widget=REASON_WIDGET
    )


class EditAndRetryForm(forms.Form):
    text = forms.CharField(
        label="Corrected message", widget=forms.Textarea(attrs={"rows": 4}), strip=False
    )
    reason = forms.CharField(
        label="Reason (optional)", max_length=2000, required=False, widget=REASON_WIDGET
    )


class DeadLetterFilterForm(forms.Form):
    q = forms.CharField(
        label="Search",
        required=False,
        help_text="User, conversation, message text or error text.",
    )
    status = forms.ChoiceField(
        choices=[("", "Any status"), *DeadLetter.Status.choices], required=False
    )
    error_class = forms.ChoiceField(label="Error", required=False)
    since = forms.DateField(
        label="From", required=False, widget=forms.DateInput(attrs={"type": "date"})
    )
    until = forms.DateField(
        label="Until", required=False, widget=forms.DateInput(attrs={"type": "date"})
    )

    def __init__(self, *args, error_classes: list[str], **kwargs):
        super().__init__(*args, **kwargs)
        self.fields["error_class"].choices = [
            ("", "Any error"),
            *((name, name) for name in error_classes),
        ]


class BulkForm(forms.Form):
    """A bulk action on the dead letters ticked in the list (posted as `ids`), or on all those
    the list's filter matches (`query`: the list's query string)."""

    action = forms.ChoiceField(choices=[("retry", "Retry"), ("discard", "Discard")])
    scope = forms.ChoiceField(
        choices=[("ticked", "Ticked"), ("matching", "Matching")], required=False
    )
    query = forms.CharField(required=False)
    reason = forms.CharField(max_length=2000, required=False, widget=REASON_WIDGET)
    confirmed = forms.BooleanField(required=False)


class WorkerCommandForm(forms.Form):
    reason = forms.CharField(label="Why", max_length=2000, widget=REASON_WIDGET)


class TakeOverForm(forms.Form):
    reason = forms.CharField(label="Why take it over", max_length=2000, widget=REASON_WIDGET)


class StaffReplyForm(forms.Form):
    text = forms.CharField(
        label="Your reply", max_length=8000, widget=forms.Textarea(attrs={"rows": 3})
    )
    answering = forms.IntegerField(widget=forms.HiddenInput, required=False)


class HandBackForm(forms.Form):
    note = forms.CharField(
        label="Note for the assistant (it reads it before its next reply)",
        max_length=4000,
        widget=forms.Textarea(attrs={"rows": 3}),
    )
