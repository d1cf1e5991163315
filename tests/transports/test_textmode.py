"""Cards as plain text (sans-I/O): every built-in card rendered, replies read, bad replies re-prompted."""

from __future__ import annotations

import subprocess
import sys
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from lineup_plugin.plugins import collect_tools, get_plugin_manager
from lineup_plugin.protocol import codec
from lineup_plugin.protocol.messages import (
    Actor,
    AgentStatus,
    Attachment,
    DeviceWelcome,
    Error,
    MessageDelta,
    Origin,
    Payload,
    Text,
    ToolCall,
    ToolCancel,
    ToolList,
    ToolResult,
)
from lineup_plugin.protocol.session import ANSWERED_ELSEWHERE, EXPIRED
from lineup_plugin.transports.wukongim.textmode import (
    MAX_REPLY_CHARS,
    QUOTE_CHARS,
    CardAnswer,
    Output,
    Say,
    TextMode,
)

AGENT = Actor(kind="agent", id="lineup-agent")
USER = Actor(kind="device", id="wukongim:alice")
DEPLOY = {"question": "Deploy where?", "options": ["test", "staging", "production"]}


def sent(payload: Payload) -> str:
    """The encoded envelope the hub sends the user."""
    return codec.encode_envelope(payload, sender=AGENT, target=USER, conversation_id="default")


def call(name: str, arguments: dict[str, Any], *, call_id: str = "c1", **fields: Any) -> ToolCall:
    return ToolCall(call_id=call_id, name=name, arguments=arguments, **fields)


def said(outputs: list[Output] | None) -> str:
    assert outputs is not None
    return "\n---\n".join(o.text for o in outputs if isinstance(o, Say))


def answers(outputs: list[Output] | None) -> list[ToolResult]:
    assert outputs is not None
    return [o.result for o in outputs if isinstance(o, CardAnswer)]


def answer(outputs: list[Output] | None) -> tuple[str, dict[str, Any]]:
    (result,) = answers(outputs)
    return result.status, result.result


def opened(name: str, arguments: dict[str, Any], **fields: Any) -> tuple[TextMode, str]:
    mode = TextMode()
    return mode, said(mode.from_agent(sent(call(name, arguments, **fields))))


# ------------------------------------------------------------------------------- choice


def test_choice_is_a_numbered_list_answered_by_number() -> None:
    mode, prompt = opened("choice", DEPLOY)
    assert prompt == (
        'Deploy where?\n1. test\n2. staging\n3. production\nReply with a number from 1 to 3, or "cancel".'
    )
    out = mode.from_user("2")
    assert answer(out) == ("completed", {"selected": "staging", "index": 1})
    assert said(out) == "✓ You chose: staging"
    assert mode.from_user("2") is None  # no card open any more: plain text goes to the agent


def test_a_card_names_the_agent_session_that_asks() -> None:
    _, prompt = opened("choice", DEPLOY, origin=Origin(kind="cli", label="hermes"))
    assert prompt.startswith("[CLI · hermes]\nDeploy where?\n1. test")
    _, prompt = opened("confirm", {"message": "Go?"}, origin=Origin(kind="cron"))
    assert prompt.startswith("[Cron job]\nGo?")


@pytest.mark.parametrize("reply", ["２", "٢", "#2", "2.", " 2 ", "²", "STAGING", "Ｓｔａｇｉｎｇ"])
def test_choice_reads_unicode_digits_and_the_options_text(reply: str) -> None:
    mode, _ = opened("choice", DEPLOY)
    assert answer(mode.from_user(reply)) == ("completed", {"selected": "staging", "index": 1})


@pytest.mark.parametrize(
    ("reply", "problem"),
    [
        ("7", "There is no option 7."),
        ("0", "There is no option 0."),
        ("maybe", '"maybe" is not one of the options.'),
        ("", '"" is not one of the options.'),
        ("1 2", '"1 2" is not one of the options.'),
        ("9999999", '"9999999" is not one of the options.'),
    ],
)
def test_a_reply_that_does_not_fit_a_choice_is_re_prompted_and_the_card_stays(reply: str, problem: str) -> None:
    mode, _ = opened("choice", DEPLOY)
    out = mode.from_user(reply)
    assert answers(out) == []
    assert said(out) == f'{problem} Reply with a number from 1 to 3, or "cancel".'
    assert answer(mode.from_user("3")) == ("completed", {"selected": "production", "index": 2})


