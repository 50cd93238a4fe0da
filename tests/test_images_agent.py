"""The agent's image flags (--docker-registry, --docker-config,
--docker-insecure-registries, --image-cache-size): from flags, environment
variables and config files to the agent's image store in its work dir; a
bad value stops the agent at start, naming it."""

from __future__ import annotations

import json
import os

import pytest
from click.testing import CliRunner

from mesoslike.agent.images import ImageStore
from mesoslike.agent.runtime import AgentRuntime
from mesoslike.cli import main
from mesoslike.errors import ConfigError

pytestmark = pytest.mark.timeout(60)


def test_the_image_flags_reach_the_agent_from_file_environment_and_flags(tmp_path, monkeypatch):
    seen: dict = {}

    class Recorder:
        def __init__(self, *args, **options) -> None:
            seen.update(options)
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
    runtime = AgentRuntime("tcp://127.0.0.1:1", "cpus:1;mem:64", hostname="h", work_dir=tmp_path / "agent",
                           isolation="posix", docker_registry="http://127.0.0.1:5000", image_cache_size=12345)
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
        AgentRuntime("tcp://127.0.0.1:1", "cpus:1;mem:64", hostname="h", work_dir=tmp_path / "b", isolation="posix",
                     docker_registry="ftp://registry")
