"""The master's web dashboard (issue 17 §1, docs/dashboard.rst) in a real
headless Chromium (Debian's ``chromium`` and ``chromium-driver``, driven
through WebDriver by selenium) against a real authenticated cluster whose
master guards reads too (``--http-auth all``): the page asks for the token,
then shows the real agents, frameworks and tasks, links to the tasks'
sandbox files on their agents, refreshes itself, and the browser's console
stays clean. The HTTP routes serve the shipped files with their content
types and nothing else.

``MESOSLIKE_DASHBOARD_SCREENSHOT=PATH`` also saves the rendered page there
(docs/img/dashboard.png is made so: docs/dashboard.rst)."""

from __future__ import annotations

import http.client
import json
import os
import shutil
import subprocess
import sys
import threading
import urllib.error
import urllib.request
from pathlib import Path

import pytest

import test_fuxi_service as service_tests
from agent_helpers import start_agent
from e2e_helpers import FAST_MASTER_ARGS, REPO, Cluster, RecordingScheduler, child_env, free_port
from environment import unavailable
from mesoslike import Filters, Resources, TaskInfo, TaskState
from mesoslike.master.http import DASHBOARD_DIR, dashboard_files
from waiting import wait_until

try:
    from selenium.webdriver.common.by import By
except ImportError:   # the browser fixture says so
    pass

pytestmark = [pytest.mark.timeout(180), pytest.mark.skipif(not sys.platform.startswith("linux"), reason="/proc")]

ROLES_FILE = """\
[preemption]
enabled = true
wait_before_kill = 30.0

[roles.analytics]
weight = 2.0
guarantee = "cpus:1;mem:256"

[roles.batch]
weight = 1.0
"""


# ------------------------------------------------------------------ cluster
class GuardedCluster(Cluster):
    """The suite's authenticated cluster, its master started with
    ``--http-auth all``: every read of /state needs the operator token."""

    def get(self, path: str, token: bool = True) -> tuple[int, dict[str, str], bytes]:
        """(status, headers, body) of a GET on the master's HTTP, with the token or without."""
        request = urllib.request.Request(self.http + path,
                                         headers={"Authorization": f"Bearer {self.token}"} if token else {})
        try:
            with urllib.request.urlopen(request, timeout=5) as response:
                return response.status, dict(response.headers), response.read()
        except urllib.error.HTTPError as exc:
            return exc.code, dict(exc.headers), exc.read()

    def state(self) -> dict:
        status, _, body = self.get("/state")
        if status != 200:
            raise ValueError(f"GET /state answered {status}: {body[:200]!r}")
        return json.loads(body)

    def start_guarded_master(self, roles: Path) -> None:
        self.port, self.http_port = free_port(), free_port()
        self.master = self._start("master", [
            "master", "--ip", "127.0.0.1", "--port", str(self.port), "--http-port", str(self.http_port),
            *FAST_MASTER_ARGS, *self.security_args(), "--http-auth", "all", "--roles", str(roles),
            # a loaded machine (the browser, the suite) may hold an agent's pongs past 3 x 0.5 s: the tasks
            # this module's tests look at must not be lost to that
            "--max-agent-ping-timeouts", "20"])
        self.wait_until(lambda: self.state(), 30, "the master to serve /state")


class TaskQueue(RecordingScheduler):
    """Launches the tasks it is given (id -> command) on the next offer that
    has room for them; declines offers for a moment otherwise."""

    def __init__(self) -> None:
        super().__init__()
        self._queue_lock = threading.Lock()
        self.queued: dict[str, str] = {}
        self.framework_id = ""

    def add(self, driver, task_id: str, command: str) -> None:
        with self._queue_lock:
            self.queued[task_id] = command
        driver.revive_offers()

    def registered(self, driver, framework_id, master_info):
        self.framework_id = framework_id
        super().registered(driver, framework_id, master_info)

    def on_offers(self, driver, offers):
        for offer in offers:
            with self._queue_lock:
                tasks, self.queued = dict(self.queued), {}
            if tasks:
                driver.launch_tasks([offer.id], [TaskInfo(task_id, offer.agent_id, command,
                                                          Resources.parse("cpus:0.25;mem:32"), name=f"job {task_id}")
                                                 for task_id, command in tasks.items()])
            else:
                driver.decline_offer(offer.id, Filters(refuse_seconds=0.5))

    def running(self, task_id: str) -> bool:
        return any(s.state == TaskState.RUNNING for s in self.statuses(task_id))


