"""The image store against a real registry (Debian's docker-registry on
127.0.0.1; tests/image_registry.py): images built in the test from
busybox-static, pulled, unpacked once and shared, re-used without a
request, collected to a bound while leased images stay; and every failure
a task would end with — bad name, not found, unreachable, unauthorised,
digest mismatch, hostile layer, too large — a clear error naming the
image (docs/containers.rst, "Images")."""

from __future__ import annotations

import base64
import http.server
import json
import os
import socket
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from image_registry import (Image, Registry, busybox_image, file_entry, push_image, push_index,  # noqa: F401
                            push_with_skopeo, registry, registry_factory, require_tools, symlink_entry, tar_layer)
from mesoslike.agent.images import ImageStore, errors, mount_overlay, unmount
from mesoslike.agent.images.errors import ImageError
from mesoslike.agent.images.manifest import Platform
from mesoslike.agent.images.store import ImageLimits
from waiting import wait_until

pytestmark = pytest.mark.timeout(120)

ROOT = Path(__file__).resolve().parents[1]


def _store(tmp_path: Path, registry: Registry | None = None, name: str = "store", **options) -> ImageStore:
    if registry is not None:
        options.setdefault("default_registry", registry.host)
    return ImageStore(str(tmp_path / name), **options)


def _credentials(tmp_path: Path, registry: Registry, user: str, password: str, mode: int = 0o600) -> str:
    path = tmp_path / f"docker-config-{user}.json"
    path.write_text(json.dumps({"auths": {registry.host: {
        "auth": base64.b64encode(f"{user}:{password}".encode()).decode()}}}))
    os.chmod(path, mode)
    return str(path)


def _error(call) -> ImageError:
    with pytest.raises(ImageError) as caught:
        call()
    return caught.value


# ------------------------------------------------------------------ pulling
def test_an_image_is_pulled_unpacked_and_its_config_read(tmp_path, registry):
    image = busybox_image(config={"Entrypoint": ["/bin/sh", "-c"], "User": "nobody"})
    digest = push_image(registry, "library/busybox", "1.36", image)
    store = _store(tmp_path, registry)
    provisioned = store.provision("busybox:1.36", lease="task-1")
    assert provisioned.manifest_digest == digest and str(provisioned.reference) == f"{registry.host}/library/busybox:1.36"
    assert provisioned.layer_digests == tuple(layer.digest for layer in image.layers)
    assert provisioned.pulled == provisioned.layer_digests and provisioned.whiteouts in ("overlay", "markers")
    bottom, top = (Path(layer) for layer in provisioned.layers)
    assert (bottom / "bin/busybox").read_bytes() == Path("/bin/busybox").read_bytes()
    assert (top / "etc/motd").read_text().startswith("built in the test")
    config = provisioned.config
    assert config.entrypoint == ("/bin/sh", "-c") and config.cmd == ("/bin/sh",) and config.user == "nobody"
    assert config.environment == {"PATH": "/bin", "GREETING": "hello"} and config.working_dir == "/tmp"
    assert config.volumes == ("/data",) and config.exposed_ports == ("8080/tcp",)
    assert registry.blob_downloads() == 3   # two layers and the config
    assert stat_mode(tmp_path / "store") == 0o700
    assert store.leases()["task-1"].layers == list(provisioned.layer_digests)
    [listed] = store.images()
    assert listed.name == str(provisioned.reference) and listed.leases == ("task-1",) and listed.size > 1_000_000


def stat_mode(path: Path) -> int:
    return path.stat().st_mode & 0o7777


def test_a_second_provision_does_not_pull_again_even_after_a_restart(tmp_path, registry):
    push_image(registry, "library/busybox", "latest", busybox_image())
    first = _store(tmp_path, registry).provision("busybox")
    requests_after_first = len(registry.requests())
    again = _store(tmp_path, registry).provision("busybox")   # a new store on the same directory: an agent restart
    assert again.pulled == () and again.registry_requests == 0
    assert again.layers == first.layers and again.config == first.config
    assert len(registry.requests()) == requests_after_first


