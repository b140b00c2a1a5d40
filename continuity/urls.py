from django.contrib import admin
from django.urls import include, path

from dashboard.metrics import metrics_endpoint

urlpatterns = [
    path("admin/", admin.site.urls),
    path("accounts/", include("chat.account_urls")),
    path("dashboard/", include("dashboard.urls")),
    path("metrics", metrics_endpoint, name="metrics"),
    path("", include("chat.urls")),
]
