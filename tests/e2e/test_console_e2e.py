"""The console at /console in a real browser (Debian's chromium under Playwright) against a
real stack and the fake provider: sign in, streaming, approvals, client tools, interrupts,
a gateway restart mid-answer, subagents, the timeline's Temporal links, spend and a turn
paused on its budget, the keyboard, and hostile model output."""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import signal
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import httpx
import pytest
from harness import Stack, StackFactory
from playwright.async_api import Browser, Page, expect
from support.api_process import chatd_api, until_ready
from support.browser import ConsolePage, chromium, console_page, screenshot_on_failure
from support.names import model_name

from chatd.devstack.ports import free_port
from chatd.devstack.temporal import TemporalDevServer
from chatd.fake_provider.script import (
    FakeError,
    FakeRequest,
    FakeResponse,
    FakeText,
    FakeToolCall,
    FakeUsage,
)
from chatd.prices import Prices, TokenPrice

TEMPORAL_UI = "http://temporal-ui.test:8233"
README_SCREENSHOT = Path(__file__).resolve().parents[2] / "docs" / "images" / "console-chat.png"
"""Written when CHATD_README_SCREENSHOT=1 (a run doesn't change a tracked file otherwise)."""
LONG_TEXT = " ".join(f"word{i}" for i in range(80))
expect.set_options(timeout=30_000)  # turns on a busy machine take seconds, not milliseconds
# As in test_spend_e2e: every test model (`m-…`) at $2 per million input tokens and $10 per
# million output; a step reporting 1,000 in and 100 out costs $0.003.
SPEND_PRICES = Prices({"anthropic/m-": TokenPrice(input=2, output=10)})
STEP_USAGE = FakeUsage(input_tokens=1000, output_tokens=100)


@pytest.fixture(scope="session")
async def browser() -> AsyncIterator[Browser]:
    """One chromium per test process."""
    async with chromium() as running:
        yield running


@pytest.fixture
def console_prices() -> Prices | None:
    """The console stack's price table (None: `CHATD_PRICES`, as in production); a test that
    needs its steps priced parametrizes it."""
    return None


@pytest.fixture
async def console_stack(
    make_stack: StackFactory, monkeypatch: pytest.MonkeyPatch, console_prices: Prices | None
) -> AsyncIterator[Stack]:
    """A stack whose gateway serves the console, linking turns to `TEMPORAL_UI`."""
    monkeypatch.setenv("CHATD_CONSOLE", "1")
    monkeypatch.setenv("CHATD_TEMPORAL_UI_URL", TEMPORAL_UI)
    async with make_stack(prices=console_prices) as stack:
        yield stack


def _console_url(base: str) -> str:
    return base.removesuffix("/api/v1") + "/console/"


@pytest.fixture
async def console(
    browser: Browser, console_stack: Stack, request: pytest.FixtureRequest
) -> AsyncIterator[ConsolePage]:
    """A fresh page of the console stack's console, signed in as its first owner; a
    screenshot in tests/artifacts if the test fails; no dialog and no page error allowed."""
    failed_before = request.session.testsfailed
    async with console_page(
        browser, _console_url(console_stack.base_url), request.node.name
    ) as page:
        async with screenshot_on_failure(
            page, request.node.name, lambda: request.session.testsfailed > failed_before
        ):
            await page.sign_in(console_stack.key)
            yield page
            assert page.dialogs == [], "a dialog opened"
            assert page.errors == [], "the page threw"


def _text_of(message: dict[str, Any]) -> str:
    return "".join(p.get("text", "") for p in message["parts"] if p["type"] == "text")


async def _chat_with(stack: Stack, *responses: FakeResponse, **chat: Any) -> str:
    created = await stack.create_chat(model=stack.stepped_model(*responses), **chat)
    return str(created["id"])


def _assistant(page: Page) -> Any:
    """The persisted assistant messages of the open chat's transcript."""
    return page.locator("ol.transcript > li.message.role-assistant:not(.streaming)")


async def _streaming_prefix(page: Page, full: str) -> str:
    """Wait until the step streaming now shows part of `full` (a proper prefix); return it."""
    handle = await page.wait_for_function(
        """full => {
            const el = document.querySelector("li.message.streaming .message-body");
            const text = el ? el.textContent : "";
            const partial = text.length > 0 && text.length < full.length;
            return partial && full.startsWith(text) ? text : null;
        }""",
        arg=full,
        polling=20,
    )
    shown: str = await handle.json_value()
    return shown


