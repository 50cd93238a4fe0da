"""The agent's image flags (--docker-registry, --docker-config,
--docker-insecure-registries, --image-cache-size): from flags, environment
variables and config files to the agent's image store in its work dir; a
bad value stops the agent at start, naming it."""

from __future__ import annotations

import json
import os

import attrs
import pytest
from click.testing import CliRunner

from image_registry import busybox_image, push_image, registry, registry_factory  # noqa: F401
from mesoslike.agent.images import ImageStore
from mesoslike.agent.runtime import AgentRuntime
from mesoslike.agent.settings import AgentSettings
from mesoslike.cli import main
from mesoslike.errors import ConfigError

pytestmark = pytest.mark.timeout(60)


def test_the_image_flags_reach_the_agent_from_file_environment_and_flags(tmp_path, monkeypatch):
    seen: dict = {}

    class Recorder:
        def __init__(self, settings, **injected) -> None:
            seen.update(attrs.asdict(settings, recurse=False))
            raise SystemExit(0)

    monkeypatch.setattr("mesoslike.agent.runtime.AgentRuntime", Recorder)
    config = tmp_path / "agent.toml"
    config.write_text('[agent]\ndocker-registry = "localhost:5000"\nimage-cache-size = "3GB"\n')
    result = CliRunner().invoke(main, ["agent", "--master", "tcp://127.0.0.1:1", "--config", str(config),
                                       "--docker-config", "/etc/mesoslike/docker.json"],
                                env={"MESOSLIKE_AGENT_DOCKER_INSECURE_REGISTRIES": "10.0.0.5:5000, corp:80"})
    assert result.exit_code == 0, result.output
    assert seen["docker_registry"] == "localhost:5000" and seen["image_cache_size"] == 3 * 1024 ** 3
    assert seen["docker_config"] == "/etc/mesoslike/docker.json"
    assert seen["docker_insecure_registries"] == ("10.0.0.5:5000", "corp:80")
    result = CliRunner().invoke(main, ["agent", "--master", "tcp://127.0.0.1:1", "--image-cache-size", "lots"])
    assert result.exit_code == 2 and "'lots' is not a size" in result.output


def test_the_agent_keeps_its_image_store_in_its_work_dir(tmp_path):
    runtime = AgentRuntime(AgentSettings(master="tcp://127.0.0.1:1", resources="cpus:1;mem:64", hostname="h",
                                         work_dir=tmp_path / "agent", isolation="posix",
                                         docker_registry="http://127.0.0.1:5000", image_cache_size=12345))
    store = runtime.images
    assert store.root == str(tmp_path / "agent" / "images") and (os.stat(store.root).st_mode & 0o777) == 0o700
    assert store.default_registry == "127.0.0.1:5000" and store.cache_size == 12345
    again = ImageStore.from_settings(json.loads(json.dumps(store.settings())))   # a supervisor's view of it
    assert again.settings() == store.settings()


def test_the_agent_refuses_to_start_with_bad_image_settings(tmp_path):
    readable = tmp_path / "docker.json"
    readable.write_text('{"auths": {}}')
    os.chmod(readable, 0o644)
    result = CliRunner().invoke(main, ["agent", "--master", "tcp://127.0.0.1:1", "--work-dir", str(tmp_path / "a"),
                                       "--isolation", "posix", "--docker-config", str(readable)])
    assert result.exit_code == 1
    assert f"the registry credentials file {readable} (--docker-config) has mode 0644" in result.output
    with pytest.raises(ConfigError, match="'ftp://registry' is not host"):
        AgentRuntime(AgentSettings(master="tcp://127.0.0.1:1", resources="cpus:1;mem:64", hostname="h",
                                   work_dir=tmp_path / "b", isolation="posix", docker_registry="ftp://registry"))


def test_agent_images_lists_the_cache_and_who_holds_what(tmp_path, registry):
    push_image(registry, "library/busybox", "latest", busybox_image())
    store = ImageStore(str(tmp_path / "agent" / "images"), default_registry=registry.host)
    provisioned = store.provision("busybox", lease="task-1")
    result = CliRunner().invoke(main, ["agent", "images", "--work-dir", str(tmp_path / "agent")])
    assert result.exit_code == 0, result.output
    assert f"{registry.host}/library/busybox:latest  {provisioned.manifest_digest[:19]}  2 layer(s)" in result.output
    assert "held by task-1" in result.output
    listed = json.loads(CliRunner().invoke(main, ["agent", "images", "--work-dir", str(tmp_path / "agent"),
                                                  "--json"]).output)
    assert listed["images"][0]["leases"] == ["task-1"] and listed["bytes"] == store.usage() > 1_000_000
    missing = CliRunner().invoke(main, ["agent", "images", "--work-dir", str(tmp_path / "none")])
    assert missing.exit_code == 1 and "no image cache in" in missing.output
