from django.contrib import admin
from django.urls import include, path

from dashboard.metrics import metrics_view

urlpatterns = [
    path("admin/", admin.site.urls),
    path("accounts/", include("chat.account_urls")),
    path("dashboard/", include("dashboard.urls")),
    path("metrics", metrics_view, name="metrics"),
    path("", include("chat.urls")),
]
