from django.contrib import admin
from django.urls import include, path

urlpatterns = [
    path("admin/", admin.site.urls),
    path("accounts/", include("chat.account_urls")),
    path("dashboard/", include("dashboard.urls")),
    path("", include("chat.urls")),
]
