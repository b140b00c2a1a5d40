"""The settings' one reader of the environment (continuity.settings.env)."""

from __future__ import annotations

from pathlib import Path

import pytest
from django.core.exceptions import ImproperlyConfigured

from continuity.settings.env import env


@pytest.mark.parametrize(
    ("raw", "default", "expected"),
    [
        ("yes", False, True),
        ("on", False, True),
        ("off", True, False),
        ("0", True, False),
        ("", True, False),
        ("12", 5, 12),
        ("0.25", 1.0, 0.25),
        ("a, b,,c", ["x"], ["a", "b", "c"]),
        ("5,30", [1.0], [5.0, 30.0]),
        ("/srv/var", Path("var"), Path("/srv/var")),
        ("text", "", "text"),
    ],
)
def test_a_value_is_read_as_its_default_is(monkeypatch, raw, default, expected):
    monkeypatch.setenv("CONTINUITY_SETTING", raw)
    assert env("CONTINUITY_SETTING", default) == expected


def test_an_unset_variable_is_its_default(monkeypatch):
    monkeypatch.delenv("CONTINUITY_SETTING", raising=False)
    assert env("CONTINUITY_SETTING", [5.0]) == [5.0]


@pytest.mark.parametrize(
    ("raw", "default", "said"),
    [
        ("maybe", False, "CONTINUITY_SETTING='maybe': expected 1 or 0"),
        ("1.5", 3, "CONTINUITY_SETTING='1.5': expected a whole number."),
        ("soon", 1.0, "CONTINUITY_SETTING='soon': expected a number."),
        ("5,ten", [5.0], "CONTINUITY_SETTING='ten': expected a number."),
    ],
)
def test_a_bad_value_names_its_variable(monkeypatch, raw, default, said):
    monkeypatch.setenv("CONTINUITY_SETTING", raw)
    with pytest.raises(ImproperlyConfigured) as refused:
        env("CONTINUITY_SETTING", default)
    assert str(refused.value).startswith(said)