def test_a_huge_reply_is_refused_without_being_quoted_back() -> None:
    mode, _ = opened("choice", DEPLOY)
    out = mode.from_user("9" * (MAX_REPLY_CHARS + 1))
    assert said(out) == f"That reply is too long ({MAX_REPLY_CHARS + 1:,} characters; at most {MAX_REPLY_CHARS:,})."
    long_word = "x" * 50_000
    text = said(mode.from_user(long_word))
    assert len(text) < 200 and f'"{"x" * QUOTE_CHARS}…"' in text
    assert answer(mode.from_user("1"))[0] == "completed"


def test_a_lone_surrogate_is_refused_and_the_card_stays_answerable() -> None:
    mode, _ = opened("input", {"prompt": "Your name?"})
    out = mode.from_user("Ann\ud800")
    assert answers(out) == []
    assert "not valid text" in said(out)
    assert answer(mode.from_user("Ann")) == ("completed", {"values": {"answer": "Ann"}})


@pytest.mark.parametrize("word", ["cancel", "CANCEL", "Ｃａｎｃｅｌ", "取消", "/cancel"])
def test_cancel_by_text_cancels_a_choice(word: str) -> None:
    mode, _ = opened("choice", DEPLOY)
    out = mode.from_user(word)
    assert answer(out) == ("cancelled", {"message": "the user cancelled this in the chat"})
    assert said(out) == "✖ Cancelled."


def test_a_command_for_the_agent_is_not_read_as_an_answer() -> None:
    mode, _ = opened("choice", DEPLOY)
    assert mode.from_user("/stop") is None
    assert mode.cards  # still open


# ------------------------------------------------------------------------------ confirm


def test_confirm_shows_the_risk_and_details_and_reads_yes() -> None:
    arguments = {"message": "Delete branch feature-x?", "details": "git push origin --delete feature-x"}
    mode, prompt = opened("confirm", {**arguments, "risk": "system_permission"}, risk="system_permission")
    assert prompt == (
        "⚠ Delete branch feature-x?\nHigh risk: system permission\ngit push origin --delete feature-x\n"
        'Reply "yes" or "no", or "cancel".'
    )
    out = mode.from_user("Yes")
    assert answer(out) == ("completed", {"approved": True})
    assert said(out) == "✓ You approved this."


@pytest.mark.parametrize("reply", ["no", "N", "reject", "不", "拒绝", "cancel"])
def test_confirm_no_or_cancel_is_a_rejection(reply: str) -> None:
    mode, prompt = opened("confirm", {"message": "Ship it?"}, risk="user_confirmation")
    assert prompt.startswith("Ship it?\nNeeds your approval\n")
    assert answer(mode.from_user(reply)) == ("rejected", {"approved": False})


def test_confirm_re_prompts_on_anything_else() -> None:
    mode, _ = opened("confirm", {"message": "Ship it?"})
    assert said(mode.from_user("perhaps")) == '"perhaps" is neither "yes" nor "no". Reply "yes" or "no", or "cancel".'
    assert answer(mode.from_user("好的")) == ("completed", {"approved": True})


# -------------------------------------------------------------------------------- input


def test_input_without_fields_asks_one_answer() -> None:
    mode, prompt = opened("input", {"prompt": "What should the release be called?"})
    assert prompt == 'What should the release be called?\nReply with your answer, or "cancel".'
    assert said(mode.from_user("   ")) == 'This question needs an answer. Reply with your answer, or "cancel".'
    out = mode.from_user("  Aurora  ")
    assert answer(out) == ("completed", {"values": {"answer": "Aurora"}})
    assert said(out) == "✓ Sent answer: Aurora"


TRIP = {
    "type": "object",
    "properties": {
        "city": {"type": "string", "title": "City", "description": "where you fly to", "minLength": 2},
        "nights": {"type": "integer", "minimum": 1, "maximum": 30},
        "budget": {"type": "number"},
        "class": {"enum": ["economy", "business"]},
        "extras": {"type": "array", "items": {"enum": ["wifi", "meal", "lounge"]}, "uniqueItems": True},
        "insured": {"type": "boolean"},
        "note": {"type": "string"},
        "seat": {"type": "string", "default": "aisle"},
    },
    "required": ["city", "nights", "class", "insured"],
}