@pytest.fixture(scope="module")
def guarded(tmp_path_factory):
    """Two agents, a framework with two running tasks (they print a line to
    stdout and stderr), and its scheduler and driver."""
    tmp_path = tmp_path_factory.mktemp("dashboard")
    cluster = GuardedCluster(tmp_path)
    try:
        roles = tmp_path / "roles.toml"
        roles.write_text(ROLES_FILE)
        cluster.start_guarded_master(roles)
        start_agent(cluster, "host-a", "cpus:2;mem:1024", "--attributes", "rack:r1;room:er1", "--isolation", "posix")
        start_agent(cluster, "host-b", "cpus:4;mem:2048", "--attributes", "rack:r2;room:er1", "--isolation", "posix")
        scheduler = TaskQueue()
        driver = cluster.driver(scheduler, "dashboard-demo")
        for task_id in ("web-1", "web-2"):
            scheduler.add(driver, task_id, f"echo out-of-{task_id}; echo err-of-{task_id} >&2; sleep 600")
        cluster.wait_until(lambda: scheduler.running("web-1") and scheduler.running("web-2"), 30,
                           "the first tasks to run")
        yield cluster, scheduler, driver
    finally:
        cluster.close()


# ------------------------------------------------------------------ browser
def _chromium() -> tuple[str, str]:
    browser = shutil.which("chromium") or shutil.which("chromium-browser")
    driver = shutil.which("chromedriver")
    if browser is None or driver is None:
        unavailable("Chromium is missing (make chromium: apt-get install chromium chromium-driver)")
    return browser, driver


@pytest.fixture(scope="module")
def browser():
    """A real headless Chromium (the Debian packages, nothing downloaded)
    whose console messages the test can read."""
    try:
        from selenium import webdriver
        from selenium.webdriver.chrome.service import Service
    except ImportError:
        unavailable("selenium is missing (pip install -e '.[test]')")
    binary, chromedriver = _chromium()
    options = webdriver.ChromeOptions()
    options.binary_location = binary
    for argument in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage", "--disable-gpu",
                     "--window-size=1400,1800", "--no-first-run", "--disable-extensions",
                     "--disable-background-networking", "--disable-component-update"):
        options.add_argument(argument)
    options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    driver = webdriver.Chrome(options=options, service=Service(executable_path=chromedriver))
    driver.set_page_load_timeout(30)
    try:
        yield driver
    finally:
        driver.quit()


def console_errors(driver) -> list[dict]:
    """The browser console's errors since the last call (reading the log empties it)."""
    return [entry for entry in driver.get_log("browser") if entry["level"] == "SEVERE"]


def page_text(driver, selector: str = "main") -> str:
    from selenium.webdriver.common.by import By

    return driver.find_element(By.CSS_SELECTOR, selector).text


def links(driver, selector: str) -> list[str]:
    """The hrefs of the links ``selector`` finds, read in one step (the page redraws its tables every 2 s)."""
    return driver.execute_script("return Array.from(document.querySelectorAll(arguments[0]), a => a.href)", selector)


def sign_in(driver, cluster: GuardedCluster) -> None:
    """Open the dashboard with no token: it asks for one; give it."""
    from selenium.webdriver.common.by import By

    driver.get(cluster.http + "/")
    driver.execute_script("sessionStorage.clear()")   # a token kept by an earlier visit in this tab
    console_errors(driver)
    driver.refresh()
    form = driver.find_element(By.ID, "token-form")
    wait_until(form.is_displayed, 15, "the page to ask for the operator token")
    # the one error the console shows: the refused GET /state (401) that made the page ask
    refused: list[dict] = []
    wait_until(lambda: refused.extend(console_errors(driver)) or refused, 10, "the refused GET /state in the console")
    assert all("/state" in entry["message"] and "401" in entry["message"] for entry in refused), refused
    driver.find_element(By.ID, "token").send_keys(cluster.token)
    driver.find_element(By.ID, "token-save").click()
    wait_until(lambda: not form.is_displayed(), 15, "the page to take the token")


