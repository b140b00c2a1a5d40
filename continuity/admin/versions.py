"""What staff edit, as new versions: a person's facts, and a conversation's handoffs and
summaries (each edit a new row; old attempts keep the version they read)."""

from __future__ import annotations

from django import forms
from django.contrib import admin, messages
from django.core.exceptions import PermissionDenied
from django.shortcuts import get_object_or_404, redirect
from django.template.response import TemplateResponse
from django.urls import path, reverse
from django.utils.html import format_html

from continuity.context import (
    SECTIONS,
    handoff_latest,
    handoff_sections,
    handoff_write,
    summary_latest,
    summary_revise,
    versions_diff,
)

from ..models import (
    Conversation,
    Handoff,
    MemoryFact,
    Summary,
)


@admin.register(MemoryFact)
class MemoryFactAdmin(admin.ModelAdmin):
    list_display = ["owner", "key", "value", "created_at", "superseded_at"]
    list_filter = [("superseded_at", admin.EmptyFieldListFilter)]
    search_fields = ["key", "value", "owner__username"]
    # Versions: a changed value is a new row (continuity.context.memory), old runs refer to ids.
    readonly_fields = ["owner", "key", "value", "source_message", "created_at", "superseded_at"]

    def has_add_permission(self, request):
        return False


class HandoffForm(forms.Form):
    current_state = forms.CharField(widget=forms.Textarea(attrs={"rows": 3}), required=False)
    critical_context = forms.CharField(
        widget=forms.Textarea(attrs={"rows": 5}), required=False, help_text="One per line."
    )
    next_steps = forms.CharField(
        label="Immediate next steps",
        widget=forms.Textarea(attrs={"rows": 5}),
        required=False,
        help_text="One per line, the next one first.",
    )
    decisions = forms.CharField(
        label="Decisions made",
        widget=forms.Textarea(attrs={"rows": 4}),
        required=False,
        help_text="One per line.",
    )
    based_on = forms.IntegerField(widget=forms.HiddenInput, required=False)


class SummaryForm(forms.Form):
    text = forms.CharField(widget=forms.Textarea(attrs={"rows": 16}))
    based_on = forms.IntegerField(widget=forms.HiddenInput, required=False)


class VersionedAdmin(admin.ModelAdmin):
    """Versions are read-only; "edit" shows the newest one in a form and saves a new version
    with the staff user as author; any two versions can be diffed."""

    form_class: type[forms.Form]
    date_hierarchy = "created_at"

    def has_add_permission(self, request):
        return False

    def has_change_permission(self, request, obj=None):
        return False  # the change page shows a version; the edit view adds the next one

    # A version is history: no Delete on its page, nor among the list's actions. (The
    # permission itself stays: deleting a conversation deletes its versions with it.)
    def change_view(self, request, object_id, form_url="", extra_context=None):
        extra_context = {**(extra_context or {}), "show_delete": False}
        return super().change_view(request, object_id, form_url, extra_context)

    def get_actions(self, request):
        actions = super().get_actions(request)
        actions.pop("delete_selected", None)
        return actions

    def get_urls(self):
        name = f"{self.opts.app_label}_{self.opts.model_name}"
        return [
            path(
                "conversation/<int:conversation_id>/edit/",
                self.admin_site.admin_view(self.edit_view),
                name=f"{name}_edit",
            ),
            path("<int:pk>/diff/", self.admin_site.admin_view(self.diff_view), name=f"{name}_diff"),
            *super().get_urls(),
        ]

    def edit_view(self, request, conversation_id):
        if not request.user.has_perm(f"{self.opts.app_label}.add_{self.opts.model_name}"):
            raise PermissionDenied
        conversation = get_object_or_404(Conversation, pk=conversation_id)
        latest = self.latest(conversation.pk)
        form = self.form_class(
            request.POST or None,
            initial={**self.initial(latest), "based_on": latest.version if latest else 0},
        )
        if form.is_valid():
            if form.cleaned_data["based_on"] != (latest.version if latest else 0):
                form.add_error(None, "A newer version was written meanwhile; review it first.")
            else:
                version = self.save_version(request, conversation, latest, form.cleaned_data)
                self.message_user(request, f"Saved {version} (by {request.user}).")
                return redirect(
                    f"admin:{self.opts.app_label}_{self.opts.model_name}_change", version.pk
                )
        return TemplateResponse(
            request,
            "admin/continuity/version_edit.html",
            {
                **self.admin_site.each_context(request),
                "opts": self.opts,
                "title": f"Edit the {self.opts.verbose_name} of {conversation}",
                "form": form,
                "latest": latest,
                "next_version": (latest.version if latest else 0) + 1,
                "changelist_url": f"admin:{self.opts.app_label}_{self.opts.model_name}_changelist",
            },
        )

    def diff_view(self, request, pk):
        if not self.has_view_permission(request):
            raise PermissionDenied
        new = get_object_or_404(self.model, pk=pk)
        versions = self.model.objects.filter(conversation_id=new.conversation_id).order_by(
            "-version"
        )
        against = request.GET.get("against")
        old = (
            versions.filter(pk=against).first()
            if against and against.isdigit()
            else versions.filter(version__lt=new.version).first()
        ) or new
        return TemplateResponse(
            request,
            "admin/continuity/version_diff.html",
            {
                **self.admin_site.each_context(request),
                "opts": self.opts,
                "title": f"{new}: changes since version {old.version}",
                "old": old,
                "versions": versions.exclude(pk=new.pk),
                "lines": versions_diff(
                    old=self.text_of(old),
                    new=self.text_of(new),
                    old_label=f"version {old.version}",
                    new_label=f"version {new.version}",
                ),
                "changelist_url": f"admin:{self.opts.app_label}_{self.opts.model_name}_changelist",
            },
        )

    @admin.display(description="Versions")
    def tools(self, obj):
        name = f"admin:{self.opts.app_label}_{self.opts.model_name}"
        return format_html(
            '<a href="{}">Edit the newest as a new version</a> · '
            '<a href="{}">Changes since the previous version</a>',
            reverse(f"{name}_edit", args=[obj.conversation_id]),
            reverse(f"{name}_diff", args=[obj.pk]),
        )


