from __future__ import annotations

import uuid

from django import forms

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