# ------------------------------------------------------------------ tests
def test_the_dashboard_shows_the_real_cluster_and_the_console_stays_clean(guarded, browser):
    cluster, scheduler, _ = guarded
    sign_in(browser, cluster)
    state = cluster.state()
    agents = {agent["hostname"]: agent for agent in state["agents"]}
    assert set(agents) == {"host-a", "host-b"}
    framework = next(fw for fw in state["frameworks"] if fw["name"] == "dashboard-demo")
    tasks = {task["id"]: task for task in framework["tasks"]}

    def shows_everything() -> bool:
        text = page_text(browser)
        return all(word in text for word in [*agents, *(a["id"] for a in agents.values()), framework["id"],
                                             "dashboard-demo", *tasks])
    wait_until(shows_everything, 20, "the page to show the agents, the framework and its tasks",
               diagnostics=lambda: page_text(browser))
    agents_panel = page_text(browser, "#agents")
    assert "rack=r1" in agents_panel and "rack=r2" in agents_panel   # attributes
    assert "cpus:2;mem:1024" in agents_panel and "cpus:4;mem:2048" in agents_panel
    tasks_panel = page_text(browser, "#tasks")
    assert tasks_panel.count("RUNNING") >= 2
    for task_id, task in tasks.items():
        assert task["hostname"] in tasks_panel
    cluster_panel = page_text(browser, "#cluster")
    assert state["leader"]["id"] in cluster_panel and state["total"] in cluster_panel
    assert "*" in page_text(browser, "#roles") and "analytics" in page_text(browser, "#roles")
    assert "enabled" in page_text(browser, "#preemption")
    # each agent links to its own HTTP
    assert {a["http_address"] for a in agents.values()} <= {href.rstrip("/") for href in links(browser, "#agents a")}
    # each task's stdout and stderr are shown as plain text (read through the master), and can be downloaded
    for task_id, task in tasks.items():
        agent = agents[task["hostname"]]
        for stream in ("stdout", "stderr"):
            expected = f"{agent['http_address']}/files/download?path={framework['id']}%2F{task_id}%2F{stream}"
            assert expected in links(browser, "#tasks .files a"), links(browser, "#tasks .files a")
            shown = show_log(browser, task_id, stream)
            assert shown == f"{'out' if stream == 'stdout' else 'err'}-of-{task_id}\n", shown
    # the role chart has drawn the samples the page took
    wait_until(lambda: browser.execute_script("return window.mesoslikeDashboard.samples()") >= 2, 15,
               "two samples of the roles' shares")
    assert browser.execute_script("return document.querySelectorAll('#roles svg .series').length") >= 1
    assert console_errors(browser) == []


def table_rows(driver, selector: str) -> list[list[str]]:
    """The cells' texts of the rows ``selector`` finds, read in one step (the tables are redrawn every 2 s)."""
    return driver.execute_script("return Array.from(document.querySelectorAll(arguments[0]), "
                                 "row => Array.from(row.querySelectorAll('td'), td => td.innerText.trim()))", selector)


def show_log(driver, task_id: str, stream: str, wanted: str = "") -> str:
    """Click the ``stream`` button of task ``task_id`` in the tasks panel; the
    text the log panel shows once it has read the file (and holds ``wanted``)."""
    from selenium.webdriver.common.by import By

    # found and clicked in one step: the page redraws its tables every 2 s
    clicked = driver.execute_script("""
        for (const row of document.querySelectorAll('#tasks tbody tr')) {
          const id = row.querySelector('code.task-id');
          if (id && id.textContent === arguments[0]) { row.querySelector('button.log-' + arguments[1]).click(); return true; }
        }
        return false;""", task_id, stream)
    assert clicked, page_text(driver, "#tasks")
    text = driver.find_element(By.ID, "log-text")
    wait_until(lambda: "bytes read" in page_text(driver, "#log-status") and wanted in text.text, 15,
               f"the {stream} of {task_id} in the log panel", diagnostics=lambda: page_text(driver, "#log"))
    assert task_id in page_text(driver, "#log-title")
    return driver.execute_script("return document.getElementById('log-text').textContent")