def test_cached_false_asks_for_the_manifest_again_and_sees_a_moved_tag(tmp_path, registry):
    push_image(registry, "team/app", "v1", busybox_image())
    store = _store(tmp_path, registry)
    first = store.provision("team/app:v1")
    moved = busybox_image(extra=b"second build")
    push_image(registry, "team/app", "v1", moved)
    assert store.provision("team/app:v1").manifest_digest == first.manifest_digest   # cached: no request
    manifests_before = len(registry.requests(contains="/manifests/"))
    fresh = store.provision("team/app:v1", cached=False)
    assert len(registry.requests(contains="/manifests/")) == manifests_before + 1
    assert fresh.manifest_digest != first.manifest_digest
    assert fresh.pulled == (moved.layers[1].digest,)   # the busybox layer is shared: only the new top pulled
    assert (Path(fresh.layers[1]) / "etc/motd").read_text().endswith("second build")


def test_images_pushed_by_skopeo_pull_in_docker_and_oci_formats(tmp_path, registry):
    require_tools("skopeo")
    push_with_skopeo(registry, "tools/docker-format", "v1", busybox_image(), tmp_path, docker_format=True)
    push_with_skopeo(registry, "tools/oci-format", "v1", busybox_image(oci=True), tmp_path, docker_format=False)
    store = _store(tmp_path, registry)
    for name in ("tools/docker-format:v1", "tools/oci-format:v1"):
        provisioned = store.provision(f"{registry.host}/{name}")
        assert (Path(provisioned.layers[0]) / "bin/busybox").exists()
        assert provisioned.config.env == ("PATH=/bin", "GREETING=hello")


def test_an_index_gives_this_machines_image(tmp_path, registry):
    amd64 = busybox_image(extra=b"amd64", oci=True)
    arm64 = busybox_image(extra=b"arm64", oci=True, config={})
    arm64.config["architecture"] = "arm64"
    push_index(registry, "multi/app", "v1", {"linux/arm64/v8": arm64, "linux/amd64": amd64})
    on_amd64 = _store(tmp_path, registry, "amd64", platform=Platform("linux", "amd64")).provision("multi/app:v1")
    assert (Path(on_amd64.layers[1]) / "etc/motd").read_text().endswith("amd64")
    on_arm64 = _store(tmp_path, registry, "arm64", platform=Platform("linux", "arm64", "v8")).provision("multi/app:v1")
    assert (Path(on_arm64.layers[1]) / "etc/motd").read_text().endswith("arm64")
    error = _error(lambda: _store(tmp_path, registry, "s390x", platform=Platform("linux", "s390x"))
                   .provision("multi/app:v1"))
    assert error.kind == errors.UNSUPPORTED
    assert str(error) == (f"image multi/app:v1: it has no linux/s390x image (it has: linux/amd64, "
                          "linux/arm64/v8)")


# ------------------------------------------------------------------ errors
def test_a_bad_name_fails_before_any_request(tmp_path, registry):
    error = _error(lambda: _store(tmp_path, registry).provision("Bad Name!"))
    assert error.kind == errors.BAD_NAME and str(error).startswith("image 'Bad Name!': ")
    assert registry.requests() == []


def test_a_missing_image_is_not_found(tmp_path, registry):
    push_image(registry, "library/busybox", "latest", busybox_image())
    store = _store(tmp_path, registry)
    error = _error(lambda: store.provision("nothere/app"))
    assert error.kind == errors.NOT_FOUND
    assert str(error) == (f"image nothere/app: the manifest latest was not found in {registry.host} "
                          "(HTTP 404 MANIFEST_UNKNOWN: manifest unknown)")
    error = _error(lambda: store.provision("busybox:9.9"))
    assert error.kind == errors.NOT_FOUND and "the manifest 9.9 was not found" in str(error)