async def test_sign_in_lists_chats_and_sign_out_forgets_the_key(
    browser: Browser, console_stack: Stack, request: pytest.FixtureRequest
) -> None:
    stack = console_stack
    await stack.create_chat(title="Existing chat")
    async with console_page(browser, _console_url(stack.base_url), request.node.name) as console:
        page = console.page
        await page.goto(console.url)
        await page.get_by_role("textbox", name="API key").fill("not-a-key-0123456789")
        await page.get_by_role("button", name="Sign in").click()
        await expect(page.get_by_role("alert")).to_contain_text("refused")

        await page.get_by_role("textbox", name="API key").fill(stack.key)
        await page.get_by_role("button", name="Sign in").click()
        chats = page.get_by_role("navigation", name="Chats")
        await expect(chats.get_by_role("link", name="Existing chat")).to_be_visible()
        assert await page.evaluate("() => Object.values(sessionStorage)") == [stack.key]
        assert stack.key not in page.url
        # A chat made elsewhere joins the list live (the watch stream), with its status.
        made = await _chat_with(stack, FakeResponse(parts=[FakeText(text="hi")]), title="Made now")
        sent = await stack.http.post(f"/chats/{made}/messages", json={"content": "hi"}, timeout=60)
        assert sent.status_code == 202, sent.text
        entry = chats.locator(f'li[data-chat-id="{made}"]')
        await expect(entry.get_by_role("link", name="Made now")).to_be_visible()
        await expect(entry.locator(".badge")).to_have_text("waiting")

        await page.get_by_role("button", name="Sign out").click()
        await expect(page.get_by_role("textbox", name="API key")).to_be_visible()
        assert await page.evaluate("() => sessionStorage.length") == 0
        assert console.errors == []


async def test_a_new_chat_streams_its_answer_and_joins_the_list(
    console: ConsolePage, console_stack: Stack
) -> None:
    stack = console_stack
    answer = (
        "Here is the plan, **step by step**:\n\n- read `notes.md`\n- write the summary\n\n"
        "See [the docs](https://docs.temporal.io) for more. " + LONG_TEXT
    )
    model = stack.stepped_model(
        FakeResponse(parts=[FakeToolCall(name="list_files", arguments={"path": "."})]),
        FakeResponse(parts=[FakeText(text=answer, chunk_size=6)], delta_delay_s=0.05),
    )
    page = console.page
    await page.get_by_role("button", name="New chat").click()
    await page.get_by_role("combobox", name="Model").fill(f"anthropic/{model['name']}")
    await page.get_by_role("textbox", name="Title").fill("Plan the summary")
    await page.get_by_role("button", name="Create chat").click()
    message = page.get_by_role("textbox", name="Message", exact=True)
    await message.fill("Make a plan, then summarise notes.md")
    await page.get_by_role("button", name="Send").click()

    partial = await _streaming_prefix(page, answer)
    assert 0 < len(partial) < len(answer)  # text came in pieces, before the whole answer
    await expect(_assistant(page).last).to_contain_text("for more. word0")
    await expect(page.locator("li.message.streaming")).to_have_count(0)
    last = _assistant(page).last
    assert await last.locator("strong").inner_text() == "step by step"
    assert await last.locator("li").all_inner_texts() == ["read notes.md", "write the summary"]
    assert await last.locator("a").get_attribute("href") == "https://docs.temporal.io/"
    await expect(page.locator(".tool-call").first).to_contain_text("list_files")
    chats = page.get_by_role("navigation", name="Chats")
    await expect(chats.get_by_role("link", name="Plan the summary")).to_be_visible()
    await expect(page.get_by_role("status", name="Chat status")).to_have_text("waiting")
    (chat,) = (await stack.http.get("/chats")).json()["chats"]
    messages = await stack.messages(chat["id"])
    assert _text_of(messages[-1]) == answer
    shot = await console.screenshot("console-chat")
    if os.environ.get("CHATD_README_SCREENSHOT") == "1":
        shutil.copyfile(shot, README_SCREENSHOT)


