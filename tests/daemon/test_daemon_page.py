"""The daemon's live page in headless Chromium (Debian's chromium + chromium-driver, installed
by the test set-up): a rendered frame and the pipelines' latest results appear."""

from __future__ import annotations

import shutil

import pytest
from daemon_proc import DaemonProcess

webdriver = pytest.importorskip("selenium.webdriver", reason="selenium (the dev extra) is needed")

CHROMEDRIVER = shutil.which("chromedriver")
CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(
        not (CHROMEDRIVER and CHROMIUM),
        reason="headless Chromium needs Debian's chromium and chromium-driver "
        "(make test installs them)",
    ),
]


def test_page_renders_frame_and_results(tmp_path):
    from selenium.webdriver.chrome.service import Service
    from selenium.webdriver.support.ui import WebDriverWait

    from edgekit.lens.bench import bench_bundles

    cnn = bench_bundles((("photo-cnn", "onnx-int8"),))["photo-cnn onnx-int8"].path
    proc = DaemonProcess(
        tmp_path / "state", "--bundle", f"photo-cnn={cnn}", "--pipeline", "lens,classify"
    ).start()
    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for arg in ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage"):
        options.add_argument(arg)
    driver = webdriver.Chrome(service=Service(CHROMEDRIVER), options=options)
    try:
        driver.get(proc.url + "/")
        wait = WebDriverWait(driver, 60)
        # The page swaps in a new frame and re-renders its result blocks on every poll, so a
        # second read can see a frame still loading or a stale element: each check reads what
        # it needs in the one script call that waits for it.
        width = wait.until(
            lambda d: d.execute_script(
                "const i = document.getElementById('frame');"
                "return i.complete && i.naturalWidth > 0 && Number(i.dataset.loaded || 0) >= 2"
                " ? i.naturalWidth : 0;"
            )
        )
        assert width >= 384
        read_texts = (
            "return Array.from(document.querySelectorAll('pre.pipeline'), e => e.textContent);"
        )
        wait.until(
            lambda d: len(t := d.execute_script(read_texts)) == 2 and any("label" in x for x in t)
        )
        texts = driver.execute_script(read_texts)
        assert any(t.startswith("lens") and "VisiT" not in t and "setting" in t for t in texts)
        status = driver.execute_script("return document.getElementById('status').textContent")
        assert status.startswith(("ok", "degraded"))
        driver.save_screenshot(str(tmp_path / "page.png"))
        assert (tmp_path / "page.png").stat().st_size > 5000
    finally:
        driver.quit()
        proc.stop()
