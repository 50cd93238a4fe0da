"""The roles file (docs/roles.rst): parsing, validation with the
field named, inheritance of the preemption settings, defaults."""

import math
import pathlib
import tomllib

import pytest

from mesoslike.errors import MesoslikeError
from mesoslike.master.roles import (
    PreemptionConfig,
    RoleConfig,
    RolesConfig,
    RolesFileError,
    load_roles_file,
    parse_roles,
    quantities,
)

pytestmark = pytest.mark.timeout(30)

ROOT = pathlib.Path(__file__).resolve().parents[1]
DESIGN_EXAMPLE = """
[preemption]
enabled = true                 # off by default
wait_before_kill = 15.0        # seconds between the warning and the kill

[roles.analytics]              # nested roles: [roles."analytics/adhoc"]
weight = 2.0
guarantee = "cpus:4;mem:8192"  # quota guarantee
limit = "cpus:64;mem:131072"   # quota limit
min_share = "cpus:2;mem:2048"
fair_share_preemption_timeout = 30.0
min_share_preemption_timeout = 10.0
fair_share_preemption_threshold = 0.5
"""


def parse(text):
    return parse_roles(tomllib.loads(text))


def test_the_design_example():
    config = parse(DESIGN_EXAMPLE)
    assert config.preemption == PreemptionConfig(enabled=True, wait_before_kill=15.0)
    assert config.roles == {"analytics": RoleConfig(
        "analytics", weight=2.0, guarantee="cpus:4;mem:8192", limit="cpus:64;mem:131072",
        min_share="cpus:2;mem:2048", fair_share_preemption_timeout=30.0, min_share_preemption_timeout=10.0,
        fair_share_preemption_threshold=0.5)}
    assert config.effective("analytics") == config.roles["analytics"]


def test_an_empty_file_means_the_defaults():
    config = parse("")
    assert config == RolesConfig()
    assert config.preemption.enabled is False and config.preemption.wait_before_kill == 15.0
    assert config.roles == {} and config.implicit_roles == []
    default = config.effective("anything")
    assert default == RoleConfig("anything", weight=1.0, fair_share_preemption_timeout=math.inf,
                                 min_share_preemption_timeout=math.inf, fair_share_preemption_threshold=0.5)


def test_the_shipped_example_file_loads(tmp_path):
    config = load_roles_file(ROOT / "conf" / "roles.toml")
    assert config.path == str(ROOT / "conf" / "roles.toml")
    assert config.roles and config.preemption.enabled is False


def test_nested_roles_inherit_the_timeouts_and_threshold_from_the_nearest_ancestor_setting_them():
    config = parse("""
        [preemption]
        min_share_preemption_timeout = 60
        [roles.eng]
        weight = 3
        guarantee = "cpus:8"
        fair_share_preemption_timeout = 30
        fair_share_preemption_threshold = 0.8
        [roles."eng/prod"]
        fair_share_preemption_threshold = 0.9
        [roles."eng/prod/web"]
        min_share_preemption_timeout = 5
    """)
    web = config.effective("eng/prod/web")
    assert web.fair_share_preemption_timeout == 30.0        # from eng
    assert web.fair_share_preemption_threshold == 0.9       # from eng/prod, the nearest
    assert web.min_share_preemption_timeout == 5.0          # its own
    prod = config.effective("eng/prod")
    assert prod.min_share_preemption_timeout == 60.0        # from [preemption]
    # weight, quota and min share are not inherited
    assert prod.weight == 1.0 and prod.guarantee is None
    # a role that is not listed inherits too, and the file's own values stay as written
    assert config.effective("eng/batch").fair_share_preemption_threshold == 0.8
    assert config.roles["eng/prod"].fair_share_preemption_timeout is None


def test_parents_that_are_not_listed_exist_implicitly():
    config = parse("""
        [roles."a/b/c"]
        weight = 2
        [roles."x/y"]
    """)
    assert config.implicit_roles == ["a", "a/b", "x"]
    assert "a" not in config.roles and "a/b" not in config.roles
    assert config.effective("a").weight == 1.0
    assert config.to_json()["implicit_roles"] == ["a", "a/b", "x"]