async def test_approve_one_call_deny_another_and_edit_a_third(
    console: ConsolePage, console_stack: Stack
) -> None:
    stack = console_stack
    calls = [
        FakeToolCall(name="write_file", arguments={"path": f"{n}.txt", "content": n})
        for n in ("first", "second", "third")
    ]
    chat_id = await _chat_with(
        stack,
        FakeResponse(parts=[FakeText(text="Writing three files."), *calls]),
        FakeResponse(parts=[FakeText(text="Done with the files.")]),
        tool_policy={"write_file": "ask"},
    )
    page = console.page
    await console.open_chat(chat_id)
    await page.get_by_role("textbox", name="Message", exact=True).fill("write them")
    await page.get_by_role("button", name="Send").click()

    cards = page.locator("article.call-card")
    await expect(cards).to_have_count(3)
    first, second, third = (cards.filter(has_text=f"{n}.txt") for n in ("first", "second", "third"))
    await first.get_by_role("button", name="Approve").click()
    await second.get_by_role("textbox", name="Reason for denying write_file").fill("not that one")
    await second.get_by_role("button", name="Deny").click()
    await third.get_by_role("button", name="Edit arguments").click()
    edit = third.get_by_role("textbox", name="Arguments for write_file")
    await edit.fill(json.dumps({"path": 5}))
    await third.get_by_role("button", name="Approve").click()
    refusal = page.locator("section.approvals").get_by_role("alert")
    await expect(refusal).to_contain_text("400 invalid_tool_approvals")
    assert (await stack.http.get(f"/chats/{chat_id}")).json()["status"] == "requires_action"

    await edit.fill(json.dumps({"path": "third-edited.txt", "content": "edited"}))
    await third.get_by_role("button", name="Approve").click()
    await expect(_assistant(page).last).to_contain_text("Done with the files.")
    await expect(page.locator("section.approvals")).to_have_count(0)

    messages = await stack.messages(chat_id)
    results = {
        p["tool_call_id"]: p for m in messages for p in m["parts"] if p["type"] == "tool_result"
    }
    called = [p for m in messages for p in m["parts"] if p["type"] == "tool_call"]
    by_path = {json.loads(c["original_arguments"] or c["arguments"])["path"]: c for c in called}
    assert not results[by_path["first.txt"]["id"]]["is_error"]
    denied = results[by_path["second.txt"]["id"]]
    assert denied["is_error"] and "not that one" in json.dumps(denied["output"])
    assert json.loads(by_path["third.txt"]["arguments"])["path"] == "third-edited.txt"
    # Each card says who decided; the audit lists the three decisions.
    await expect(page.locator(".tool-call .decision")).to_have_count(3)
    await expect(page.locator(".tool-call .decision").first).to_contain_text("approved by alice")
    await page.get_by_role("button", name="Audit").click()
    await expect(page.locator("table.audit tbody tr")).to_have_count(3)
    await expect(page.locator("table.audit")).to_contain_text("denied by alice")


async def test_a_client_tools_result_is_checked_then_submitted(
    console: ConsolePage, console_stack: Stack
) -> None:
    stack = console_stack
    ask = {
        "name": "ask_user",
        "description": "Ask the user a question",
        "input_schema": {"type": "object", "properties": {"question": {"type": "string"}}},
    }
    chat_id = await _chat_with(
        stack,
        FakeResponse(parts=[FakeToolCall(name="ask_user", arguments={"question": "Which city?"})]),
        FakeResponse(parts=[FakeText(text="Lisbon it is.")]),
        dynamic_tools=[ask],
    )
    page = console.page
    await console.open_chat(chat_id)
    await page.get_by_role("textbox", name="Message", exact=True).fill("plan my trip")
    await page.get_by_role("button", name="Send").click()

    result = page.get_by_role("textbox", name="Result for ask_user")
    await result.fill("Lisbon")  # not JSON: refused before anything is sent
    await page.get_by_role("button", name="Submit results").click()
    await expect(page.locator("form.client-tools").get_by_role("alert")).to_contain_text(
        "not valid JSON"
    )
    assert (await stack.http.get(f"/chats/{chat_id}")).json()["status"] == "requires_action"

    await result.fill('{"city": "Lisbon"}')
    await page.get_by_role("button", name="Submit results").click()
    await expect(_assistant(page).last).to_contain_text("Lisbon it is.")
    messages = await stack.messages(chat_id)
    (output,) = [p["output"] for m in messages for p in m["parts"] if p["type"] == "tool_result"]
    assert output == {"city": "Lisbon"}


