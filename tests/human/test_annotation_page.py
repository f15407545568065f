"""The annotation page in a real headless Chromium (Debian's chromium + chromium-driver, driven by Selenium):
keyboard annotation, reload and resume, model text shown as text, and the file holding exactly the answers."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

from grueflow.human import batch as hb
from grueflow.human.answers import read_answer_lines

webdriver = pytest.importorskip("selenium.webdriver", reason="selenium is in the test extra: pip install -e '.[test]'")
from selenium.webdriver.chrome.service import Service  # noqa: E402
from selenium.webdriver.common.keys import Keys  # noqa: E402
from selenium.webdriver.support.ui import WebDriverWait  # noqa: E402

CHROMEDRIVER = Path("/usr/bin/chromedriver")
CHROMIUM = shutil.which("chromium")


@pytest.fixture
def browser():
    if not CHROMEDRIVER.exists() or CHROMIUM is None:
        missing = "Debian's chromium and chromium-driver are not installed (make test installs them with apt-get)"
        if os.environ.get("CI") == "true":
            pytest.fail(missing)  # CI must run the browser test, not skip it
        pytest.skip(missing)
    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for flag in ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage", "--no-first-run"):
        options.add_argument(flag)
    # an explicit Service path: Selenium Manager never tries the network
    driver = webdriver.Chrome(service=Service(str(CHROMEDRIVER)), options=options)
    driver.set_page_load_timeout(30)
    yield driver
    driver.quit()


def current_item(driver) -> str:
    return driver.find_element("id", "item-id").text


def wait_for_item(driver, item_id: str) -> None:
    WebDriverWait(driver, 10).until(lambda d: d.find_element("id", "item-id").text == item_id)


def test_keyboard_annotation_reload_resume_and_escaping(browser, likert_dir: Path, serve, tmp_path: Path,
                                                        hostile) -> None:
    batch = hb.read_batch(likert_dir)
    ids = [i["item_id"] for i in batch.items]
    server = serve(likert_dir, "alice")
    browser.get(server.url)
    wait_for_item(browser, ids[0])
    assert browser.find_element("id", "annotator").text == "alice"
    given = [(4, 2), (1, 5), (3, 3)]
    for position, (coherence, sentiment) in enumerate(given):
        item = batch.item(ids[position])
        # the hostile completion is shown as its literal text; no element was made from it, no script ran
        assert browser.find_element("id", "completion").text == item["machine_completion"]
        assert browser.find_element("id", "prompt").text == item["prompt"]
        assert browser.find_elements("css selector", "#completion *") == []
        assert browser.execute_script("return typeof window.pwned") == "undefined"
        assert browser.find_element("id", "progress").text == f"{position} / {len(ids)} answered"
        body = browser.find_element("tag name", "body")
        body.send_keys(str(coherence))
        body.send_keys(str(sentiment))
        body.send_keys(Keys.ENTER)
        wait_for_item(browser, ids[position + 1])
    browser.refresh()
    wait_for_item(browser, ids[3])  # resumes at item 4
    assert browser.find_element("id", "progress").text == f"3 / {len(ids)} answered"
    assert browser.find_element("id", "completion").text == hostile(int(batch.item(ids[3])["sample_id"][1:]))
    assert browser.execute_script("return typeof window.pwned") == "undefined"
    # Enter with a criterion unscored saves nothing and says why
    body = browser.find_element("tag name", "body")
    body.send_keys("5")
    body.send_keys(Keys.ENTER)
    WebDriverWait(browser, 10).until(lambda d: "score every criterion first: sentiment" in d.find_element("id", "error").text)
    assert current_item(browser) == ids[3]
    records = read_answer_lines(tmp_path / "answers.jsonl")
    assert [(r["annotator"], r["item_id"], r["answer"]) for r in records] == [
        ("alice", ids[i], {"coherence": c, "sentiment": s}) for i, (c, s) in enumerate(given)]


def test_pairwise_keys_pick_a_b_and_tie(browser, tmp_path: Path, serve, hostile) -> None:
    rows = {m: [hb.Prediction(f"s{i}", f"concepts {i}", f"{m} says {hostile(i)}") for i in range(4)]
            for m in ("ppo", "nlpo")}
    batch, key = hb.pairwise_batch(("ppo", rows["ppo"]), ("nlpo", rows["nlpo"]), "commongen", seed=0)
    hb.write_batch(batch, tmp_path / "pw", key, tmp_path / "key.json")
    server = serve(tmp_path / "pw", "bob", tmp_path / "pw_answers.jsonl")
    browser.get(server.url)
    ids = [i["item_id"] for i in batch.items]
    for position, pressed in enumerate(["a", Keys.ARROW_RIGHT, "t"]):
        wait_for_item(browser, ids[position])
        assert browser.find_element("id", "choice-a").text == batch.items[position]["choice_A"]
        browser.find_element("tag name", "body").send_keys(pressed)
    wait_for_item(browser, ids[3])
    assert browser.execute_script("return typeof window.pwned") == "undefined"
    records = read_answer_lines(tmp_path / "pw_answers.jsonl")
    assert [(r["item_id"], r["answer"]) for r in records] == [
        (ids[0], {"choice": "A"}), (ids[1], {"choice": "B"}), (ids[2], {"choice": "tie"})]


def test_platform_template_filled_as_mturk_does_shows_model_text_as_text(browser, likert_dir: Path, tmp_path: Path) -> None:
    """MTurk puts each CSV value into its ${column} as it is: the escaped upload CSV keeps the markup inert."""
    import csv

    template = (likert_dir / hb.TEMPLATE).read_text(encoding="utf-8")
    with open(likert_dir / hb.UPLOAD, newline="", encoding="utf-8") as handle:
        row = next(csv.DictReader(handle))
    for column, value in row.items():
        template = template.replace("${" + column + "}", value)
    assert "${" not in template
    page = tmp_path / "hit.html"
    page.write_text(f"<!doctype html><html><head><meta charset='utf-8'></head><body>{template}</body></html>",
                    encoding="utf-8")
    browser.get(page.as_uri())
    item = hb.read_batch(likert_dir).items[0]
    texts = [e.text for e in browser.find_elements("css selector", ".gf .text")]
    assert texts == [item["prompt"], item["machine_completion"]]
    assert browser.execute_script("return typeof window.pwned") == "undefined"
    radios = browser.find_elements("css selector", "input[type=radio]")
    assert sorted({r.get_attribute("name") for r in radios}) == ["coherence", "sentiment"] and len(radios) == 10