def test_input_asks_one_field_at_a_time_checking_each_against_its_schema() -> None:
    mode, prompt = opened("input", {"prompt": "Book a trip", "fields": TRIP})
    assert prompt == ('Book a trip\nQuestion 1 of 8: City — where you fly to\nReply with your answer, or "cancel".')
    assert said(mode.from_user("X")) == "'X' is too short. Reply with your answer, or \"cancel\"."
    assert said(mode.from_user("Lisbon")) == (
        'Book a trip\nQuestion 2 of 8: nights\nReply with a whole number, or "cancel".'
    )
    assert said(mode.from_user("three")).startswith('"three" is not a number. Reply with a whole number')
    assert said(mode.from_user("2.5")).startswith('"2.5" is not a whole number.')
    assert said(mode.from_user("0")).startswith("0 is less than the minimum of 1.")
    assert "Question 3 of 8: budget (optional)" in said(mode.from_user("٣"))  # Arabic-Indic 3
    assert said(mode.from_user("1e999")).startswith("That number is too large.")
    budget = said(mode.from_user("1,5"))
    assert budget.startswith('"1,5" is not a number. Reply with a number, "skip" to leave it empty, or "cancel".')
    prompt = said(mode.from_user("1200.50"))
    assert "Question 4 of 8: class\n1. economy\n2. business\nReply with a number from 1 to 2" in prompt
    assert said(mode.from_user("skip")).startswith("This question needs an answer.")
    prompt = said(mode.from_user("2"))
    assert "Question 5 of 8: extras (optional)\n1. wifi\n2. meal\n3. lounge\n" in prompt
    assert 'Reply with one or more numbers from 1 to 3, e.g. "1, 2", "skip" to leave it empty' in prompt
    assert said(mode.from_user("1, 4")).startswith("There is no option 4.")
    assert "Question 6 of 8: insured" in said(mode.from_user("3、1，1"))
    assert said(mode.from_user("maybe")).startswith('"maybe" is neither "yes" nor "no".')
    assert "Question 7 of 8: note (optional)" in said(mode.from_user("no"))
    prompt = said(mode.from_user("skip"))
    assert 'Question 8 of 8: seat (optional)\nReply with your answer, "skip" to keep aisle, or "cancel".' in prompt
    out = mode.from_user("skip")
    values = {
        "city": "Lisbon",
        "nights": 3,
        "budget": 1200.5,
        "class": "business",
        "extras": ["lounge", "wifi"],
        "insured": False,
        "seat": "aisle",
    }
    assert answer(out) == ("completed", {"values": values})
    assert said(out).startswith('✓ Sent city: Lisbon, nights: 3, budget: 1200.5, class: business, extras: ["lounge"')


def test_an_enum_of_numbers_takes_the_option_number_or_the_value_itself() -> None:
    fields = {"properties": {"size": {"enum": [10, 20, 30]}}, "required": ["size"]}
    mode, prompt = opened("input", {"prompt": "Size?", "fields": fields})
    assert "1. 10\n2. 20\n3. 30\n" in prompt
    assert answer(mode.from_user("20")) == ("completed", {"values": {"size": 20}})
    mode, _ = opened("input", {"prompt": "Size?", "fields": fields})
    assert answer(mode.from_user("2")) == ("completed", {"values": {"size": 20}})


def test_input_json_fields_and_schemas_it_cannot_check() -> None:
    fields = {
        "properties": {
            "tags": {"type": "object", "additionalProperties": {"type": "integer"}},
            "odd": {"type": "bogus"},
        },
        "required": ["tags", "odd"],
    }
    mode, prompt = opened("input", {"prompt": "Details", "fields": fields})
    assert prompt.endswith('Reply with JSON (an object), or "cancel".')
    assert said(mode.from_user("{nope")).startswith("That is not valid JSON.")
    assert said(mode.from_user('{"a": NaN}')).startswith("That is not valid JSON.")
    assert said(mode.from_user('{"a": "x"}')).startswith("'x' is not of type 'integer'.")
    mode.from_user('{"a": 1}')
    out = mode.from_user("anything")  # a type jsonschema does not know: left unchecked, as the App's form does
    assert answer(out) == ("completed", {"values": {"tags": {"a": 1}, "odd": "anything"}})