async def test_an_interrupted_answer_keeps_its_partial_text(
    console: ConsolePage, console_stack: Stack
) -> None:
    stack = console_stack
    chat_id = await _chat_with(
        stack, FakeResponse(parts=[FakeText(text=LONG_TEXT, chunk_size=6)], delta_delay_s=0.1)
    )
    page = console.page
    await console.open_chat(chat_id)
    await page.get_by_role("textbox", name="Message", exact=True).fill("talk for a while")
    await page.get_by_role("button", name="Send").click()
    await _streaming_prefix(page, LONG_TEXT)
    await page.get_by_role("button", name="Interrupt").click()

    await expect(page.get_by_role("status", name="Chat status")).to_have_text("waiting")
    await expect(_assistant(page)).to_have_count(1)
    kept = await _assistant(page).last.locator(".message-body").inner_text()
    assert kept and LONG_TEXT.startswith(kept) and len(kept) < len(LONG_TEXT)
    messages = await stack.messages(chat_id)
    assert _text_of(messages[-1]) == kept
    await expect(page.get_by_role("button", name="Interrupt")).to_be_disabled()


async def test_keyboard_only_send_with_enter_and_interrupt_with_escape(
    console: ConsolePage, console_stack: Stack
) -> None:
    stack = console_stack
    chat_id = await _chat_with(
        stack,
        FakeResponse(parts=[FakeText(text=LONG_TEXT, chunk_size=6)], delta_delay_s=0.1),
        title="Keyboard chat",
    )
    page = console.page
    await page.reload()  # the chat was made after sign-in: the list shows it on load
    link = page.get_by_role("navigation", name="Chats").get_by_role("link", name="Keyboard chat")
    await link.wait_for()
    for _ in range(20):  # Tab to the chat's link, as a keyboard user would
        if await link.evaluate("el => el === document.activeElement"):
            break
        await page.keyboard.press("Tab")
    await page.keyboard.press("Enter")
    message = page.get_by_role("textbox", name="Message", exact=True)
    await expect(message).to_be_focused()
    await page.keyboard.type("hello from the keyboard")
    await page.keyboard.press("Enter")

    await expect(message).to_have_value("")
    await _streaming_prefix(page, LONG_TEXT)
    await page.keyboard.press("Escape")
    await expect(page.get_by_role("status", name="Chat status")).to_have_text("waiting")
    messages = await stack.messages(chat_id)
    assert [m["role"] for m in messages] == ["user", "assistant"]
    assert _text_of(messages[0]) == "hello from the keyboard"
    assert 0 < len(_text_of(messages[1])) < len(LONG_TEXT)


async def test_a_subagent_appears_under_its_parent(
    console: ConsolePage, console_stack: Stack
) -> None:
    stack = console_stack
    child = stack.stepped_model(FakeResponse(parts=[FakeText(text="child answer")]))
    spawn = FakeToolCall(
        name="spawn_agent", arguments={"prompt": "count the files", "model": child}
    )
    parent_id = await _chat_with(
        stack,
        FakeResponse(parts=[spawn]),
        FakeResponse(parts=[FakeToolCall(name="wait_agent", arguments={"timeout_s": 60})]),
        FakeResponse(parts=[FakeText(text="the child is done")]),
        subagents=True,
        title="Parent chat",
    )
    page = console.page
    await console.open_chat(parent_id)
    await page.get_by_role("textbox", name="Message", exact=True).fill("split the work")
    await page.get_by_role("button", name="Send").click()
    await expect(_assistant(page).last).to_contain_text("the child is done")

    children = (await stack.http.get(f"/chats/{parent_id}/children")).json()["data"]
    (child_chat,) = children
    nav = page.get_by_role("navigation", name="Chats")
    nested = nav.get_by_role("list", name="Subagents of Parent chat")
    await expect(nested.locator(f'li[data-chat-id="{child_chat["id"]}"] > a')).to_be_visible()
    await expect(nav.locator(f':scope > ul > li[data-chat-id="{child_chat["id"]}"]')).to_have_count(
        0
    )
    await expect(nav.locator(f':scope > ul > li[data-chat-id="{parent_id}"]')).to_have_count(1)


