"""Containers through Mesos's v1 JSON (docs/mesos-api.rst, docs/containers.rst):
a v1 scheduler's task with a ``MESOS`` container of a Docker image, and one
with a ``DOCKER`` container, run in the image's root filesystem on a real
agent that pulls them from a real registry (Debian's docker-registry, the
images built in the test from busybox-static)."""

from __future__ import annotations

import os

import pytest

from environment import unavailable
from image_registry import busybox_image, push_image, registry, registry_factory, require_tools  # noqa: F401
from mesoslike.agent.executor import sandbox_path
from test_v1_scheduler import Cluster, command_task, subscribed, until_state

pytestmark = pytest.mark.timeout(180)

PROBE = "cat /etc/motd; test -e /usr/bin/python3 || echo no-host-files"


def test_a_v1_tasks_mesos_and_docker_containers_run_their_images(tmp_path, registry):  # noqa: F811
    require_tools("runc", "docker-registry")
    if os.geteuid() != 0:
        unavailable("containers need root")
    push_image(registry, "test/busybox", "1", busybox_image())
    cluster = Cluster(tmp_path, docker_registry=registry.host)
    try:
        scheduler = cluster.subscribe(failover_timeout=0)
        offer = scheduler.wait_for("OFFERS")["offers"]["offers"][0]
        mesos = command_task(offer, "in-mesos", PROBE)
        mesos["container"] = {"type": "MESOS", "mesos": {"image": {"type": "DOCKER",
                                                                  "docker": {"name": "test/busybox:1"}}}}
        docker = command_task(offer, "in-docker", PROBE)
        docker["container"] = {"type": "DOCKER", "docker": {"image": "test/busybox:1", "network": "HOST"}}
        assert cluster.call(scheduler, "ACCEPT", {"offer_ids": [offer["id"]], "operations": [
            {"type": "LAUNCH", "launch": {"task_infos": [mesos, docker]}}]})[0] == 202
        framework_id = subscribed(scheduler)
        for task_id in ("in-mesos", "in-docker"):
            status = until_state(cluster, scheduler, task_id, ("TASK_FINISHED", "TASK_FAILED"))
            assert status["state"] == "TASK_FINISHED", status
            out = (sandbox_path(cluster.agent.work_dir, framework_id, task_id) / "stdout").read_text().split("\n")
            assert out[0] == "built in the test" and "no-host-files" in out, out   # the image's files, not the host's
        # a container mesoslike cannot give is refused by name, as a bad call (before any offer is looked at)
        bridge = command_task(offer, "bridged", "true")
        bridge["container"] = {"type": "DOCKER", "docker": {"image": "test/busybox:1", "network": "BRIDGE"}}
        status, answer = cluster.call(scheduler, "ACCEPT", {"offer_ids": [offer["id"]], "operations": [
            {"type": "LAUNCH", "launch": {"task_infos": [bridge]}}]})
        assert status == 400 and b"bridge" in answer
        scheduler.close()
    finally:
        cluster.close()