@pytest.mark.parametrize(
    ("reply", "problem"),
    [
        ('"\\ud800"', "lone surrogate"),
        ("[1e999]", "not finite"),
        ("[" * 40 + "]" * 40, "nested deeper than 32 levels"),
        ("[" * 40_000 + "]" * 40_000, "not valid JSON"),  # deeper than the JSON parser goes
    ],
)
def test_json_answers_the_store_could_not_keep_are_refused(reply: str, problem: str) -> None:
    mode, _ = opened("input", {"prompt": "Data", "fields": {"properties": {"data": {"type": "array"}}}})
    out = mode.from_user(reply)
    assert answers(out) == [] and problem in said(out)
    assert answer(mode.from_user("[1]")) == ("completed", {"values": {"data": [1]}})


def test_a_form_that_does_not_fit_as_a_whole_is_asked_again() -> None:
    fields = {
        "properties": {"a": {"type": "string"}, "b": {"type": "string"}},
        "dependentRequired": {"a": ["b"]},
    }
    mode, _ = opened("input", {"prompt": "Pair", "fields": fields})
    mode.from_user("x")
    out = mode.from_user("skip")
    assert answers(out) == []
    again = "⚠ 'b' is a dependency of 'a'. Let us go through the form again.\n\nPair\nQuestion 1"
    assert said(out).startswith(again)
    mode.from_user("x")
    assert answer(mode.from_user("y")) == ("completed", {"values": {"a": "x", "b": "y"}})


def test_cancel_in_the_middle_of_a_form_cancels_it() -> None:
    mode, _ = opened("input", {"prompt": "Book a trip", "fields": TRIP})
    mode.from_user("Lisbon")
    assert answer(mode.from_user("cancel")) == ("cancelled", {"message": "the user cancelled this in the chat"})


# --------------------------------------------------------------- tools with no interactive form


def test_calculator_is_computed_and_shown_as_the_app_does() -> None:
    mode = TextMode()
    out = mode.from_agent(sent(call("calculator", {"a": 2, "b": 3.5}, action="add")))
    assert said(out) == "2 + 3.5 = 5.5"
    assert answer(out) == ("completed", {"value": 5.5})
    out = mode.from_agent(sent(call("calculator", {"a": 1, "b": 0}, action="divide", call_id="c2")))
    assert answer(out) == ("failed", {"message": "division by zero"})
    out = mode.from_agent(sent(call("calculator", {"a": 1e308, "b": 10}, action="multiply", call_id="c3")))
    assert answer(out) == ("failed", {"message": "the result is not a finite number"})
    out = mode.from_agent(sent(call("calculator", {"a": 1, "b": 2}, action="power", call_id="c4")))
    assert answer(out) == ("unsupported", {"message": 'the calculator has no action "power"'})
    assert not mode.cards


@pytest.mark.parametrize(("name", "action"), [("canvas", "open"), ("lineup_weather", None)])
def test_a_tool_with_no_text_form_is_answered_unsupported(name: str, action: str | None) -> None:
    mode = TextMode()
    out = mode.from_agent(sent(call(name, {"width": 10, "height": 10}, action=action)))
    status, result = answer(out)
    assert status == "unsupported" and f'tool "{name}" has no text form' in result["message"]
    assert said(out) == f'The agent asked for "{name}", which cannot be shown in this chat; it was told.'
    assert not mode.cards


# -------------------------------------------------------------------------- several cards


def test_cards_are_asked_one_at_a_time_saying_how_many_wait() -> None:
    mode = TextMode()
    first = said(mode.from_agent(sent(call("choice", DEPLOY, call_id="c1"))))
    assert "waiting" not in first
    assert mode.from_agent(sent(call("confirm", {"message": "Ship it?"}, call_id="c2"))) == []
    assert mode.from_agent(sent(call("input", {"prompt": "Name?"}, call_id="c3"))) == []
    out = mode.from_user("1")
    assert answers(out)[0].call_id == "c1"
    assert said(out) == '✓ You chose: test\n\nShip it? (1 more waiting)\nReply "yes" or "no", or "cancel".'
    out = mode.from_user("yes")
    assert answers(out)[0].call_id == "c2"
    assert said(out).endswith('Name?\nReply with your answer, or "cancel".')