def test_a_task_log_is_shown_as_plain_text_and_followed(guarded, browser):
    cluster, scheduler, driver = guarded
    if not browser.current_url.startswith(cluster.http):   # run on its own
        sign_in(browser, cluster)
    scheduler.add(driver, "ticker", 'printf "a\\tb <b>not bold</b>\\n"; i=0; while true; do i=$((i+1)); '
                                    'echo "tick $i"; sleep 0.3; done')
    cluster.wait_until(lambda: scheduler.running("ticker"), 30, "the ticking task to run")
    wait_until(lambda: "ticker" in page_text(browser, "#tasks"), 15, "the page to show the ticking task")
    first = show_log(browser, "ticker", "stdout", wanted="tick 2")
    assert first.startswith("a\tb <b>not bold</b>\ntick 1\ntick 2\n"), first   # text: tabs, newlines, no HTML
    assert "\\n" not in first and '"data"' not in first                            # not Mesos's JSON
    assert browser.execute_script("return document.querySelectorAll('#log-text b').length") == 0
    count = first.count("tick")
    wait_until(lambda: page_text(browser, "#log-text").count("tick") >= count + 3, 15, "followed lines to appear")
    followed = browser.execute_script("return document.getElementById('log-text').textContent")
    lines = followed.splitlines()[1:]
    assert lines == [f"tick {i}" for i in range(1, len(lines) + 1)], lines   # in order, none twice, none lost
    browser.find_element(By.ID, "log-close").click()
    assert not browser.find_element(By.ID, "log").is_displayed()
    driver.kill_task("ticker")
    assert console_errors(browser) == []


def test_roles_show_the_weights_and_quota_in_force_and_frameworks_why_no_offers(guarded, browser):
    cluster, scheduler, driver = guarded
    if not browser.current_url.startswith(cluster.http):   # run on its own
        sign_in(browser, cluster)
    for path, body in (("/weights", {"ops": 3}), ("/quota", {"role": "ops", "guarantee": "cpus:0.5",
                                                             "limit": "cpus:1;gpus:0"})):
        request = urllib.request.Request(cluster.http + path, data=json.dumps(body).encode(), method="POST",
                                         headers={"Authorization": f"Bearer {cluster.token}"})
        with urllib.request.urlopen(request, timeout=10) as reply:
            assert reply.status == 200

    class Quiet(RecordingScheduler):
        def on_offers(self, driver, offers):
            for offer in offers:
                driver.decline_offer(offer.id, Filters(refuse_seconds=0))
            driver.suppress_offers()
    quiet = cluster.driver(Quiet(), "quiet-one")

    def role_row(role: str) -> list[str]:
        return next((cells for cells in table_rows(browser, "#roles tbody tr") if cells and cells[0] == role), [])
    wait_until(lambda: role_row("ops")[2:5] == ["3", "cpus:0.5", "cpus:1;gpus:0"], 15,
               "the roles panel to show the weight and quota set", diagnostics=lambda: page_text(browser, "#roles"))
    assert role_row("analytics")[2:4] == ["2", "cpus:1;mem:256"]   # the roles file's, as in force
    wait_until(lambda: "SUPPRESSED" in page_text(browser, "#frameworks"), 20,
               "the frameworks panel to say why quiet-one gets no offers",
               diagnostics=lambda: page_text(browser, "#frameworks"))
    frameworks = page_text(browser, "#frameworks")
    assert "why no offers" in frameworks and "it suppressed offers for role '*'" in frameworks
    quiet.stop()
    assert console_errors(browser) == []


def test_completed_tasks_are_listed_newest_first_with_their_end(guarded, browser):
    cluster, scheduler, driver = guarded
    if not browser.current_url.startswith(cluster.http):   # run on its own
        sign_in(browser, cluster)
    for task_id in ("done-1", "done-2"):
        scheduler.add(driver, task_id, "true")
        cluster.wait_until(lambda: any(s.state == TaskState.FINISHED for s in scheduler.statuses(task_id)), 30,
                           f"{task_id} to finish")

    def completed_ids() -> list[str]:
        return browser.execute_script(
            "return Array.from(document.querySelectorAll('#completed code.task-id'), c => c.textContent)")
    wait_until(lambda: {"done-1", "done-2"} <= set(completed_ids()), 15, "the completed panel to list both")
    ids = completed_ids()
    assert ids.index("done-2") < ids.index("done-1"), ids
    completed = page_text(browser, "#completed")
    assert "newest first" in completed and "ended" in completed
    ended = browser.execute_script("return Array.from(document.querySelectorAll('#completed .ended-at'), e => e.textContent)")
    assert ended and all(text != "–" and ":" in text for text in ended), ended