def test_an_unreachable_or_silent_registry_fails_clearly(tmp_path):
    with socket.socket() as closed:   # a port nothing listens on
        closed.bind(("127.0.0.1", 0))
        port = closed.getsockname()[1]
    error = _error(lambda: _store(tmp_path, default_registry=f"127.0.0.1:{port}").provision("busybox"))
    assert error.kind == errors.UNREACHABLE
    assert f"cannot reach the registry at http://127.0.0.1:{port} (Connection refused)" in str(error)
    with socket.socket() as silent:   # accepts, never answers
        silent.bind(("127.0.0.1", 0))
        silent.listen(8)
        store = _store(tmp_path, name="silent", default_registry=f"127.0.0.1:{silent.getsockname()[1]}",
                       limits=ImageLimits(timeout=0.5))
        error = _error(lambda: store.provision("busybox"))
    assert error.kind == errors.UNREACHABLE and "(no answer within 0.5 s)" in str(error)


def test_basic_auth_takes_the_credentials_file_and_refuses_wrong_ones(tmp_path, registry_factory):
    secured = registry_factory(auth="htpasswd", users={"alice": "right"})
    push_image(secured, "library/busybox", "latest", busybox_image())
    anonymous = _error(lambda: _store(tmp_path, secured, "anonymous").provision("busybox"))
    assert anonymous.kind == errors.UNAUTHORIZED and "no credentials for it in --docker-config" in str(anonymous)
    wrong = _store(tmp_path, secured, "wrong", docker_config=_credentials(tmp_path, secured, "alice", "wrong"))
    error = _error(lambda: wrong.provision("busybox"))
    assert error.kind == errors.UNAUTHORIZED and "the credentials of --docker-config were refused" in str(error)
    assert "wrong" not in str(error).replace("wrong.", "")   # the password is never quoted
    right = _store(tmp_path, secured, "right", docker_config=_credentials(tmp_path, secured, "alice", "right"))
    assert right.provision("busybox").pulled


def test_bearer_token_auth_with_and_without_credentials(tmp_path, registry_factory):
    secured = registry_factory(auth="token", users={"alice": "right"})
    push_image(secured, "team/private", "v1", busybox_image())
    right = _store(tmp_path, secured, "right", docker_config=_credentials(tmp_path, secured, "alice", "right"))
    assert right.provision("team/private:v1").pulled
    assert ("alice", "repository:team/private:pull") in secured.token_server.asked
    wrong = _store(tmp_path, secured, "wrong", docker_config=_credentials(tmp_path, secured, "alice", "nope"))
    error = _error(lambda: wrong.provision("team/private:v1"))
    assert error.kind == errors.UNAUTHORIZED and "the token service" in str(error) and "refused" in str(error)
    anonymous = _error(lambda: _store(tmp_path, secured, "anonymous").provision("team/private:v1"))
    assert anonymous.kind == errors.UNAUTHORIZED   # an anonymous token grants nothing here
    assert ("", "repository:team/private:pull") in secured.token_server.asked


def test_anonymous_bearer_tokens_pull_public_images(tmp_path, registry_factory):
    public = registry_factory(auth="token", users={"alice": "right"}, anonymous_pull=True)
    push_image(public, "library/busybox", "latest", busybox_image())
    assert _store(tmp_path, public).provision("busybox").pulled   # Docker Hub's dance, without credentials


def test_a_credentials_file_others_may_read_is_refused(tmp_path, registry):
    path = _credentials(tmp_path, registry, "alice", "pw", mode=0o644)
    error = _error(lambda: _store(tmp_path, registry, docker_config=path))
    assert error.kind == errors.CREDENTIALS
    assert str(error) == (f"the registry credentials file {path} (--docker-config) has mode 0644: others may read "
                          f"it; it must be 0600 (chmod 600 {path})")


def test_a_blob_whose_bytes_do_not_match_its_digest_is_refused_and_not_kept(tmp_path, registry):
    image = busybox_image()
    push_image(registry, "library/busybox", "latest", image)
    top = image.layers[1]
    registry.blob_file(top.digest).write_bytes(b"x" * len(top.data))   # the registry's storage, corrupted
    store = _store(tmp_path, registry)
    error = _error(lambda: store.provision("busybox", lease="task-1"))
    assert error.kind == errors.DIGEST_MISMATCH
    assert f"layer 1 ({top.digest}): the registry sent bytes whose digest is sha256:" in str(error)
    assert not os.path.exists(store.layer_path(top.digest)) and store.leases() == {}
    assert os.listdir(tmp_path / "store" / "tmp") == []