async def test_each_turns_timeline_links_its_workflow_run_in_the_temporal_ui(
    console: ConsolePage, console_stack: Stack
) -> None:
    stack = console_stack
    chat_id = await _chat_with(
        stack,
        FakeResponse(parts=[FakeToolCall(name="list_files", arguments={"path": "."})]),
        FakeResponse(parts=[FakeText(text="first answer")]),
        FakeResponse(parts=[FakeText(text="second answer")]),
    )
    page = console.page
    await console.open_chat(chat_id)
    message = page.get_by_role("textbox", name="Message", exact=True)
    for text, answer in (("one", "first answer"), ("two", "second answer")):
        await message.fill(text)
        await page.get_by_role("button", name="Send").click()
        await expect(_assistant(page).last).to_contain_text(answer)
        await expect(page.get_by_role("status", name="Chat status")).to_have_text("waiting")
    await page.get_by_role("button", name="Timeline").click()
    links = page.get_by_role("link", name="in the Temporal UI")
    await expect(links).to_have_count(2)
    await expect(page.locator("li.turn").first).to_contain_text("tool list_files")

    runs = [w async for w in stack.temporal.list_workflows(f'WorkflowId="chat-{chat_id}"')]
    by_start = sorted(runs, key=lambda w: w.start_time)
    assert len(by_start) == 2
    hrefs = [await link.get_attribute("href") for link in await links.all()]
    assert hrefs == [
        f"{TEMPORAL_UI}/namespaces/default/workflows/chat-{chat_id}/{run.run_id}/history"
        for run in by_start
    ], "each turn links its own run"


@pytest.mark.parametrize("console_prices", [SPEND_PRICES], ids=["priced"])
async def test_a_turn_paused_on_its_budget_is_raised_from_the_page(
    console: ConsolePage, console_stack: Stack
) -> None:
    """A tool loop with a $0.01 turn budget pauses: the page names the budget, what was spent
    of its limit and what the next step needs, shows a refused raise inline, and a raise
    typed there lets the turn finish; the timeline prices each step and the turn."""
    stack = console_stack
    steps = [
        FakeResponse(
            parts=[
                FakeText(text=f"step {n}"),
                FakeToolCall(name="write_file", arguments={"path": f"f{n}.txt", "content": "x"}),
            ],
            usage=STEP_USAGE,
        )
        for n in range(4)
    ]
    done = FakeResponse(parts=[FakeText(text="All written.")], usage=STEP_USAGE)
    chat_id = await _chat_with(stack, *steps, done, title="Budgeted chat")
    page = console.page
    await console.open_chat(chat_id)
    # The composer has no budget field: the message that sets the turn's comes by the API.
    await stack.send(chat_id, "write the files", max_cost_usd=0.01)

    panel = page.get_by_role("form", name="Turn paused on a budget")
    await expect(panel).to_be_visible()
    await expect(page.get_by_role("status", name="Chat status")).to_have_text("requires action")
    paused = (await stack.http.get(f"/chats/{chat_id}")).json()
    pending = paused["pending_budget"]
    assert pending["budget"] == "turn" and pending["limit_usd"] == 0.01
    assert pending["spent_usd"] == pytest.approx(paused["cost_usd"])
    await expect(panel).to_contain_text("would go over this turn's budget")
    await expect(panel.locator(".spent")).to_have_text(
        f"${pending['spent_usd']:.4f} spent of $0.0100"
    )
    await expect(panel.locator(".next-step")).to_have_text(
        f"the next step needs at least ${pending['next_step_usd']:.4f}"
    )
    await expect(page.locator(".chat-head .cost")).to_have_text(f"${paused['cost_usd']:.4f} spent")
    priced = [m for m in await stack.messages(chat_id) if m["role"] == "assistant"]
    assert len(priced) >= 2, "the loop ran until the budget stopped it"
    await page.get_by_role("button", name="Timeline").click()
    turn = page.locator("li.turn")
    await expect(turn.locator("td .cost")).to_have_text(["$0.0030"] * len(priced))
    await expect(turn.locator(".turn-cost")).to_have_text(f"cost ${len(priced) * 0.003:.4f}")

    amount = panel.get_by_role("spinbutton", name="Raise the budget by (USD)")
    await amount.fill("2000000")  # above what the API takes: refused, shown in place
    await panel.get_by_role("button", name="Raise").click()
    await expect(panel.get_by_role("alert")).to_contain_text("400")
    assert (await stack.http.get(f"/chats/{chat_id}")).json()["status"] == "requires_action"

    await amount.fill("0.02")
    await amount.press("Enter")  # the keyboard raises it too
    await expect(panel).to_have_count(0)
    await expect(page.get_by_role("status", name="Chat status")).to_have_text("waiting")
    await expect(turn.locator("td .cost")).to_have_text(["$0.0030"] * 5)
    await expect(turn.locator(".turn-cost")).to_have_text("cost $0.0150")
    await expect(page.locator(".chat-head .cost")).to_have_text("$0.0150 spent")
    await page.get_by_role("button", name="Transcript").click()
    await expect(_assistant(page).last).to_contain_text("All written.")
    ended = (await stack.http.get(f"/chats/{chat_id}")).json()
    assert ended["pending_budget"] is None and ended["cost_usd"] == pytest.approx(0.015)


