"""The image provisioner's pure parts: references parsed as Docker parses
them, manifests and indexes, image configs, credentials files, the
WWW-Authenticate challenge, and the cache's bookkeeping and collection
plan (docs/containers.rst, "Images")."""

from __future__ import annotations

import base64
import json

import pytest
from hypothesis import given
from hypothesis import strategies as st

from mesoslike.agent.images import errors
from mesoslike.agent.images.cache import CacheIndex, ImageEntry, LayerEntry, LeaseEntry, plan_collection
from mesoslike.agent.images.config import parse_config
from mesoslike.agent.images.credentials import parse_docker_config, registry_key
from mesoslike.agent.images.errors import ImageError
from mesoslike.agent.images.manifest import (DOCKER_MANIFEST, OCI_INDEX, Index, Manifest, Platform, host_platform,
                                             parse_manifest, select_platform)
from mesoslike.agent.images.reference import ImageReference, parse_reference
from mesoslike.agent.images.registry import RegistryEndpoints, is_loopback, parse_challenge
from mesoslike.agent.images.store import parse_default_registry

pytestmark = pytest.mark.timeout(60)

D1 = "sha256:" + "1" * 64
D2 = "sha256:" + "2" * 64
D3 = "sha256:" + "3" * 64


# ------------------------------------------------------------------ references
@pytest.mark.parametrize("text, default, expected", [
    ("busybox", "docker.io", ImageReference("docker.io", "library/busybox", "latest")),
    ("busybox:1.36", "docker.io", ImageReference("docker.io", "library/busybox", "1.36")),
    ("library/busybox:1.36", "docker.io", ImageReference("docker.io", "library/busybox", "1.36")),
    ("team/app", "docker.io", ImageReference("docker.io", "team/app", "latest")),
    ("busybox", "localhost:5000", ImageReference("localhost:5000", "library/busybox", "latest")),
    ("localhost:5000/team/app@" + D1, "docker.io", ImageReference("localhost:5000", "team/app", None, D1)),
    ("localhost:5000/app", "docker.io", ImageReference("localhost:5000", "app", "latest")),
    ("localhost/app:v1", "docker.io", ImageReference("localhost", "app", "v1")),
    ("registry.example.com/a/b/c:v1@" + D2, "docker.io", ImageReference("registry.example.com", "a/b/c", "v1", D2)),
    ("docker.io/busybox", "localhost:5000", ImageReference("docker.io", "library/busybox", "latest")),
    ("index.docker.io/busybox", "localhost:5000", ImageReference("docker.io", "library/busybox", "latest")),
    ("Example/app", "docker.io", ImageReference("Example", "app", "latest")),   # capitals: a registry, as Docker
    ("[::1]:5000/app:v2", "docker.io", ImageReference("[::1]:5000", "app", "v2")),
    ("a-b__c/e.f_g", "docker.io", ImageReference("docker.io", "a-b__c/e.f_g", "latest")),
])
def test_references_parse_as_docker_parses_them(text, default, expected):
    assert parse_reference(text, default) == expected


def test_a_reference_prints_canonically():
    assert str(parse_reference("busybox")) == "docker.io/library/busybox:latest"
    assert str(parse_reference("localhost:5000/app@" + D1)) == f"localhost:5000/app@{D1}"
    assert parse_reference("app:v1@" + D1).manifest_reference == D1   # the digest pins the content


@pytest.mark.parametrize("text, cause", [
    ("", "an image name is needed"),
    ("Busybox", "lowercase"),
    ("busy box", "no spaces"),
    ("busybox:", "is not a tag"),
    ("busybox:-x", "is not a tag"),
    ("busybox:" + "x" * 129, "is not a tag"),
    ("busybox@sha256:abc", "has 64 hex digits"),
    ("busybox@md5:" + "0" * 32, "not supported"),
    ("busybox@sha256:" + "G" * 64, "is not a digest"),
    ("bad..name", "is not a repository name"),
    ("-app", "is not a repository name"),
    ("localhost:5000/", "the repository name is empty"),
    ("host:99999/app", "no valid port"),
    ("a/" * 130 + "b", "longer than 255"),
    ("naïve", "non-ASCII"),
])
def test_bad_references_are_refused_naming_the_reference_and_why(text, cause):
    with pytest.raises(ImageError) as caught:
        parse_reference(text)
    assert caught.value.kind == errors.BAD_NAME
    assert cause in str(caught.value)
    assert str(caught.value).startswith(f"image {text!r}"[:20])


