"""The operator console in a real browser (headless Chromium from Debian, driven by Selenium).

Run by tests/it/front/console.rs against a running gateway with an interrupted execution. It logs in
with no key, an agent's key and the operator key; finds the execution among the interrupted
ones; checks that a forged form post (no CSRF token, or a wrong one) is refused and changes
nothing, as does a form over the body limit (413); resolves the execution with a note through
the form; and checks the audit row on the page. Saves a screenshot of each page into --shots.
Exits non-zero on the first failed check.
"""

import argparse
import json
import os
import sys
import urllib.error
import urllib.parse
import urllib.request

from selenium import webdriver
from selenium.webdriver.chrome.service import Service
from selenium.webdriver.common.by import By
from selenium.webdriver.support import expected_conditions
from selenium.webdriver.support.ui import Select, WebDriverWait

# Seconds any page load, element or navigation may take: CI runs this beside the other tests on
# two cores, so the browser is slow at times; a check still fails once this has passed.
DEADLINE = 60


def check(condition, message):
    if not condition:
        print(f"FAILED: {message}", file=sys.stderr)
        sys.exit(1)
    print(f"ok: {message}")


def browser():
    options = webdriver.ChromeOptions()
    options.binary_location = os.environ.get("CARMY_CHROMIUM", "/usr/bin/chromium")
    for argument in ("--headless=new", "--no-sandbox", "--disable-gpu",
                     "--disable-dev-shm-usage", "--window-size=1280,1000"):
        options.add_argument(argument)
    service = Service(executable_path=os.environ.get("CARMY_CHROMEDRIVER", "/usr/bin/chromedriver"))
    driver = webdriver.Chrome(service=service, options=options)
    driver.set_page_load_timeout(DEADLINE)
    # find_element waits for an element that is not there yet, up to the deadline.
    driver.implicitly_wait(DEADLINE)
    return driver


def submit(driver, button):
    """Clicks a form's button and waits until the next page has loaded.

    A click only starts the form's navigation: reading the URL or the page right after it can
    still see the old page. The old page's root element goes stale once the browser has left it.
    """
    page = driver.find_element(By.TAG_NAME, "html")
    button.click()
    WebDriverWait(driver, DEADLINE).until(expected_conditions.staleness_of(page))
    WebDriverWait(driver, DEADLINE).until(
        lambda d: d.execute_script("return document.readyState") == "complete")


def shot(driver, shots, name):
    # The whole page, not only the window: resize to the document's height first.
    height = driver.execute_script("return document.documentElement.scrollHeight")
    width = driver.get_window_size()["width"]
    driver.set_window_size(width, max(600, min(int(height) + 120, 6000)))
    path = os.path.join(shots, f"{name}.png")
    driver.save_screenshot(path)
    print(f"screenshot: {path}")


def log_in(driver, base, key):
    driver.get(base + "/console/login")
    field = driver.find_element(By.NAME, "key")
    field.clear()
    field.send_keys(key)
    submit(driver, driver.find_element(By.CSS_SELECTOR, "form[action='/console/login'] button"))