def test_inf_or_absent_timeouts_mean_never_and_zero_is_allowed():
    config = parse("""
        [roles.a]
        fair_share_preemption_timeout = inf
        min_share_preemption_timeout = 0
        fair_share_preemption_threshold = 0
        [roles.b]
        fair_share_preemption_threshold = 1
    """)
    assert config.effective("a").fair_share_preemption_timeout == math.inf
    assert config.effective("a").min_share_preemption_timeout == 0.0
    assert config.effective("a").fair_share_preemption_threshold == 0.0
    assert config.effective("b").min_share_preemption_timeout == math.inf
    # /state shows never as null (JSON has no infinity)
    assert config.to_json()["roles"]["a"]["fair_share_preemption_timeout"] is None


def test_to_json_shows_every_setting():
    document = parse(DESIGN_EXAMPLE).to_json()
    assert document["preemption"]["enabled"] is True
    assert document["roles"]["analytics"] == {
        "weight": 2.0, "guarantee": "cpus:4;mem:8192", "limit": "cpus:64;mem:131072", "min_share": "cpus:2;mem:2048",
        "fair_share_preemption_timeout": 30.0, "min_share_preemption_timeout": 10.0,
        "fair_share_preemption_threshold": 0.5}


def test_equal_files_give_equal_configs_and_quantities_keep_explicit_zeros():
    assert parse(DESIGN_EXAMPLE) == parse(DESIGN_EXAMPLE)
    assert parse(DESIGN_EXAMPLE) != parse(DESIGN_EXAMPLE.replace("weight = 2.0", "weight = 3.0"))
    assert quantities("cpus:4;gpus:0") == {"cpus": 4000, "gpus": 0}
    assert quantities(None) == {}


@pytest.mark.parametrize("text, field, fragment", [
    ('[roles."a/b"]\nweight = -1', 'roles."a/b".weight', "must be a number > 0, got -1"),
    ("[roles.a]\nweight = 0", "roles.a.weight", "> 0"),
    ("[roles.a]\nweight = nan", "roles.a.weight", "> 0"),
    ("[roles.a]\nweight = inf", "roles.a.weight", "> 0"),
    ('[roles.a]\nweight = "2"', "roles.a.weight", "must be a number"),
    ("[roles.a]\nweight = true", "roles.a.weight", "must be a number"),
    ("[roles.a]\nbogus = 1", "roles.a.bogus", "unknown key"),
    ("[roles.a.b]\nweight = 1", "roles.a.b", '[roles."a/b"]'),
    ("[roles.a]\nguarantee = 4", "roles.a.guarantee", "resource string"),
    ('[roles.a]\nguarantee = "cpus:x"', "roles.a.guarantee", "bad resources"),
    ('[roles.a]\nlimit = "cpus:-1"', "roles.a.limit", "bad resources"),
    ('[roles.a]\nmin_share = "ports:[1-2]"', "roles.a.min_share", "scalar"),
    ('[roles.a]\nguarantee = "cpus:8"\nlimit = "cpus:4"', "roles.a.guarantee", "exceeds its limit for cpus: 8 > 4"),
    ('[roles.a]\nmin_share = "mem:8"\nlimit = "mem:4"', "roles.a.min_share", "exceeds its limit"),
    ('[roles.a]\nlimit = "cpus:4"\n[roles."a/b"]\nguarantee = "cpus:8"', 'roles."a/b".guarantee',
     "the limit of its parent role 'a'"),
    ('[roles.a]\nlimit = "cpus:4"\n[roles."a/b/c"]\nguarantee = "cpus:8"', 'roles."a/b/c".guarantee',
     "the limit of its ancestor role 'a'"),
    ('[roles.a]\nguarantee = "cpus:4"\n[roles."a/b"]\nguarantee = "cpus:3"\n[roles."a/c"]\nguarantee = "cpus:2"',
     "roles.a.guarantee", "sub-roles add up to cpus:5"),
    ("[roles.a]\nfair_share_preemption_timeout = -1", "roles.a.fair_share_preemption_timeout", ">= 0"),
    ("[roles.a]\nmin_share_preemption_timeout = nan", "roles.a.min_share_preemption_timeout", ">= 0"),
    ('[roles.a]\nmin_share_preemption_timeout = "1"', "roles.a.min_share_preemption_timeout", "must be a number"),
    ("[roles.a]\nfair_share_preemption_threshold = 1.5", "roles.a.fair_share_preemption_threshold",
     "between 0 and 1"),
    ("[roles.a]\nfair_share_preemption_threshold = -0.1", "roles.a.fair_share_preemption_threshold",
     "between 0 and 1"),
    ('[roles."a b"]', 'roles."a b"', "not a valid role name"),
    ('[roles."a//b"]', 'roles."a//b"', "not a valid role name"),
    ('[roles."-a"]', "roles.-a", "not a valid role name"),
    ('[roles."a/.."]', 'roles."a/.."', "not a valid role name"),
    ("roles = 1", "roles", "must be a table"),
    ("[roles]\na = 1", "roles.a", "must be a table"),
    ("[preemption]\nenabled = 1", "preemption.enabled", "true or false"),
    ("[preemption]\nwait_before_kill = -1", "preemption.wait_before_kill", ">= 0"),
    ("[preemption]\nwait_before_kill = inf", "preemption.wait_before_kill", "finite"),
    ("[preemption]\nwait = 1", "preemption.wait", "unknown key"),
    ("[preemption]\nfair_share_preemption_threshold = 2", "preemption.fair_share_preemption_threshold",
     "between 0 and 1"),
    ("[queues.a]\nweight = 1", "queues", "unknown key (known: preemption, roles)"),
])
def test_every_error_names_its_field(text, field, fragment):
    with pytest.raises(RolesFileError) as caught:
        parse(text)
    assert caught.value.field == field
    assert str(caught.value).startswith(f"{field}: ")
    assert fragment in str(caught.value)
    assert isinstance(caught.value, MesoslikeError) and isinstance(caught.value, ValueError)


