"""Issue 13 §2, §4: the credentials file and its ACLs (the contract's shape)."""

import inspect
import os

import pytest

from mesoslike.acl import Refused
from mesoslike.credentials import LocalKeys, load_credentials
from mesoslike.errors import ConfigError
from mesoslike.transport import CurveKeys, load_certificate, new_certificate

pytestmark = pytest.mark.timeout(30)

ISSUE_EXAMPLE = '''
[principals.agent1]
key = "keys/agent1.key"
kinds = ["agent"]
[principals.fwA]
key = "keys/fwA.key"
kinds = ["framework"]
[principals.ops]
key = "keys/ops.key"
kinds = ["operator"]
token = "s3cret"
[[acls.register_agents]]
principals = ["agent1"]
[[acls.register_frameworks]]
principals = ["fwA"]
roles = ["*"]
[[acls.run_tasks]]
principals = ["fwA"]
users = ["nobody"]
[[acls.update_quota]]
principals = ["ops"]
'''


@pytest.fixture
def credentials_file(tmp_path):
    for name in ("agent1", "fwA", "ops"):
        new_certificate(str(tmp_path / "keys"), name)
    path = tmp_path / "credentials.toml"
    path.write_text(ISSUE_EXAMPLE)
    os.chmod(path, 0o600)
    return path


def test_the_issue_example_loads_and_its_acls_hold(credentials_file, tmp_path):
    credentials = load_credentials(str(credentials_file))
    agent_key = load_certificate(str(tmp_path / "keys" / "agent1.key"))[0]
    assert credentials.principal_of_key()[agent_key] == "agent1"
    assert credentials.principal_of_token("s3cret") == "ops" and credentials.principal_of_token("nope") is None
    assert credentials.allows("register_agents", "agent1")
    assert not credentials.allows("register_agents", "fwA")
    assert credentials.allows("register_frameworks", "fwA", "any-role")
    assert not credentials.allows("register_frameworks", "agent1", "*")
    assert credentials.allows("run_tasks", "fwA", "nobody")
    assert not credentials.allows("run_tasks", "fwA", "root")
    assert credentials.allows("update_quota", "ops") and not credentials.allows("update_quota", "fwA")
    assert credentials.allows("update_weights", "ops")            # no rule: operators may
    assert not credentials.allows("update_weights", "fwA")
    with pytest.raises(Refused, match="principal fwA lacks the run_tasks permission .*user 'root'") as refused:
        credentials.check("run_tasks", "fwA", "root")
    assert refused.value.permission == "run_tasks"
    assert not credentials.allows("register_frameworks", None, "*")


def test_root_needs_a_rule_naming_it(credentials_file):
    text = ISSUE_EXAMPLE.replace('users = ["nobody"]', 'users = ["*"]')
    credentials_file.write_text(text)
    credentials = load_credentials(str(credentials_file))
    assert credentials.allows("run_tasks", "fwA", "alice") and not credentials.allows("run_tasks", "fwA", "root")
    credentials_file.write_text(text.replace('users = ["*"]', 'users = ["*", "root"]'))
    assert load_credentials(str(credentials_file)).allows("run_tasks", "fwA", "root")


def test_root_is_never_granted_by_a_wildcard_nor_by_a_rule_without_users(credentials_file):
    """Issue 13 §5: a task runs as root only when a run_tasks rule names root."""
    without_users = ISSUE_EXAMPLE.replace('users = ["nobody"]\n', "")
    credentials_file.write_text(without_users)
    credentials = load_credentials(str(credentials_file))
    assert credentials.allows("run_tasks", "fwA", "alice")           # a rule without users: any user...
    assert not credentials.allows("run_tasks", "fwA", "root")        # ...but root
    with pytest.raises(Refused, match="principal fwA lacks the run_tasks permission .*user 'root'"):
        credentials.check("run_tasks", "fwA", "root")
    anyone = ISSUE_EXAMPLE.replace('principals = ["fwA"]\nusers = ["nobody"]', 'principals = ["*"]\nusers = ["*"]')
    credentials_file.write_text(anyone)
    credentials = load_credentials(str(credentials_file))
    assert credentials.allows("run_tasks", "fwA", "nobody") and not credentials.allows("run_tasks", "fwA", "root")
    credentials_file.write_text(anyone.replace('users = ["*"]', 'users = ["root"]'))
    credentials = load_credentials(str(credentials_file))
    assert credentials.allows("run_tasks", "fwA", "root") and not credentials.allows("run_tasks", "fwA", "nobody")
    assert not credentials.allows("run_tasks", None, "root")        # "*" is any principal, never an anonymous one


def test_without_run_tasks_rules_frameworks_run_as_any_user_but_root(credentials_file):
    credentials_file.write_text(ISSUE_EXAMPLE.replace('[[acls.run_tasks]]\nprincipals = ["fwA"]\nusers = ["nobody"]\n',
                                                      ""))
    credentials = load_credentials(str(credentials_file))
    assert credentials.allows("run_tasks", "fwA", "alice") and not credentials.allows("run_tasks", "fwA", "root")
    assert not credentials.allows("run_tasks", "ops", "alice")      # not a framework principal


def test_a_role_named_root_is_an_ordinary_role(credentials_file):
    # the root rule is about unix users: roles = ["*"] grants every role
    assert load_credentials(str(credentials_file)).allows("register_frameworks", "fwA", "root")


@pytest.mark.parametrize("change, message", [
    (('kinds = ["agent"]', 'kinds = ["king"]'), "'kinds' must list"),
    (('principals = ["agent1"]', 'principals = ["ghost"]'), "unknown principal"),
    (("[[acls.update_quota]]", "[[acls.take_over]]"), "unknown action"),
    (('key = "keys/fwA.key"', 'key = "keys/none.key"'), "cannot read the certificate"),
])
def test_a_bad_file_is_refused_naming_the_problem(credentials_file, change, message):
    credentials_file.write_text(ISSUE_EXAMPLE.replace(*change))
    with pytest.raises(ConfigError, match=message):
        load_credentials(str(credentials_file))


def test_a_file_with_tokens_must_be_private(credentials_file):
    os.chmod(credentials_file, 0o644)
    with pytest.raises(ConfigError, match="must be 0600"):
        load_credentials(str(credentials_file))


def test_local_keys_never_show_their_tokens():
    pair = CurveKeys.generate()
    keys = LocalKeys("/keys", pair, (pair,), "/keys/client.key_secret", "/keys/master.key", "CREDENTIALS",
                     "operator-s3cret", "client-s3cret")
    shown = repr(keys) + repr(list(keys.__rich_repr__()))
    assert "s3cret" not in shown and "CREDENTIALS" in shown and repr(keys).startswith("LocalKeys(directory='/keys', ")
    assert keys.client_environment()["MESOSLIKE_TOKEN"] == "operator-s3cret"
    # the tokens are part of its equality, as any field
    assert keys == LocalKeys(*(getattr(keys, name) for name in LocalKeys.__struct_fields__))
    assert keys != LocalKeys("/keys", pair, (pair,), "/keys/client.key_secret", "/keys/master.key", "CREDENTIALS",
                             "operator-s3cret")
    with pytest.raises(AttributeError):
        keys.token = "other"   # type: ignore[misc]
    # its signature (help(), the docs) resolves without the ACLs' module loaded
    assert list(inspect.signature(LocalKeys).parameters)[-2:] == ["token", "client_token"]