def forged_post(base, path, cookie, fields):
    """POSTs a form as a forger would: the session cookie, without this session's token."""
    body = urllib.parse.urlencode(fields).encode()
    request = urllib.request.Request(base + path, data=body, method="POST")
    request.add_header("Content-Type", "application/x-www-form-urlencoded")
    request.add_header("Cookie", f"carmy_console={cookie}")

    class NoRedirect(urllib.request.HTTPRedirectHandler):
        def redirect_request(self, *args, **kwargs):
            return None

    opener = urllib.request.build_opener(NoRedirect)
    try:
        with opener.open(request, timeout=DEADLINE) as response:
            return response.status, dict(response.headers)
    except urllib.error.HTTPError as error:
        return error.code, dict(error.headers)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--base", required=True)
    parser.add_argument("--operator-key", required=True)
    parser.add_argument("--agent-key", required=True)
    parser.add_argument("--execution", required=True)
    parser.add_argument("--request-id", required=True)
    parser.add_argument("--shots", required=True)
    parser.add_argument("--max-body-bytes", type=int, required=True)
    args = parser.parse_args()
    os.makedirs(args.shots, exist_ok=True)
    base = args.base.rstrip("/")
    execution_path = "/console/executions/" + args.execution
    driver = browser()
    try:
        # No key: every page sends the browser to the login form.
        driver.get(base + execution_path)
        check(driver.current_url == base + "/console/login",
              f"no session: {execution_path} redirects to the login form ({driver.current_url})")
        shot(driver, args.shots, "01-login")

        # An agent's API key is refused, and gives no session.
        log_in(driver, base, args.agent_key)
        check("agent's API key" in driver.find_element(By.CSS_SELECTOR, ".problem").text,
              "an agent's API key is refused at login")
        shot(driver, args.shots, "02-agent-key-refused")
        driver.get(base + "/console/executions")
        check(driver.current_url == base + "/console/login",
              "after the agent's key, the executions still redirect to the login form")

        # A login without the login form's CSRF token is refused.
        status, _ = forged_post(base, "/console/login", "", {"key": args.operator_key})
        check(status == 403, f"a login post without the form's token is 403 (got {status})")

        # The operator logs in and finds the execution among the interrupted ones.
        log_in(driver, base, args.operator_key)
        check(driver.current_url.startswith(base + "/console/executions"),
              f"the operator key logs in ({driver.current_url})")
        link = driver.find_element(By.CSS_SELECTOR, f"a[href='{execution_path}']")
        row = link.find_element(By.XPATH, "./ancestor::tr")
        check("interrupted" in row.text, "the execution is listed as interrupted")
        check(row.find_element(By.CSS_SELECTOR, ".request-id").text == args.request_id,
              "its request id is shown as text, HTML escaped")
        shot(driver, args.shots, "03-executions-interrupted")
        submit(driver, link)
        check(driver.find_element(By.ID, "state").text == "interrupted",
              "the execution's page says interrupted")
        for section in ("record", "fingerprint", "owner", "upstream", "evidence", "audit", "late"):
            driver.find_element(By.ID, section)
        check(driver.find_element(By.ID, "upstream-key").text == args.execution,
              "the upstream key is the execution id")
        check("Lease until" in driver.find_element(By.ID, "owner").text,
              "the owner and its lease are shown")
        shot(driver, args.shots, "04-execution-interrupted")

        # Forged posts: the session's cookie without its CSRF token, or with a wrong one.
        cookie = driver.get_cookie("carmy_console")
        check(cookie is not None and cookie.get("httpOnly") and cookie.get("sameSite") == "Strict",
              "the session cookie is HttpOnly and SameSite=Strict")
        check(len(cookie["value"]) == 64 and args.operator_key not in cookie["value"],
              "the cookie holds a session id, not the key")
        for fields in ({"note": "forged"}, {"note": "forged", "csrf": "0" * 64}):
            status, _ = forged_post(base, execution_path + "/release", cookie["value"], fields)
            check(status == 403, f"a forged release {sorted(fields)} is 403 (got {status})")
        status, _ = forged_post(base, execution_path + "/resolve", cookie["value"],
                                {"status": "completed", "data": "{}", "note": "forged"})
        check(status == 403, f"a forged resolve is 403 (got {status})")
        # A release with this session's token, over the body limit: 413, not a forged form.
        token = driver.find_element(
            By.CSS_SELECTOR, "form#release input[name='csrf']").get_attribute("value")
        status, _ = forged_post(base, execution_path + "/release", cookie["value"],
                                {"csrf": token, "force": "on", "note": "x" * (args.max_body_bytes + 1)})
        check(status == 413, f"a release over the body limit is 413 (got {status})")
        driver.refresh()
        check(driver.find_element(By.ID, "state").text == "interrupted",
              "the forged and oversized posts changed nothing")
        headers = forged_post(base, "/console/login", "", {})[1]
        csp = {name.lower(): value for name, value in headers.items()}.get("content-security-policy", "")
        check("default-src 'none'" in csp and "script-src" not in csp,
              f"a strict Content-Security-Policy is sent ({csp})")

        # Resolve it through the form, with a note.
        note = "order 17 exists upstream; created by this call (browser test)"
        Select(driver.find_element(By.ID, "status")).select_by_value("completed")
        driver.find_element(By.ID, "data").send_keys('{"order_id": 17, "via": "console"}')
        driver.find_element(By.ID, "resolve_note").send_keys(note)
        submit(driver, driver.find_element(By.CSS_SELECTOR, "form#resolve button"))
        check(driver.current_url == base + execution_path + "?done=resolved",
              f"the resolve form redirects back to the execution ({driver.current_url})")
        check(driver.find_element(By.ID, "state").text == "completed",
              "the execution reads completed")
        rows = driver.find_elements(By.CSS_SELECTOR, "#audit-rows tbody tr")
        check(len(rows) == 1, f"one audit row ({len(rows)})")
        row = rows[0]
        check(row.find_element(By.CSS_SELECTOR, ".action").text == "resolve"
              and row.find_element(By.CSS_SELECTOR, ".actor").text == "operator:ops"
              and row.find_element(By.CSS_SELECTOR, ".note").text == note,
              "the audit row names resolve, operator:ops and the note")
        recorded = json.loads(driver.find_element(By.ID, "record-json").text)
        check(recorded["data"] == {"order_id": 17, "via": "console"}
              and recorded["resolution"]["by"] == "operator:ops",
              "the record replays the resolved data with its resolution")
        shot(driver, args.shots, "05-execution-resolved")

        # The other tabs, and the page on a phone's width.
        driver.get(base + "/console/executions?state=all")
        check(driver.find_element(By.CSS_SELECTOR, f"a[href='{execution_path}']") is not None,
              "the execution is listed under all")
        shot(driver, args.shots, "06-executions-all")
        driver.set_window_size(390, 844)
        driver.get(base + execution_path)
        shot(driver, args.shots, "07-execution-phone")
    finally:
        driver.quit()
    print("browser checks passed")


if __name__ == "__main__":
    main()
