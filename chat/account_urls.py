from django.contrib.auth import views as auth_views
from django.urls import path
from django.views.decorators.cache import never_cache

from . import views

urlpatterns = [
    path("login/", auth_views.LoginView.as_view(redirect_authenticated_user=True), name="login"),
    path("logout/", auth_views.LogoutView.as_view(), name="logout"),
    path("signup/", views.signup_view, name="signup"),
    # Django's view keeps this session logged in (update_session_auth_hash) and ends the others.
    path(
        "password/",
        never_cache(auth_views.PasswordChangeView.as_view()),
        name="password_change",
    ),
    path(
        "password/done/",
        never_cache(auth_views.PasswordChangeDoneView.as_view()),
        name="password_change_done",
    ),
]