def test_a_config_whose_diff_ids_do_not_match_the_layers_is_refused(tmp_path, registry):
    image = busybox_image()
    other = tar_layer([file_entry("other", b"x")])
    lying = Image([image.layers[0], other], image.config, diff_ids=[image.layers[0].diff_id, image.layers[1].diff_id])
    push_image(registry, "team/liar", "v1", lying)
    error = _error(lambda: _store(tmp_path, registry).provision("team/liar:v1"))
    assert error.kind == errors.DIGEST_MISMATCH
    assert f"layer 1 ({other.digest}) unpacks to {other.diff_id}, its config says {image.layers[1].diff_id}" in str(
        error)


def test_a_hostile_layer_from_the_registry_is_refused_naming_the_member(tmp_path, registry):
    hostile = Image([tar_layer([symlink_entry("etc", "/etc"), file_entry("etc/cron.d/evil", b"* * * * * root id")])])
    push_image(registry, "evil/app", "latest", hostile)
    store = _store(tmp_path, registry)
    error = _error(lambda: store.provision("evil/app"))
    assert error.kind == errors.BAD_IMAGE
    assert "layer 0" in str(error) and "'etc/cron.d/evil'" in str(error) and "not a directory (a link?)" in str(error)
    assert not os.path.exists("/etc/cron.d/evil") and os.listdir(tmp_path / "store" / "layers") == []


def test_an_image_over_its_size_bound_is_refused_before_it_is_downloaded(tmp_path, registry):
    push_image(registry, "library/busybox", "latest", busybox_image())
    store = _store(tmp_path, registry, limits=ImageLimits(max_image_bytes=100_000))
    error = _error(lambda: store.provision("busybox"))
    assert error.kind == errors.TOO_LARGE and "compressed (at most 100000)" in str(error)
    assert registry.blob_downloads() == 0


# ------------------------------------------------------------------ the cache's bound
def _small_image(number: int) -> Image:
    return Image([tar_layer([file_entry("data", os.urandom(100_000)), file_entry("id", str(number).encode())])])


def test_collection_keeps_leased_images_and_removes_the_least_recently_used(tmp_path, registry):
    for number in range(4):
        push_image(registry, f"small/i{number}", "latest", _small_image(number))
    ticks = iter(range(1, 1000))
    store = _store(tmp_path, registry, cache_size=340_000, clock=lambda: float(next(ticks)))
    leased = store.provision("small/i0", lease="running-task")
    one = store.provision("small/i1")
    two = store.provision("small/i2")
    assert all(os.path.isdir(p.layers[0]) for p in (leased, one, two))   # ~3 x 104 KiB on disk: fits
    three = store.provision("small/i3")   # over the bound: the least recently used unleased one goes
    assert not os.path.exists(one.layers[0])
    assert all(os.path.isdir(p.layers[0]) for p in (leased, two, three))
    assert store.usage() <= 340_000
    assert {image.name.split("/")[-1] for image in store.images()} == {"i0:latest", "i2:latest", "i3:latest"}
    assert store.release("running-task") and not store.release("running-task")
    store.provision("small/i1")   # pulled again; now the released i0 is the oldest
    assert not os.path.exists(leased.layers[0]) and os.path.isdir(three.layers[0])
    assert registry.blob_downloads(one.layer_digests[0]) == 2


def test_a_leased_image_larger_than_the_cache_stays_until_released(tmp_path, registry):
    push_image(registry, "library/busybox", "latest", busybox_image())
    store = _store(tmp_path, registry, cache_size=1000)
    provisioned = store.provision("busybox", lease="task-1")
    assert all(os.path.isdir(layer) for layer in provisioned.layers)
    assert store.collect() == []
    assert store.prune_leases(keep={"task-2"}) == ["task-1"]   # an agent recovering: task-1 no longer runs
    assert sorted(store.collect()) == sorted(provisioned.layer_digests)
    assert not any(os.path.exists(layer) for layer in provisioned.layers) and store.images() == []


