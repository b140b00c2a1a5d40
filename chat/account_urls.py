from django.contrib.auth import views as auth_views
from django.urls import path
from django.views.decorators.cache import never_cache

from . import account_views, views

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
    path("email/", account_views.email_change_view, name="email_change"),
    path("password/reset/", account_views.PasswordResetView.as_view(), name="password_reset"),
    path(
        "password/reset/sent/",
        never_cache(auth_views.PasswordResetDoneView.as_view()),
        name="password_reset_done",
    ),
    path(
        "password/reset/<uidb64>/<token>/",
        auth_views.PasswordResetConfirmView.as_view(),  # never cached by Django already
        name="password_reset_confirm",
    ),
    path(
        "password/reset/done/",
        never_cache(auth_views.PasswordResetCompleteView.as_view()),
        name="password_reset_complete",
    ),
]