def test_auto_refresh_shows_a_new_task_without_reloading(guarded, browser):
    cluster, scheduler, driver = guarded
    if not browser.current_url.startswith(cluster.http):   # run on its own
        sign_in(browser, cluster)
    wait_until(lambda: "web-1" in page_text(browser, "#tasks"), 15, "the page to show the tasks")
    browser.execute_script("window.notReloaded = true")
    scheduler.add(driver, "late-3", "echo late; sleep 600")
    cluster.wait_until(lambda: scheduler.running("late-3"), 30, "the new task to run")
    wait_until(lambda: "late-3" in page_text(browser, "#tasks"), 15, "the page to show the new task by itself",
               diagnostics=lambda: page_text(browser, "#tasks"))
    assert browser.execute_script("return window.notReloaded === true")
    assert console_errors(browser) == []
    screenshot = os.environ.get("MESOSLIKE_DASHBOARD_SCREENSHOT")
    if screenshot:   # docs/img/dashboard.png: a few more samples in the chart first
        wait_until(lambda: browser.execute_script("return window.mesoslikeDashboard.samples()") >= 12, 60,
                   "a dozen samples of the roles' shares")
        browser.execute_script("window.scrollTo(0, 0)")
        browser.save_screenshot(screenshot)
        assert console_errors(browser) == []


def _raw_get(port: int, path: str, token: str = "") -> tuple[int, str, bytes]:
    """A GET with ``path`` sent as it is (urllib and browsers would resolve ``..`` first)."""
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=5)
    try:
        connection.putrequest("GET", path, skip_accept_encoding=True)
        if token:
            connection.putheader("Authorization", f"Bearer {token}")
        connection.endheaders()
        response = connection.getresponse()
        return response.status, response.getheader("Content-Type", ""), response.read()
    finally:
        connection.close()


def _raw_status(url: str, path: str) -> int:
    return _raw_get(int(url.rpartition(":")[2]), path)[0]


def test_the_routes_serve_the_shipped_files_publicly_and_nothing_else(guarded):
    cluster = guarded[0]
    shipped = {path.name: path.read_bytes() for path in DASHBOARD_DIR.iterdir()}
    for path, content_type, name in [("/", "text/html; charset=utf-8", "index.html"),
                                     ("/static/dashboard.js", "text/javascript; charset=utf-8", "dashboard.js"),
                                     ("/static/page.js", "text/javascript; charset=utf-8", "page.js"),
                                     ("/static/dashboard.css", "text/css; charset=utf-8", "dashboard.css"),
                                     ("/static/favicon.svg", "image/svg+xml", "favicon.svg")]:
        status, headers, body = cluster.get(path, token=False)   # the page's own files need no token
        assert (status, headers["Content-Type"], body) == (200, content_type, shipped[name]), path
        assert headers["X-Content-Type-Options"] == "nosniff"
        assert "script-src 'self'" in headers["Content-Security-Policy"]
    assert set(dashboard_files()) == {"/", "/static/page.js", "/static/dashboard.js", "/static/dashboard.css",
                                      "/static/favicon.svg"}
    # the cluster's data still needs the token
    assert cluster.get("/state", token=False)[0] == 401
    # nothing else is a file: traversal and unknown names are refused (401 without a token, 404 with one)
    secret = (cluster.keys.credentials).read_bytes()
    for path in ["/static/../state", "/static/../../../../etc/passwd", "/static/..%2f..%2fhttp.py",
                 "/static/%2e%2e/%2e%2e/setup.cfg", "/static//etc/passwd", "/static/", "/static/index.html",
                 "/static/dashboard.js/", "/static/nope.js", "/../setup.cfg", "/static/../../master/http.py"]:
        without = _raw_get(cluster.http_port, path)
        with_token = _raw_get(cluster.http_port, path, cluster.token)
        assert without[0] == 401, (path, without)
        assert with_token[0] == 404 and with_token[1] == "application/json", (path, with_token)
        for _, _, body in (without, with_token):
            assert b"leader" not in body and b"import" not in body and secret not in body


