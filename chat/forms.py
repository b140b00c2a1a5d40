from __future__ import annotations

import uuid

from django import forms
from django.contrib.auth.forms import UserCreationForm
from django.contrib.auth.validators import ASCIIUsernameValidator

from continuity.brains import brain_choices
from continuity.delivery import message_clean_text
from continuity.errors import InvalidMessage

from .exports import zone_names


class MessageForm(forms.Form):
    text = forms.CharField(
        required=False,
        strip=False,
        widget=forms.Textarea(
            attrs={"rows": 2, "placeholder": "Message Continuity…", "autofocus": True}
        ),
    )
    client_id = forms.UUIDField(
        widget=forms.HiddenInput,
        error_messages={"required": "This form is out of date; reload the page and try again."},
    )
    # The sender's time zone, as their browser names it (the page's script adds it): what
    # "tomorrow at 9" means in their reminders. Not one: left unsaid.
    time_zone = forms.CharField(required=False, max_length=64)

    @classmethod
    def blank(cls) -> MessageForm:
        return cls(initial={"client_id": uuid.uuid4()})

    def clean_time_zone(self) -> str:
        zone = self.cleaned_data["time_zone"]
        return zone if zone in zone_names() else ""

    def clean_text(self) -> str:
        try:
            return message_clean_text(self.cleaned_data["text"])
        except InvalidMessage as error:
            raise forms.ValidationError(str(error)) from error


class NewConversationForm(MessageForm):
    brain = forms.ChoiceField(label="Assistant", required=False)

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.fields["brain"].choices = brain_choices()


class BrainForm(forms.Form):
    brain = forms.ChoiceField(label="Assistant")

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.fields["brain"].choices = brain_choices()


class MemoryFactForm(forms.Form):
    value = forms.CharField(
        max_length=1000,
        widget=forms.Textarea(attrs={"rows": 2}),
        error_messages={"required": "Type what I should remember, or forget this instead."},
    )


class SignupForm(UserCreationForm):
    """Names in ASCII only: a letter of another alphabet that looks like a Latin one ("аlice",
    with a Cyrillic "а") would show staff two "alice". Django's form already refuses a name
    that differs from another only in case. The address is optional: it is where a link to
    reset a forgotten password goes."""

    email = forms.EmailField(
        label="Email address (optional)",
        required=False,
        max_length=254,  # the column's
        help_text="Only to send you a link if you forget your password.",
    )

    class Meta(UserCreationForm.Meta):
        fields = ("username", "email")

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        username = self.fields["username"]
        username.validators.append(
            ASCIIUsernameValidator(
                message="Use only the letters a to z (either case), digits and @ . + - _ "
                "(letters of other alphabets can look like these ones)."
            )
        )
        username.help_text = (
            "Letters a to z (either case), digits and @ . + - _ only; at most 150 characters."
        )