def test_the_example_error_message_of_the_brief():
    with pytest.raises(RolesFileError, match=r'^roles\."a/b"\.weight: must be a number > 0, got -1$'):
        parse('[roles."a/b"]\nweight = -1')


def test_file_errors_name_the_file_and_the_field(tmp_path):
    path = tmp_path / "roles.toml"
    with pytest.raises(RolesFileError, match="no such file"):
        load_roles_file(path)
    path.write_text("[roles.a\n")
    with pytest.raises(RolesFileError, match="not valid TOML"):
        load_roles_file(path)
    path.write_text("[roles.a]\nweight = -2\n")
    with pytest.raises(RolesFileError) as caught:
        load_roles_file(path)
    assert str(caught.value) == f"{path}: roles.a.weight: must be a number > 0, got -2"
    assert caught.value.field == "roles.a.weight" and caught.value.path == str(path)


def test_a_guarantee_within_the_limits_and_the_parents_guarantee_is_fine():
    config = parse("""
        [roles.a]
        guarantee = "cpus:4;mem:1024"
        limit = "cpus:8;gpus:0"
        [roles."a/b"]
        guarantee = "cpus:2;mem:1024"
        [roles."a/c"]
        guarantee = "cpus:2"
        limit = "cpus:1000"
    """)
    assert config.roles["a"].limit == "cpus:8;gpus:0"     # kept as written: gpus:0 means none
    assert config.effective("a/c").limit == "cpus:1000"   # a child's limit may exceed its parent's


def test_the_default_role_may_be_configured():
    assert parse('[roles."*"]\nweight = 0.5').effective("*").weight == 0.5


def test_effective_refuses_an_invalid_role():
    with pytest.raises(MesoslikeError):
        parse("").effective("a//b")


def test_the_model_checks_what_is_built_in_python_as_the_parser_does():
    with pytest.raises(RolesFileError) as caught:
        RoleConfig("a", weight=0.0)
    assert caught.value.field == "weight" and "must be a number > 0, got 0" in str(caught.value)
    with pytest.raises(RolesFileError, match="^limit: bad resources"):
        RoleConfig("a", limit="cpus:x")
    with pytest.raises(RolesFileError, match="^guarantee: exceeds its limit"):
        RoleConfig("a", guarantee="cpus:8", limit="cpus:4")
    with pytest.raises(RolesFileError, match="^name: not a valid role name"):
        RoleConfig("a//b")
    with pytest.raises(RolesFileError, match="^wait_before_kill: must be a finite"):
        PreemptionConfig(True, math.inf)
    with pytest.raises(RolesFileError, match=r'^roles\."a/b"\.guarantee: exceeds the limit of its parent'):
        RolesConfig(roles={"a": RoleConfig("a", limit="cpus:4"), "a/b": RoleConfig("a/b", guarantee="cpus:8")})
    with pytest.raises(RolesFileError, match="^roles.a: holds the settings of role 'b'"):
        RolesConfig(roles={"a": RoleConfig("b")})
    assert RolesConfig(roles={"a": RoleConfig("a", weight=2.0)}) == parse("[roles.a]\nweight = 2")