def test_cancel_expiry_and_answers_elsewhere_are_posted_and_the_next_card_asked() -> None:
    mode = TextMode()
    mode.from_agent(sent(call("choice", DEPLOY, call_id="c1")))
    mode.from_agent(sent(call("confirm", {"message": "Ship it?"}, call_id="c2")))
    mode.from_agent(sent(call("input", {"prompt": "Name?"}, call_id="c3")))
    mode.from_agent(sent(call("input", {"prompt": "Town?"}, call_id="c4")))
    assert mode.from_agent(sent(ToolCancel(call_id="c3", reason="the agent was interrupted"))) == []  # never shown
    out = mode.from_agent(sent(ToolCancel(call_id="c1", reason=f"expired: {EXPIRED}")))
    assert said(out).startswith("✖ Expired: Deploy where? (no answer in time)\n\nShip it? (1 more waiting)")
    out = mode.from_agent(sent(ToolCancel(call_id="c2", reason=ANSWERED_ELSEWHERE)))
    assert said(out).startswith("✓ Answered on another device: Ship it?\n\nTown?")
    out = mode.from_agent(sent(ToolCancel(call_id="c4", reason="the agent was interrupted")))
    assert said(out) == "✖ Cancelled: Town? (the agent was interrupted)"
    assert mode.from_user("hello") is None


def test_agent_text_is_said_and_status_and_tool_lists_are_not() -> None:
    mode = TextMode()
    assert said(mode.from_agent(sent(Text(text="Deployed to staging.")))) == "Deployed to staging."
    assert mode.from_agent(sent(MessageDelta(message_id="m1", seq=0, text="Depl"))) == []  # only the settled reply
    assert mode.from_agent(sent(Text(text=""))) == []
    chart = Attachment(id="ab" * 32, name="chart.png", mime="image/png", size=12_345, data="aGk=")
    reply = Text(text="Here is the chart.", message_id="m1", attachments=[chart], interrupted=True)
    assert said(mode.from_agent(sent(reply))) == (
        "Here is the chart.\n[the reply stopped here: the agent was interrupted]\n"
        "[a file this chat cannot show: chart.png (image/png, 12,345 bytes)]"
    )
    assert mode.from_agent(sent(AgentStatus(state="thinking"))) == []
    assert mode.from_agent(sent(ToolList(tools=[]))) == []
    assert mode.from_agent("not an envelope") == []


def test_a_welcome_closes_cards_that_ended_meanwhile_and_re_asks_the_live_one() -> None:
    mode = TextMode()
    mode.from_agent(sent(call("choice", DEPLOY, call_id="c1")))
    mode.from_agent(sent(call("confirm", {"message": "Ship it?"}, call_id="c2")))
    welcome = DeviceWelcome(device_id="wukongim:alice", agent=AGENT, pending=1)
    assert mode.from_agent(sent(welcome)) == []
    out = mode.from_agent(sent(call("confirm", {"message": "Ship it?"}, call_id="c2")))
    assert said(out).startswith("✖ Closed meanwhile: Deploy where?\n\nShip it?")
    assert list(mode.cards) == ["c2"]
    assert said(mode.from_agent(sent(call("confirm", {"message": "Ship it?"}, call_id="c2")))).startswith(
        "Ship it?"
    )  # re-sent (a message was lost): the open question is asked again
    out = mode.from_agent(sent(DeviceWelcome(device_id="wukongim:alice", agent=AGENT, pending=0)))
    assert said(out) == "✖ Closed meanwhile: Ship it?"


def test_an_answer_the_agent_refuses_reopens_its_card() -> None:
    mode, _ = opened("choice", DEPLOY)
    mode.from_user("1")
    refusal = Error(code="invalid_result", message="choice: field 'index': bad", call_id="c1")
    out = mode.from_agent(sent(refusal))
    assert said(out).startswith("⚠ The agent did not take that answer: choice: field 'index': bad\n\nDeploy where?")
    assert answer(mode.from_user("2"))[1]["index"] == 1
    late = Error(code="call_closed", message="call 'c1' already ended as expired", call_id="c1")
    assert said(mode.from_agent(sent(late))) == "⚠ That answer came too late: call 'c1' already ended as expired"