@admin.register(Handoff)
class HandoffAdmin(VersionedAdmin):
    form_class = HandoffForm
    list_display = ["__str__", "conversation", "version", "reason", "author", "created_at"]
    list_filter = ["reason"]
    search_fields = ["current_state", "next_steps", "conversation__title"]
    fields = [
        "conversation",
        "version",
        "reason",
        "author",
        "run",
        "at_message",
        "based_on",
        "created_at",
        "rendered",
        "tools",
    ]
    readonly_fields = fields

    class Media:
        css = {"all": ["continuity/admin.css"]}

    @admin.display(description="As the next attempt reads it")
    def rendered(self, handoff):
        return format_html('<pre class="handoff-markdown">{}</pre>', handoff.markdown())

    def latest(self, conversation_id):
        return handoff_latest(conversation_id=conversation_id)

    def initial(self, latest):
        return handoff_sections(latest)

    def text_of(self, handoff):
        return handoff.markdown()

    def save_version(self, request, conversation, latest, data):
        return handoff_write(
            conversation_id=conversation.pk,
            reason=Handoff.Reason.STAFF_EDIT,
            sections={name: data[name] for name in SECTIONS},
            author=request.user,
        )


@admin.register(Summary)
class SummaryAdmin(VersionedAdmin):
    form_class = SummaryForm
    list_display = ["__str__", "conversation", "version", "covers_through", "author", "created_at"]
    search_fields = ["text", "conversation__title"]
    fields = [
        "conversation",
        "version",
        "covers_through",
        "author",
        "run",
        "created_at",
        "text",
        "tools",
    ]
    readonly_fields = fields

    def latest(self, conversation_id):
        return summary_latest(conversation_id=conversation_id)

    def initial(self, latest):
        return {"text": latest.text if latest else ""}

    def text_of(self, summary):
        return summary.text

    def edit_view(self, request, conversation_id):
        if summary_latest(conversation_id=conversation_id) is None:
            self.message_user(request, "This conversation has no summary yet.", messages.WARNING)
            return redirect("admin:continuity_conversation_change", conversation_id)
        return super().edit_view(request, conversation_id)

    def save_version(self, request, conversation, latest, data):
        return summary_revise(summary=latest, text=data["text"], author=request.user)