# ------------------------------------------------------------------ processes sharing the cache
_PULLER = """
import json, sys
sys.dont_write_bytecode = True
from importlib import util
spec = util.spec_from_file_location("images", {package!r} + "/images/__init__.py",
                                    submodule_search_locations=[{package!r} + "/images"])
images = util.module_from_spec(spec); sys.modules["images"] = images; spec.loader.exec_module(images)
store = images.ImageStore({root!r}, default_registry={registry!r})
sys.stdin.readline()
provisioned = store.provision("library/busybox", lease=sys.argv[1])
print(json.dumps({{"pulled": list(provisioned.pulled), "layers": list(provisioned.layers)}}))
"""


def _waiters(lock_file: Path) -> int:
    inode = lock_file.stat().st_ino
    return sum(1 for line in Path("/proc/locks").read_text().splitlines()
               if "->" in line and line.split()[-3].endswith(f":{inode}"))


def test_two_processes_pulling_at_once_download_each_layer_once(tmp_path, registry):
    """Two supervisors (the package loaded by its path under ``python -I
    -S``, as a supervisor loads it) want the same image while a third pull
    holds its top layer: both wait, then one pulls and the other reuses."""
    image = busybox_image()
    push_image(registry, "library/busybox", "latest", image)
    root = tmp_path / "store"
    store = ImageStore(str(root), default_registry=registry.host)
    script = _PULLER.format(package=str(ROOT / "mesoslike" / "agent"), root=str(root), registry=registry.host)
    lock_file = root / "locks" / (image.layers[1].digest.replace(":", "-") + ".lock")
    with store._locked(str(lock_file)):   # a pull of the top layer in progress
        pullers = [subprocess.Popen([sys.executable, "-I", "-S", "-c", script, f"task-{n}"], stdin=subprocess.PIPE,
                                    stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for n in range(2)]
        for puller in pullers:
            puller.stdin.write("go\n")
            puller.stdin.flush()
        wait_until(lambda: _waiters(lock_file) == 2, 60, "both pullers waiting for the top layer",
                   diagnostics=lambda: Path("/proc/locks").read_text())
    results = []
    for puller in pullers:
        out, err = puller.communicate(timeout=60)
        assert puller.returncode == 0, err
        results.append(json.loads(out))
    assert results[0]["layers"] == results[1]["layers"]
    assert sorted(len(result["pulled"]) for result in results)[0] <= 1   # the second reused what the first pulled
    assert image.layers[1].digest in results[0]["pulled"] + results[1]["pulled"]
    for layer in image.layers:
        assert registry.blob_downloads(layer.digest) == 1
    assert set(store.leases()) == {"task-0", "task-1"}


# ------------------------------------------------------------------ redirects
class _RedirectingRegistry:
    """A registry (basic auth) that sends blob downloads to another host —
    as registries backed by object storage do — and that host, recording
    the ``Authorization`` headers it is sent."""

    def __init__(self, image: Image, user: str, password: str) -> None:
        manifest, media_type = image.manifest()
        blobs = {layer.digest: layer.data for layer in image.layers}
        config = image.config_bytes()
        blobs["sha256:" + __import__("hashlib").sha256(config).hexdigest()] = config
        expected = "Basic " + base64.b64encode(f"{user}:{password}".encode()).decode()
        self.cdn_authorizations: list[str | None] = []
        outer = self

        class Cdn(http.server.BaseHTTPRequestHandler):
            def do_GET(self) -> None:  # noqa: N802
                outer.cdn_authorizations.append(self.headers.get("Authorization"))
                body = blobs[self.path.rsplit("/", 1)[1]]
                self.send_response(200)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args: object) -> None:
                pass

        class Front(http.server.BaseHTTPRequestHandler):
            def do_GET(self) -> None:  # noqa: N802
                if self.headers.get("Authorization") != expected:
                    self.send_response(401)
                    self.send_header("WWW-Authenticate", 'Basic realm="test"')
                    self.send_header("Content-Length", "0")
                    self.end_headers()
                elif "/manifests/" in self.path:
                    self.send_response(200)
                    self.send_header("Content-Type", media_type)
                    self.send_header("Content-Length", str(len(manifest)))
                    self.end_headers()
                    self.wfile.write(manifest)
                else:
                    self.send_response(307)
                    self.send_header("Location", f"http://127.0.0.2:{outer.cdn.server_address[1]}/blob/"
                                                 f"{self.path.rsplit('/', 1)[1]}")
                    self.send_header("Content-Length", "0")
                    self.end_headers()

            def log_message(self, *args: object) -> None:
                pass

        self.cdn = http.server.ThreadingHTTPServer(("127.0.0.2", 0), Cdn)
        self.front = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Front)
        self.host = f"127.0.0.1:{self.front.server_address[1]}"
        for server in (self.cdn, self.front):
            threading.Thread(target=server.serve_forever, daemon=True).start()

    def stop(self) -> None:
        for server in (self.cdn, self.front):
            server.shutdown()
            server.server_close()