def test_cards_the_previous_run_left_open_are_said_closed_in_one_message() -> None:
    ended = [
        (call("choice", DEPLOY), "the agent restarted before an answer arrived; ask again"),
        (call("canvas", {}, action="open", call_id="c2"), "the agent restarted before an answer arrived; ask again"),
        (call("confirm", {"message": "Ship it?"}, call_id="c3"), "no answer before the deadline"),
    ]
    assert said(TextMode().closed_by_restart(ended)) == (
        "✖ Closed: Deploy where? (the agent restarted before an answer arrived; ask again)\n"
        "✖ Closed: Ship it? (no answer before the deadline)"
    )
    assert TextMode().closed_by_restart([]) == []


def test_a_call_sent_again_after_it_was_answered_is_not_asked_again() -> None:
    mode, _ = opened("choice", DEPLOY)
    mode.from_user("1")
    assert mode.from_agent(sent(call("choice", DEPLOY))) == []


# ------------------------------------------------------------------------------- the setting


def test_auto_stops_text_once_the_client_declares_lineup_and_the_setting_forces_either_way() -> None:
    auto = TextMode("auto")
    auto.from_agent(sent(call("choice", DEPLOY)))
    assert auto.active
    auto.declare()
    assert not auto.active and not auto.cards
    always = TextMode("always")
    always.declare()
    assert always.active
    assert not TextMode("never").active


# ----------------------------------------------------------------------- attacks and layering

FUZZ = settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
REGISTRY = collect_tools(get_plugin_manager(load_entrypoints=False))
CARDS = [
    ("choice", {"question": "Pick", "options": ["a", "B", "3", "ｃ", "٤"]}),
    ("confirm", {"message": "Go?", "risk": "restricted"}),
    ("input", {"prompt": "Anything?"}),
    ("input", {"prompt": "Trip", "fields": TRIP}),
    ("input", {"prompt": "Data", "fields": {"properties": {"x": {"type": "object"}, "y": {"type": "array"}}}}),
]
replies = st.text(max_size=60) | st.sampled_from(["1", "２", "yes", "no", "skip", "cancel", "[1]", '{"a": 1}', "1, 2"])


@FUZZ
@given(card=st.sampled_from(CARDS), texts=st.lists(replies, min_size=1, max_size=12))
def test_any_replies_give_re_prompts_or_answers_that_satisfy_the_tools_output_schema(
    card: tuple[str, dict[str, Any]], texts: list[str]
) -> None:
    name, arguments = card
    mode, _ = opened(name, arguments)
    for text in texts:
        out = mode.from_user(text)
        if out is None:  # the card ended, or a /command: not an answer
            assert not mode.cards or text.lstrip().startswith("/")
            continue
        assert out and all(isinstance(o, Say) and o.text for o in out if not isinstance(o, CardAnswer))
        for result in answers(out):
            assert result.status in ("completed", "rejected", "cancelled")
            if result.status == "completed":
                assert REGISTRY.check_result(name, None, result.result) is None, result.result
            codec.check_storable(result.result)  # the store can keep it


def test_textmode_does_no_io_in_a_fresh_interpreter() -> None:
    code = (
        "import sys\n"
        "from lineup_plugin.protocol import codec\n"
        "from lineup_plugin.protocol.messages import Actor, ToolCall\n"
        "from lineup_plugin.transports.wukongim.textmode import TextMode\n"
        "mode = TextMode()\n"
        "fields = {'properties': {'n': {'type': 'integer', 'minimum': 1, 'multipleOf': 2}}}\n"
        "call = ToolCall(call_id='c', name='input', arguments={'prompt': 'n?', 'fields': fields})\n"
        "a = Actor(kind='agent', id='a')\n"
        "assert mode.from_agent(codec.encode_envelope(call, sender=a, target=a, conversation_id='c'))\n"
        "assert 'multiple of 2' in mode.from_user('3')[0].text\n"
        "assert mode.from_user('4')[0].result.result == {'values': {'n': 4}}\n"
        "print(sorted(m for m in ('asyncio', 'websockets', 'anyio', 'httpx', 'sqlite3') if m in sys.modules))\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert done.stdout.strip() == "[]"