async def test_the_page_resumes_after_the_gateway_restarts_mid_answer(
    browser: Browser,
    console_stack: Stack,
    database_url: str,
    temporal_server: TemporalDevServer,
    tmp_path: Path,
    request: pytest.FixtureRequest,
) -> None:
    """The console is served by a `chatd api` process, killed mid-answer and started again
    on the same port: the page shows it reconnecting, then resumes with Last-Event-ID; every
    text it ever shows is a prefix of the answer (nothing doubled), and ends as all of it."""
    stack = console_stack
    chat_id = await _chat_with(
        stack, FakeResponse(parts=[FakeText(text=LONG_TEXT, chunk_size=4)], delta_delay_s=0.1)
    )
    port = free_port()
    start: Callable[[str], Any] = lambda log: chatd_api(  # noqa: E731
        database_url, temporal_server, port, tmp_path / log, stack.task_queue
    )
    gateway = start("api-1.log")
    try:
        await until_ready(f"http://127.0.0.1:{port}", gateway, tmp_path / "api-1.log")
        url = f"http://127.0.0.1:{port}/console/"
        async with console_page(browser, url, request.node.name) as console:
            page = console.page
            await console.sign_in(stack.key)
            await console.open_chat(chat_id)
            await page.evaluate(_WATCH_PREFIXES, LONG_TEXT)
            await page.get_by_role("textbox", name="Message", exact=True).fill("go on")
            await page.get_by_role("button", name="Send").click()
            await _streaming_prefix(page, LONG_TEXT)

            await asyncio.to_thread(gateway.send_signal, signal.SIGKILL)
            await asyncio.to_thread(gateway.wait)
            await expect(page.locator("header .connection")).to_have_text("reconnecting…")
            gateway = start("api-2.log")
            await until_ready(f"http://127.0.0.1:{port}", gateway, tmp_path / "api-2.log")

            await expect(page.locator("header .connection")).to_have_text("live", timeout=60_000)
            body = _assistant(page).locator(".message-body")
            await expect(body).to_have_text(LONG_TEXT, timeout=60_000)
            await expect(page.locator("li.message.streaming")).to_have_count(0)
            assert await page.evaluate("() => window.__notPrefix") == []
            assert await page.evaluate("() => window.__longestSeen") > 0
            assert console.dialogs == [] and console.errors == []
    finally:
        if gateway.poll() is None:
            gateway.send_signal(signal.SIGTERM)
        await asyncio.to_thread(gateway.wait)
    messages = await stack.messages(chat_id)
    assert _text_of(messages[-1]) == LONG_TEXT


_WATCH_PREFIXES = """full => {
    window.__notPrefix = [];
    window.__longestSeen = 0;
    const check = () => {
        for (const el of document.querySelectorAll("li.message.role-assistant .message-body")) {
            const text = el.textContent;
            if (!full.startsWith(text)) window.__notPrefix.push(text);
            window.__longestSeen = Math.max(window.__longestSeen, text.length);
        }
    };
    new MutationObserver(check).observe(
        document.body, {childList: true, subtree: true, characterData: true}
    );
}"""

