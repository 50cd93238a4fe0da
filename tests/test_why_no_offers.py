"""Why a framework gets no offers, as /state, `mesoslike state` and the
dashboard show it (docs/operations.rst, "Why a framework gets no offers"):
a real cluster, a framework that suppressed offers and one that declined
every agent for a long while."""

from __future__ import annotations

import subprocess
import sys

import pytest

from e2e_helpers import REPO, RecordingScheduler, cluster  # noqa: F401 (fixture)
from mesoslike import Filters

pytestmark = pytest.mark.timeout(120)


class Suppressor(RecordingScheduler):
    """Suppresses offers at its first offer (declining it)."""

    def on_offers(self, driver, offers) -> None:
        for offer in offers:
            driver.decline_offer(offer.id, Filters(0.0))
        driver.suppress_offers()


class Decliner(RecordingScheduler):
    """Declines every offer for ten minutes."""

    def on_offers(self, driver, offers) -> None:
        for offer in offers:
            driver.decline_offer(offer.id, Filters(600.0))


def blockers(state: dict, name: str) -> list[dict]:
    return next(f for f in state["frameworks"] if f["name"] == name)["offer_blockers"]


def test_state_and_the_cli_say_why_frameworks_get_no_offers(cluster):
    cluster.start_local("--agents", "2")
    suppressor, decliner = Suppressor(), Decliner()
    cluster.driver(suppressor, "quiet")
    cluster.driver(decliner, "picky")

    def both_blocked():
        state = cluster.state()
        reasons = {name: [b["reason"] for b in blockers(state, name)] for name in ("quiet", "picky")
                   if any(f["name"] == name for f in state["frameworks"])}
        return state if reasons == {"quiet": ["SUPPRESSED"], "picky": ["DECLINE_FILTERS"]} else None
    state = cluster.wait_until(both_blocked, 30, "both frameworks blocked, each for its reason")
    (quiet,) = blockers(state, "quiet")
    assert quiet["roles"] == ["*"] and "suppressed offers for role '*'" in quiet["message"]
    (picky,) = blockers(state, "picky")
    assert picky["filters"] == 2 and picky["agents"] == 2 and 500 < picky["expires_in"] <= 600

    printed = subprocess.run([sys.executable, "-m", "mesoslike", "state", "--master", cluster.address], cwd=REPO,
                             env=cluster.client_env(), capture_output=True, text=True, timeout=60)
    assert printed.returncode == 0, printed.stderr
    why = printed.stdout.split("why frameworks get no offers\n", 1)[1].split("\n\n", 1)[0].splitlines()
    assert any("(quiet): SUPPRESSED: it suppressed offers for role '*'" in line for line in why), why
    assert any("(picky): DECLINE_FILTERS: it declined the 2 agent(s) that could take it: 2 decline filter(s) in "
               "force on 2 agent(s), the soonest ends in" in line for line in why), why