def test_redirects_are_followed_without_taking_the_credentials_along(tmp_path):
    image = busybox_image()
    fake = _RedirectingRegistry(image, "alice", "secret")
    try:
        config = tmp_path / "config.json"
        config.write_text(json.dumps({"auths": {fake.host: {"username": "alice", "password": "secret"}}}))
        os.chmod(config, 0o600)
        store = ImageStore(str(tmp_path / "store"), default_registry=fake.host, docker_config=str(config))
        provisioned = store.provision("library/busybox")
        assert (Path(provisioned.layers[0]) / "bin/busybox").exists()
        assert fake.cdn_authorizations == [None, None, None]   # config and two layers, never with the password
    finally:
        fake.stop()


# ------------------------------------------------------------------ the runtime's view
def test_a_provisioned_image_runs_under_runc_on_its_overlay(tmp_path, registry):
    """What the provisioner hands the container code is enough for the OCI
    runtime: the layers as an overlay lower, a bundle around it, ``runc run``."""
    require_tools("runc")
    if os.geteuid() != 0:
        from environment import unavailable
        unavailable("runc and overlay mounts need root")
    push_image(registry, "library/busybox", "latest", busybox_image())
    image = _store(tmp_path, registry).provision("busybox", lease="container-1")
    bundle = tmp_path / "bundle"
    for sub in ("upper", "work", "rootfs"):
        (bundle / sub).mkdir(parents=True)
    subprocess.run(["runc", "spec", "--bundle", str(bundle)], check=True, capture_output=True, timeout=30)
    spec = json.loads((bundle / "config.json").read_text())
    spec["process"].update(terminal=False, args=["/bin/sh", "-c", "cat /etc/motd; ls /opt/hidden; ls /etc; ps -o pid"],
                           env=list(image.config.env), cwd=image.config.working_dir)
    spec["root"] = {"path": str(bundle / "rootfs"), "readonly": False}
    (bundle / "config.json").write_text(json.dumps(spec))
    mount_overlay(image.layers, str(bundle / "upper"), str(bundle / "work"), str(bundle / "rootfs"))
    try:
        result = subprocess.run(["runc", "--root", str(tmp_path / "runc-state"), "run", "--bundle", str(bundle),
                                 f"images-test-{os.getpid()}"], capture_output=True, text=True, timeout=60)
    finally:
        unmount(str(bundle / "rootfs"))
    assert result.returncode == 0, result.stderr
    lines = result.stdout.split()
    assert result.stdout.startswith("built in the test\nnew\n")   # the opaque /opt/hidden: only layer 2's file
    assert lines[lines.index("new") + 1:lines.index("PID")] == ["group", "motd", "passwd"]   # /etc/remove-me: whited out
    assert lines[lines.index("PID"):] == ["PID", "1"]   # its own pid namespace: the shell's last command is pid 1