@pytest.mark.parametrize("flag, expected", [
    ("https://registry-1.docker.io", ("docker.io", "https")),
    ("localhost:5000", ("localhost:5000", None)),
    ("http://127.0.0.1:5000/", ("127.0.0.1:5000", "http")),
    ("registry.example.com", ("registry.example.com", None)),
])
def test_the_default_registry_flag_takes_a_host_or_a_url(flag, expected):
    assert parse_default_registry(flag) == expected


@pytest.mark.parametrize("flag", ["ftp://x", "https://x/path", "http://", "not a host"])
def test_a_bad_default_registry_is_refused(flag):
    with pytest.raises(ImageError, match="registry"):
        parse_default_registry(flag)


def test_http_only_for_loopback_and_listed_registries():
    endpoints = RegistryEndpoints(frozenset({"10.0.0.5:5000"}), {"corp.example:443": "https"})
    assert endpoints.base_url("docker.io") == "https://registry-1.docker.io"
    assert endpoints.base_url("localhost:5000") == "http://localhost:5000"
    assert endpoints.base_url("127.0.0.1:5000") == "http://127.0.0.1:5000"
    assert endpoints.base_url("[::1]:5000") == "http://[::1]:5000"
    assert endpoints.base_url("10.0.0.5:5000") == "http://10.0.0.5:5000"
    assert endpoints.base_url("10.0.0.6:5000") == "https://10.0.0.6:5000"
    assert endpoints.base_url("corp.example:443") == "https://corp.example:443"
    with pytest.raises(ImageError, match="plain http"):
        RegistryEndpoints(frozenset(), {"corp.example": "http"}).base_url("corp.example")
    assert is_loopback("127.8.9.1") and is_loopback("localhost") and not is_loopback("example.com")


# ------------------------------------------------------------------ manifests
def _manifest(layers=(D2,), config_type="application/vnd.docker.container.image.v1+json", **extra) -> bytes:
    return json.dumps({"schemaVersion": 2, "mediaType": DOCKER_MANIFEST,
                       "config": {"mediaType": config_type, "digest": D1, "size": 10},
                       "layers": [{"mediaType": "application/vnd.docker.image.rootfs.diff.tar.gzip", "digest": d,
                                   "size": 5} for d in layers], **extra}).encode()


def test_a_manifest_is_parsed_and_checked():
    manifest = parse_manifest(_manifest((D2, D3)))
    assert isinstance(manifest, Manifest)
    assert [layer.digest for layer in manifest.layers] == [D2, D3] and manifest.config.digest == D1


@pytest.mark.parametrize("body, kind, cause", [
    (b"{not json", errors.BAD_IMAGE, "not JSON"),
    (b"[]", errors.BAD_IMAGE, "not a JSON object"),
    (json.dumps({"schemaVersion": 1, "fsLayers": []}).encode(), errors.UNSUPPORTED, "schema 1"),
    (_manifest(config_type="application/vnd.cncf.helm.config.v1+json"), errors.UNSUPPORTED, "not a container image"),
    (_manifest(layers=[D2] * 200), errors.TOO_LARGE, "200 layers"),
    (_manifest(layers=["sha256:abc"]), errors.BAD_IMAGE, "no valid digest"),
    (json.dumps({"schemaVersion": 2, "mediaType": DOCKER_MANIFEST, "config": {
        "mediaType": "application/vnd.docker.container.image.v1+json", "digest": D1, "size": -1},
        "layers": []}).encode(), errors.BAD_IMAGE, "no valid size"),
    (json.dumps({"schemaVersion": 2, "mediaType": DOCKER_MANIFEST, "config": {
        "mediaType": "application/vnd.docker.container.image.v1+json", "digest": D1, "size": 1},
        "layers": [{"mediaType": "application/vnd.docker.image.rootfs.foreign.diff.tar.gzip", "digest": D2,
                    "size": 1, "urls": ["https://example.com/layer"]}]}).encode(), errors.UNSUPPORTED, "foreign"),
    (json.dumps({"schemaVersion": 2, "mediaType": DOCKER_MANIFEST, "config": {
        "mediaType": "application/vnd.docker.container.image.v1+json", "digest": D1, "size": 1},
        "layers": [{"mediaType": "application/x-rar", "digest": D2, "size": 1}]}).encode(), errors.UNSUPPORTED,
     "not a layer we unpack"),
])
def test_bad_manifests_are_refused(body, kind, cause):
    with pytest.raises(ImageError) as caught:
        parse_manifest(body, max_layers=127)
    assert caught.value.kind == kind and cause in str(caught.value)