HOSTILE = "\n\n".join(
    [
        'Look: <img src="x" onerror="window.__pwned = 1; alert(1)">',
        "<script>window.__pwned = 2; alert(2)</script>",
        "[click me](javascript:window.__pwned=3;alert(3))",
        '<a href="javascript:alert(4)" id="raw-link">raw link</a>',
        "[data](data:text/html;base64,PHNjcmlwdD5hbGVydCg1KTwvc2NyaXB0Pg==)",
        "**<svg onload=alert(6)>**",
        "`<iframe src=javascript:alert(7)>`",
    ]
)


async def test_a_refresh_that_fails_mid_turn_does_not_throw(
    console: ConsolePage, console_stack: Stack
) -> None:
    """Status events make the page re-read the chat; while that read fails (as it does when
    the gateway dies between an event and the read), the turn still shows to its end and
    the page throws nothing (the fixture checks `pageerror`)."""
    stack = console_stack
    chat_id = await _chat_with(stack, FakeResponse(parts=[FakeText(text="still shown")]))
    page = console.page
    await console.open_chat(chat_id)
    failed: list[str] = []

    async def refuse(route: Any) -> None:
        failed.append(route.request.url)
        await route.abort("connectionrefused")

    await page.route(f"**/chats/{chat_id}", refuse)
    await page.get_by_role("textbox", name="Message", exact=True).fill("go")
    await page.get_by_role("button", name="Send").click()
    await expect(_assistant(page).last).to_contain_text("still shown")
    await expect(page.get_by_role("status", name="Chat status")).to_have_text("waiting")
    assert failed, "the page re-read the chat while the turn ran"
    await page.unroute(f"**/chats/{chat_id}")


async def test_hostile_model_output_stays_inert(console: ConsolePage, console_stack: Stack) -> None:
    stack = console_stack
    huge_line = "A" * 300_000
    megabyte = "\n".join(["0123456789abcdef" * 64] * 1000)  # 1,024,999 characters
    chat_id = await _chat_with(
        stack,
        FakeResponse(parts=[FakeText(text=HOSTILE, chunk_size=7)]),
        FakeResponse(parts=[FakeText(text=huge_line, chunk_size=50_000)]),
        FakeResponse(parts=[FakeText(text=megabyte, chunk_size=100_000)]),
        title="<img src=x onerror=alert(8)>",
    )
    async with httpx.AsyncClient() as http:
        for path in ("", "static/main.js", "config.json"):
            answer = await http.get(console.url + path)
            assert answer.status_code == 200, path
            csp = answer.headers["content-security-policy"]
            assert "default-src 'none'" in csp and "script-src 'self'" in csp, path
            assert "frame-ancestors 'none'" in csp and "'unsafe-inline'" not in csp, path
            assert answer.headers["x-content-type-options"] == "nosniff", path
    page = console.page
    await console.open_chat(chat_id)
    message = page.get_by_role("textbox", name="Message", exact=True)
    for answers, text in enumerate(("hostile", "a long line", "a megabyte"), start=1):
        await message.fill(text)
        await page.get_by_role("button", name="Send").click()
        await expect(_assistant(page)).to_have_count(answers)

    transcript = page.locator("ol.transcript")
    await expect(transcript).to_contain_text("<script>window.__pwned = 2; alert(2)</script>")
    await expect(transcript).to_contain_text("[click me](javascript:window.__pwned=3;alert(3))")
    hrefs = await transcript.locator("a").evaluate_all("els => els.map(a => a.href)")
    assert all(h.startswith(("http://", "https://")) for h in hrefs), hrefs
    for tag in ("img", "script", "iframe", "svg"):
        assert await page.locator(f"#app {tag}").count() == 0, tag
    assert await page.locator("#raw-link").count() == 0
    await transcript.get_by_text("raw link", exact=False).first.click()
    lengths = await _assistant(page).evaluate_all(
        "els => els.map(e => e.querySelector('.message-body').textContent.length)"
    )
    assert lengths[1:] == [len(huge_line), len(megabyte)]
    assert await page.evaluate("() => window.__pwned") is None
    # Still responsive: it takes typing and a new message after a megabyte of output.
    await message.fill("still here")
    await expect(message).to_have_value("still here")
    assert await page.evaluate("() => 1 + 1") == 2
    await page.get_by_role("button", name="Timeline").click()
    await expect(page.locator("li.turn")).to_have_count(3)
    await expect(page.get_by_role("navigation", name="Chats")).to_contain_text(
        "<img src=x onerror=alert(8)>"
    )


