"""What an interrupted call asked, on the console's execution page, in a real browser.

Run by tests/it/recovery/kept_arguments.rs against a running gateway with an interrupted
execution. Logs in with the operator key, opens the execution's page and checks that the section
"What the call asked" holds exactly the arguments given as --expect (JSON), redactions included,
and that none of the --absent texts (a redacted card number, a header secret) is anywhere on the
page; with --search, that the listing's "Arguments contain" field finds the execution by that
JSON value and finds nothing for another. Saves screenshots into --shots. Exits non-zero on the first failed check.
"""

import argparse
import json
import os
import urllib.parse

from selenium.webdriver.common.by import By

from browser import browser, check, log_in, shot, submit


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--base", required=True)
    parser.add_argument("--operator-key", required=True)
    parser.add_argument("--execution", required=True)
    parser.add_argument("--expect", required=True, help="the kept arguments, as JSON")
    parser.add_argument("--absent", action="append", default=[])
    parser.add_argument("--search", help="a value the listing's arguments field finds it by")
    parser.add_argument("--shots", required=True)
    args = parser.parse_args()
    os.makedirs(args.shots, exist_ok=True)
    driver = browser()
    try:
        log_in(driver, args.base, args.operator_key)
        check("/console/executions" in driver.current_url, "the operator key logs in")
        driver.get(args.base + "/console/executions/" + args.execution)
        shown = driver.find_element(By.ID, "arguments-json").text
        check(json.loads(shown) == json.loads(args.expect),
              f"the page shows what the call asked: {shown}")
        page = driver.find_element(By.TAG_NAME, "body").text
        for text in args.absent:
            check(text not in page, f"{text!r} is nowhere on the page")
        shot(driver, args.shots, "08-execution-arguments")
        if args.search:
            driver.get(args.base + "/console/executions?state=all")
            field = driver.find_element(By.ID, "arguments")
            field.send_keys(args.search)
            submit(driver, driver.find_element(By.CSS_SELECTOR, "form.filters button"))
            table = driver.find_element(By.ID, "executions").text
            check(args.execution in table, f"the arguments field finds it: {table}")
            driver.get(args.base + "/console/executions?state=all&arguments="
                       + urllib.parse.quote('{"customer": "nobody"}'))
            check(driver.find_element(By.ID, "empty").text == "No execution matches.",
                  "a value no call asked finds nothing")
            shot(driver, args.shots, "09-executions-by-arguments")
        print("arguments checks passed")
    finally:
        driver.quit()


if __name__ == "__main__":
    main()