def _index(*platforms: tuple[str, str, str]) -> Index:
    body = json.dumps({"schemaVersion": 2, "mediaType": OCI_INDEX, "manifests": [
        {"mediaType": "application/vnd.oci.image.manifest.v1+json", "digest": f"sha256:{n:064x}", "size": 100,
         "platform": {"os": os_name, "architecture": arch, **({"variant": variant} if variant else {})}}
        for n, (os_name, arch, variant) in enumerate(platforms)]}).encode()
    index = parse_manifest(body)
    assert isinstance(index, Index)
    return index


def test_an_index_gives_this_platforms_manifest():
    index = _index(("linux", "arm", "v7"), ("linux", "arm64", "v8"), ("windows", "amd64", ""), ("linux", "amd64", ""),
                   ("unknown", "unknown", ""))
    assert select_platform(index, Platform("linux", "amd64")).digest == f"sha256:{3:064x}"
    assert select_platform(index, Platform("linux", "arm64", "v8")).digest == f"sha256:{1:064x}"
    assert select_platform(_index(("linux", "arm64", "")), Platform("linux", "arm64", "v8")).digest == f"sha256:{0:064x}"
    with pytest.raises(ImageError) as caught:
        select_platform(index, Platform("linux", "s390x"))
    assert caught.value.kind == errors.UNSUPPORTED
    assert "no linux/s390x image (it has: linux/amd64, linux/arm/v7, linux/arm64/v8, windows/amd64)" in str(caught.value)


def test_the_host_platform_is_named_as_indexes_name_it():
    assert host_platform("x86_64") == Platform("linux", "amd64")
    assert host_platform("aarch64") == Platform("linux", "arm64", "v8")


# ------------------------------------------------------------------ configs
def _config(**settings) -> bytes:
    return json.dumps({"architecture": "amd64", "os": "linux", "config": settings,
                       "rootfs": {"type": "layers", "diff_ids": [D1]}}).encode()


def test_an_image_config_is_parsed():
    config = parse_config(_config(Env=["PATH=/bin", "A=1", "A=2", "B=x=y"], Entrypoint=["/bin/sh", "-c"], Cmd=None,
                                  WorkingDir="/srv", User="1000:1000", Volumes={"/data": {}},
                                  ExposedPorts={"80/tcp": {}, "53/udp": {}, "8080": {}}, Labels={"a": "b"},
                                  StopSignal="SIGINT"), Platform("linux", "amd64"))
    assert config.env == ("PATH=/bin", "A=2", "B=x=y")
    assert config.environment == {"PATH": "/bin", "A": "2", "B": "x=y"}
    assert config.entrypoint == ("/bin/sh", "-c") and config.cmd is None
    assert (config.working_dir, config.user, config.volumes) == ("/srv", "1000:1000", ("/data",))
    assert config.exposed_ports == ("80/tcp", "53/udp", "8080/tcp")
    assert config.diff_ids == (D1,) and config.labels == {"a": "b"} and config.stop_signal == "SIGINT"
    assert json.loads(json.dumps(config.as_json()))["entrypoint"] == ["/bin/sh", "-c"]


def test_a_config_without_settings_is_empty_not_refused():
    config = parse_config(json.dumps({"rootfs": {"type": "layers", "diff_ids": []}}).encode())
    assert config.entrypoint is None and config.cmd is None and config.env == ()


