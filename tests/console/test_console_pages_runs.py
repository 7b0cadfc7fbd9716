"""The console's pages of background runs in real Chromium against the served app (the console of
tests/console/test_console_pages.py, on the local and docker backends): an evaluation run started and its
attempts and scores shown; a batch run started, its prompts' statuses and sessions shown as they end."""

from __future__ import annotations

import re

from conftest import get_backend
from console_browser import Console, backend_of, shot
from evals_kit import suite_in_home
from playwright.sync_api import Page, expect


def test_an_evaluation_run_is_started_and_its_attempts_and_scores_shown(console: Console, page: Page) -> None:
    get_backend("docker")  # evaluation runs are on docker whatever the profile's backend
    suite_in_home(console.agent().settings.home)  # evals/suites/mine: a task that passes, one that fails
    page.get_by_role("link", name="Evaluations").click()
    page.get_by_label("Suite").fill("nowhere")
    page.get_by_role("button", name="Start run").click()
    expect(page.get_by_role("alert")).to_contain_text("no suite nowhere")
    page.get_by_label("Suite").fill("mine")
    page.get_by_label("Agent").select_option("oracle")
    page.get_by_role("button", name="Start run").click()
    expect(page).to_have_url(re.compile(r"#/evals/[a-f0-9]{12}$"))
    run_id = page.url.rsplit("/", 1)[1]
    attempts = page.get_by_role("table", name="Attempts")
    expect(attempts.locator("tbody tr")).to_have_count(2)
    expect(attempts.get_by_role("row", name="passes")).to_contain_text("passed reward 1.00")
    expect(attempts.get_by_role("row", name="fails")).to_contain_text("failed reward 0.00")
    expect(page.get_by_label("Overall scores")).to_contain_text("pass@150%")  # read once the run ended
    tasks = page.get_by_role("table", name="Tasks")
    expect(tasks.get_by_role("row", name="passes")).to_contain_text("1 of 1")
    shot(page, console, f"eval-run-{backend_of(console)}")
    page.get_by_role("link", name="All runs").click()
    row = page.get_by_role("table", name="Evaluation runs").get_by_role("row", name=run_id)
    expect(row).to_contain_text("finished")
    expect(row).to_contain_text("2 of 2")
    shot(page, console, f"evals-{backend_of(console)}")


def test_a_batch_run_is_started_and_each_prompt_shown_as_it_ends(console: Console, page: Page) -> None:
    page.get_by_role("link", name="Batches").click()
    page.get_by_role("button", name="Start batch").click()  # no prompts
    expect(page.get_by_role("alert")).to_contain_text("at least 1 item")
    console.llm.load([{"text": "<b>first</b> answer"}, {"text": "second answer"}])
    page.get_by_label("Prompts", exact=True).fill("first question\n\nsecond question\n")
    page.get_by_label("Workers").fill("1")  # one at a time: the answers come in the prompts' order
    page.get_by_role("button", name="Start batch").click()
    expect(page).to_have_url(re.compile(r"#/batches/[a-f0-9]{12}$"))
    run_id = page.url.rsplit("/", 1)[1]
    prompts = page.get_by_role("table", name="Prompts")
    expect(prompts.locator("tbody tr")).to_have_count(2)
    first, second = prompts.get_by_role("row", name="line-1"), prompts.get_by_role("row", name="line-2")
    expect(first).to_contain_text("first question")
    expect(first).to_contain_text("completed<b>first</b> answer")  # markup from the model stays text
    expect(second).to_contain_text("completedsecond answer")
    expect(page.get_by_label("Prompts done")).to_have_attribute("value", "2")
    expect(page.get_by_label("Results", exact=True)).to_contain_text("completed 2")  # read once the run ended
    shot(page, console, f"batch-run-{backend_of(console)}")
    first.get_by_role("link", name="session").click()
    expect(page).to_have_url(re.compile(r"#/sessions/[^/]+$"))
    expect(page.get_by_text("first question")).to_be_visible()
    page.get_by_role("link", name="Batches").click()
    row = page.get_by_role("table", name="Batch runs").get_by_role("row", name=run_id)
    expect(row).to_contain_text("finished")
    expect(row).to_contain_text("2 of 2")
    shot(page, console, f"batches-{backend_of(console)}")
