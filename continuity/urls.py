from django.contrib import admin
from django.templatetags.static import static
from django.urls import include, path
from django.views.generic import RedirectView

from dashboard.metrics import metrics_view

urlpatterns = [
    path("admin/", admin.site.urls),
    path("accounts/", include("chat.account_urls")),
    path("dashboard/", include("dashboard.urls")),
    path("metrics", metrics_view, name="metrics"),
    # Asked for by browsers (and probes) that read no page's icon link: the same icon.
    path("favicon.ico", RedirectView.as_view(url=static("continuity/favicon.svg"))),
    path("", include("chat.urls")),
]