# ------------------------------------------------------------------ the Fuxi service's page
@pytest.fixture(scope="module")
def fuxi_page(tmp_path_factory):
    """A ``mesoslike local`` cluster (two agents) with a ``mesoslike fuxi serve
    --http-port`` on it and two jobs: one whose units all run, one that
    waits (its quota group holds 2 of its 3 slots, and one unit fits no
    machine). Yields (cluster, the page's URL, the job ids)."""
    tmp = tmp_path_factory.mktemp("fuxi-page")
    cluster = Cluster(tmp)
    work_dir = tmp / "fuxi-work"
    try:
        cluster.start_local("--agents", "2", "--resources", "cpus:2;mem:1024")
        quota = tmp / "quota.toml"
        quota.write_text("[quota.small]\ncpus = 0.2\nmem = 1000\n")
        port, http_port = free_port(), free_port()
        cluster._start("fuxi", ["fuxi", "serve", "--master", cluster.address, "--port", str(port),
                                "--http-port", str(http_port), "--quota", str(quota), "--work-dir", str(work_dir),
                                "--key", cluster.client_key, "--master-key", cluster.master_key])
        page = f"http://127.0.0.1:{http_port}"

        def status() -> dict:
            with urllib.request.urlopen(page + "/status", timeout=2) as response:
                return json.loads(response.read())
        cluster.wait_until(lambda: status().get("framework", {}).get("registered"), 30,
                           "the Fuxi service to register and serve its page")
        ids = []
        for name, units, group in [
                ("steady", [{"name": "mapper", "slots": 2, "command": "sleep 600"}], "default"),
                ("starved", [{"name": "capped", "slots": 3, "command": "sleep 600"},
                             {"name": "huge", "slots": 1, "cpus": 64, "command": "true"}], "small")]:
            path = service_tests.job_file(tmp / f"{name}.toml", name, units, group=group)
            done = subprocess.run([sys.executable, "-m", "mesoslike", "fuxi", "submit", "--fuxi",
                                   f"tcp://127.0.0.1:{port}", str(path)], cwd=REPO, env=child_env(),
                                  capture_output=True, text=True, timeout=60)
            assert done.returncode == 0, done.stdout + done.stderr
            ids.append(done.stdout.split()[1])
        cluster.wait_until(lambda: sum(u["granted"] for j in status()["jobs"] for u in j["units"]) == 4, 30,
                           "the jobs' slots to be granted")
        yield cluster, page, ids
    finally:
        cluster.close()
        service_tests.kill_appmasters(work_dir)


def test_the_fuxi_page_shows_jobs_slots_and_why_units_wait(fuxi_page, browser):
    cluster, page, (steady, starved) = fuxi_page
    with urllib.request.urlopen(page + "/status", timeout=5) as response:
        document = json.loads(response.read())
    browser.get(page + "/")
    wait_until(lambda: starved in page_text(browser, "#jobs") and steady in page_text(browser, "#jobs"), 20,
               "the page to show both jobs", diagnostics=lambda: page_text(browser))
    waiting = page_text(browser, "#waiting")
    assert "capped" in waiting and "quota" in waiting               # 2 of 3 slots: the group is full
    assert "huge" in waiting and "no machine can ever fit" in waiting
    assert "mapper" not in waiting                                  # all its slots are granted
    jobs = page_text(browser, "#jobs")
    assert "2/2" in jobs and "2/3" in jobs and "0/1" in jobs        # granted/desired per unit
    hosts = {host for job in document["jobs"] for unit in job["units"] for host in unit["hosts"]}
    assert hosts and all(host in jobs for host in hosts)            # where the slots are
    groups = page_text(browser, "#groups")
    assert "small" in groups and "default" in groups
    assert document["framework"]["id"] in page_text(browser, "#service")
    assert console_errors(browser) == []
    # the master's dashboard links the Fuxi service's page (its framework names it: webui_url)
    framework = next(f for f in cluster.state()["frameworks"] if f["id"] == document["framework"]["id"])
    assert framework["webui_url"] == page + "/"
    browser.get(cluster.http + "/")
    wait_until(lambda: links(browser, "#framework-pages a") == [page + "/"], 20,
               "the dashboard to link the Fuxi page", diagnostics=lambda: page_text(browser, "nav"))
    browser.get(page + "/")
    screenshot = os.environ.get("MESOSLIKE_FUXI_SCREENSHOT")
    if screenshot:
        browser.save_screenshot(screenshot)
    # read-only: no POST, and nothing but the shipped files
    request = urllib.request.Request(page + "/status", data=b"{}", method="POST")
    with pytest.raises(urllib.error.HTTPError) as refused:
        urllib.request.urlopen(request, timeout=5)
    assert refused.value.code == 405
    assert _raw_status(page, "/static/../status") == 404