async def test_a_poison_message_is_fixed_in_place_by_editing_it(
    console: ConsolePage, console_stack: Stack
) -> None:
    """A message the provider always refuses ends its turn in an error; editing that message
    in the transcript reruns the turn from it, and the answer replaces the error."""
    stack = console_stack

    def respond(request: FakeRequest) -> FakeResponse:
        if "poison" in str(request.body.get("messages", [])[-1]):
            refused = FakeError(status=400, type="invalid_request_error", message="refused: poison")
            return FakeResponse(error=refused)
        return FakeResponse(parts=[FakeText(text="a clean answer")])

    name = model_name()
    stack.fake.script(name, respond)
    created = await stack.create_chat(model={"provider": "anthropic", "name": name})
    chat_id = str(created["id"])
    page = console.page
    await console.open_chat(chat_id)
    await page.get_by_role("textbox", name="Message", exact=True).fill("a poison pill")
    await page.get_by_role("button", name="Send").click()
    await expect(page.get_by_role("status", name="Chat status")).to_have_text("error")
    await expect(page.locator(".error-box")).to_contain_text("refused: poison")
    await page.get_by_role("button", name="Edit").click()
    await page.get_by_role("textbox", name="Edit message").fill("a clean question")
    await page.get_by_role("button", name="Save and rerun").click()
    await expect(_assistant(page).last).to_contain_text("a clean answer")
    await expect(page.get_by_role("status", name="Chat status")).to_have_text("waiting")
    await expect(page.locator("ol.transcript")).not_to_contain_text("poison")
    texts = [(m["role"], _text_of(m)) for m in await stack.messages(chat_id)]
    assert texts == [("user", "a clean question"), ("assistant", "a clean answer")]


@pytest.mark.parametrize(("width", "height"), [(1280, 720), (1280, 727), (1024, 640), (390, 844)])
async def test_the_layout_holds_at_laptop_and_phone_sizes(
    console: ConsolePage, console_stack: Stack, width: int, height: int
) -> None:
    """A long transcript, scrolled to its top: the composer stays in the window with no
    strip of transcript below it, and the chat list, the chat's header, the transcript and
    the composer don't overlap."""
    stack = console_stack
    words = " ".join(f"word{i}" for i in range(900))
    chat_id = await _chat_with(stack, FakeResponse(parts=[FakeText(text=words)]))
    await stack.send(chat_id, "write at length")
    await stack.wait_status(chat_id, "waiting", within_s=60)
    page = console.page
    await page.set_viewport_size({"width": width, "height": height})
    await console.open_chat(chat_id)
    await expect(_assistant(page).last).to_contain_text("word899")
    await page.locator(".view").evaluate("view => view.scrollTo(0, 0)")
    composer = page.get_by_role("textbox", name="Message", exact=True)
    await expect(composer).to_be_in_viewport()
    boxes = await page.evaluate(
        """() => Object.fromEntries(
            ["aside.side", ".view", ".chat-head", ".composer", "ol.transcript"].map(
                s => [s, document.querySelector(s).getBoundingClientRect().toJSON()]))"""
    )
    side, view, head, bottom = (
        boxes[k] for k in ("aside.side", ".view", ".chat-head", ".composer")
    )
    assert view["bottom"] <= height + 0.5, "the view ends inside the window"
    assert abs(bottom["bottom"] - view["bottom"]) <= 1, "no transcript below the composer"
    assert head["bottom"] <= bottom["top"], "the chat's header and the composer overlap"
    beside = side["right"] <= view["left"] + 0.5
    above = side["bottom"] <= view["top"] + 0.5
    assert beside or above, f"the chat list overlaps the chat: {side} {view}"
    assert boxes["ol.transcript"]["height"] > view["height"], "the transcript scrolls"