@pytest.mark.parametrize("settings, cause", [
    ({"Env": ["NOEQUALS"]}, "not NAME=value"),
    ({"Env": "PATH=/bin"}, "not a list"),
    ({"Cmd": ["a\0b"]}, "no NUL"),
    ({"WorkingDir": "relative"}, "not an absolute path"),
    ({"User": "root; rm -rf /"}, "not USER[:GROUP]"),
    ({"Volumes": {"data": {}}}, "not an absolute path"),
    ({"ExposedPorts": {"99999/tcp": {}}}, "not PORT"),
    ({"ExposedPorts": {"80/icmp": {}}}, "not PORT"),
    ({"Labels": ["x"]}, "Labels is not an object"),
])
def test_bad_configs_are_refused(settings, cause):
    with pytest.raises(ImageError) as caught:
        parse_config(_config(**settings))
    assert caught.value.kind == errors.BAD_IMAGE and cause in str(caught.value)


def test_an_image_of_another_platform_is_refused_before_it_runs():
    with pytest.raises(ImageError) as caught:
        parse_config(_config(), Platform("linux", "arm64", "v8"))
    assert caught.value.kind == errors.UNSUPPORTED and "linux/amd64 image; this machine is linux/arm64/v8" in str(
        caught.value)


def test_a_config_must_list_its_layers():
    with pytest.raises(ImageError, match="rootfs"):
        parse_config(json.dumps({"config": {}}).encode())
    with pytest.raises(ImageError, match="diff_ids"):
        parse_config(json.dumps({"rootfs": {"type": "layers", "diff_ids": ["x"]}}).encode())


# ------------------------------------------------------------------ credentials
def test_credentials_come_from_a_docker_config_auths_table():
    config = parse_docker_config(json.dumps({"auths": {
        "https://index.docker.io/v1/": {"auth": base64.b64encode(b"hub:pw1").decode()},
        "localhost:5000": {"username": "alice", "password": "pw:2"},
        "http://Registry.Example.com:8443/v2/": {"auth": base64.b64encode(b"bob:pw:3").decode()},
        "token.example": {"identitytoken": "xyz"}}, "credsStore": "desktop"}).encode())
    assert config.for_registry("docker.io").password == "pw1"
    assert config.for_registry("localhost:5000").username == "alice"
    assert config.for_registry("registry.example.com:8443").password == "pw:3"
    assert config.for_registry("token.example") is None and config.for_registry("other") is None
    assert "pw" not in repr(config.for_registry("docker.io"))
    assert registry_key("https://registry-1.docker.io/") == "docker.io"


@pytest.mark.parametrize("body, cause", [
    (b"nope", "is not JSON"),
    (b'{"auths": []}', "'auths' that is not an object"),
    (b'{"auths": {"x": {"auth": "!!!"}}}', "not base64 of USER:PASSWORD"),
    (json.dumps({"auths": {"x": {"auth": base64.b64encode(b"nocolon").decode()}}}).encode(),
     "not base64 of USER:PASSWORD"),
])
def test_a_malformed_credentials_file_is_refused_without_quoting_it(body, cause):
    with pytest.raises(ImageError) as caught:
        parse_docker_config(body, "/etc/creds.json")
    assert caught.value.kind == errors.CREDENTIALS
    assert cause in str(caught.value) and "/etc/creds.json" in str(caught.value)


# ------------------------------------------------------------------ challenges
def test_www_authenticate_challenges_are_parsed():
    assert parse_challenge('Bearer realm="https://auth.docker.io/token",service="registry.docker.io",'
                           'scope="repository:library/busybox:pull,push"') == (
        "bearer", {"realm": "https://auth.docker.io/token", "service": "registry.docker.io",
                   "scope": "repository:library/busybox:pull,push"})
    assert parse_challenge('Basic realm="test \\"realm\\""') == ("basic", {"realm": 'test "realm"'})
    assert parse_challenge("Bearer realm=https://x/token, service=s") == (
        "bearer", {"realm": "https://x/token", "service": "s"})
    assert parse_challenge("") == ("", {})
    assert parse_challenge('Bearer realm="unterminated') == ("bearer", {"realm": "unterminated"})


