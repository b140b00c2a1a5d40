"""What makes a call the model cannot make as asked (its problem, which it reads as the call's
result), and the built-in tools' own behaviour."""

from __future__ import annotations

import pytest

from continuity.brains import ToolSpec, ToolUse
from continuity.tools import BUILTIN_TOOLS, Asker, Tool, ToolError, arguments_problem, result_cut

CALCULATE = Tool(BUILTIN_TOOLS["calculate"].spec, "built-in")


def test_arguments_that_match_the_schema_have_no_problem():
    assert arguments_problem(ToolUse("a", "calculate", {"expression": "1 + 1"}), CALCULATE) == ""


@pytest.mark.parametrize(
    ("arguments", "said"),
    [
        ({}, "'expression' is a required property"),
        ({"expression": 5}, "5 is not of type 'string'"),
    ],
)
def test_arguments_that_do_not_match_the_schema_say_how(arguments, said):
    problem = arguments_problem(ToolUse("a", "calculate", arguments), CALCULATE)
    assert problem == f"The arguments do not match the tool's schema: {said}."


def test_arguments_past_the_size_limit_are_not_sent(settings):
    settings.CONTINUITY_TOOL_ARGUMENT_BYTES = 100
    problem = arguments_problem(ToolUse("a", "calculate", {"expression": "1" * 200}), CALCULATE)
    assert problem.startswith("The arguments are 218 bytes; a call may have at most 100.")


def test_an_unknown_tool_and_unreadable_arguments_are_problems_too():
    assert arguments_problem(ToolUse("a", "nope", {}), None) == (
        "There is no tool named 'nope' in this reply."
    )
    unreadable = ToolUse("a", "calculate", {}, problem="The arguments are not valid JSON.")
    assert arguments_problem(unreadable, CALCULATE) == "The arguments are not valid JSON."


def test_a_tool_whose_schema_is_not_one_has_its_arguments_unchecked():
    broken = Tool(ToolSpec("odd", "", {"type": "no-such-type"}), "server", "http://x/mcp")
    assert arguments_problem(ToolUse("a", "odd", {"x": 1}), broken) == ""


@pytest.mark.parametrize(
    ("expression", "value"),
    [("17 × 23", "391"), ("(2 + 3) ^ 2", "25"), ("7 / 2", "3.5"), ("10 // 3 − 1", "2")],
)
def test_calculate_works_out_arithmetic(expression, value):
    asker = Asker(owner_id=1, conversation_id=1, message_id=1)
    assert BUILTIN_TOOLS["calculate"].run(asker, {"expression": expression}) == (
        f"{expression} = {value}"
    )


@pytest.mark.parametrize("expression", ["__import__('os')", "2 ** 100000", "1 / 0", "x + 1"])
def test_calculate_refuses_what_is_not_bounded_arithmetic(expression):
    asker = Asker(owner_id=1, conversation_id=1, message_id=1)
    with pytest.raises(ToolError, match="Cannot calculate"):
        BUILTIN_TOOLS["calculate"].run(asker, {"expression": expression})


def test_a_result_is_cut_at_the_byte_limit_on_a_character_boundary(settings):
    settings.CONTINUITY_TOOL_RESULT_BYTES = 5
    text, cut = result_cut("héllo wörld")
    assert cut and text.startswith("héll\n[Cut: the result was 13 bytes; the first 5 are shown.]")
    assert result_cut("short") == ("short", False)