# ------------------------------------------------------------------ the cache
def test_collection_takes_the_least_recently_used_unleased_layers_to_the_bound():
    layers = {D1: LayerEntry(100, used=1.0), D2: LayerEntry(100, used=3.0), D3: LayerEntry(100, used=2.0)}
    assert plan_collection(layers, keep=(), capacity=300) == []
    assert plan_collection(layers, keep=(), capacity=200) == [D1]
    assert plan_collection(layers, keep=(), capacity=100) == [D1, D3]
    assert plan_collection(layers, keep={D1}, capacity=100) == [D3, D2]
    assert plan_collection(layers, keep={D1, D2, D3}, capacity=0) == []   # leased: above the bound, kept


@given(st.dictionaries(st.integers(0, 30), st.tuples(st.integers(0, 1000), st.integers(0, 50)), max_size=15),
       st.sets(st.integers(0, 30)), st.integers(0, 5000))
def test_collection_keeps_leases_meets_the_bound_when_it_can_and_goes_oldest_first(entries, kept, capacity):
    layers = {f"sha256:{n:064x}": LayerEntry(size, float(used)) for n, (size, used) in entries.items()}
    keep = {f"sha256:{n:064x}" for n in kept}
    victims = plan_collection(layers, keep, capacity)
    assert not keep.intersection(victims)
    remaining = sum(entry.size for digest, entry in layers.items() if digest not in victims)
    leased_size = sum(entry.size for digest, entry in layers.items() if digest in keep)
    assert remaining <= capacity or len(victims) == len(set(layers) - keep) or remaining <= leased_size
    if victims:   # nothing collected is newer than something unleased left behind
        survivors = [layers[d].used for d in layers if d not in keep and d not in victims]
        assert not survivors or max(layers[d].used for d in victims) <= min(survivors)
        last = victims[-1]   # and no more than needed: without the last victim the bound is not met
        assert remaining + layers[last].size > capacity


def test_forgetting_a_layer_forgets_its_images_and_their_orphan_configs():
    index = CacheIndex(layers={D1: LayerEntry(1, 1.0), D2: LayerEntry(1, 1.0)},
                       images={"a": ImageEntry(D3, "sha256:" + "a" * 64, [D1], 1.0),
                               "b": ImageEntry(D3, "sha256:" + "b" * 64, [D1, D2], 1.0),
                               "c": ImageEntry(D3, "sha256:" + "a" * 64, [D2], 1.0)})
    assert index.forget_layers([D1]) == ["sha256:" + "b" * 64]
    assert set(index.images) == {"c"} and set(index.layers) == {D2}


def test_the_index_round_trips_and_drops_what_does_not_validate():
    index = CacheIndex(layers={D1: LayerEntry(5, 2.0, D2, "markers")},
                       images={"x": ImageEntry(D3, D2, [D1], 3.0)},
                       leases={"task-1": LeaseEntry("x", [D1], 4.0), "pull:ab": LeaseEntry("x", [D1], 4.0, True)})
    again = CacheIndex.from_json(json.loads(json.dumps(index.to_json())))
    assert again == index and again.leased() == {D1} and again.total_size() == 5
    hostile = {"version": 1, "layers": {"../../etc": {"size": 1, "used": 1}, D1: {"size": -5, "used": 1},
                                        D2: {"size": 1, "used": "yesterday"}, D3: {"size": 7, "used": 1}},
               "images": {"y": {"manifest": D1, "config": "nope", "layers": [D1], "used": 1}},
               "leases": {"z": {"layers": ["../x"], "since": 1}}}
    parsed = CacheIndex.from_json(hostile)
    assert list(parsed.layers) == [D3] and not parsed.images and not parsed.leases
    assert CacheIndex.from_json({"version": 99}) == CacheIndex() and CacheIndex.from_json([]) == CacheIndex()


def test_an_error_names_the_image_once():
    error = ImageError(errors.NOT_FOUND, "the manifest latest was not found")
    assert str(error) == "the manifest latest was not found"
    named = error.naming("busybox")
    assert str(named) == "image busybox: the manifest latest was not found" and named.kind == errors.NOT_FOUND
    assert named.naming("other") is named
    with pytest.raises(ValueError):
        ImageError("nonsense", "x")
