"""The credentials file a secured master reads (``--credentials FILE``,
docs/security.rst): its principals — each a CURVE public key (a certificate
path, relative to the file, or the z85 key), the kinds of peer it may be and,
for operators, an HTTP bearer token — and its ACLs. Also the key options
every process takes (``--key``, ``--master-key``). Public (docs/framework-api.rst):
a framework's own server (the Fuxi service's job port) reads the same file
and checks the same ACLs (:class:`Credentials`, :class:`Refused`)."""

from __future__ import annotations

import json
import os
from typing import TYPE_CHECKING, Any

import msgspec

from mesoslike.errors import ConfigError
from mesoslike.transport import CurveKeys, check_secret_file_mode, load_public_key, new_certificate

if TYPE_CHECKING:   # loaded on first use (__getattr__ below): a client (`mesoslike run`) reads no ACLs
    from mesoslike.acl import Credentials, Refused

    _CredentialsField = Credentials
else:
    # the type of LocalKeys.credentials where its hints are resolved at run time: a Struct's signature
    # (inspect.signature, help()) resolves them in this module's globals, where Credentials is not until
    # first used (a NameError); naming it must not load the ACLs
    _CredentialsField = object

__all__ = ["Credentials", "Refused", "load_credentials", "parse_credentials", "load_keys", "load_master_key",
           "client_keys",
           "KEY_ENV", "MASTER_KEY_ENV", "TOKEN_ENV", "FUXI_KEY_ENV", "FUXI_CREDENTIALS_ENV", "LocalKeys",
           "MESOS_PRINCIPAL_ENV", "MESOS_SECRET_ENV", "MESOS_CREDENTIAL_FILE",
           "local_keys"]



def __getattr__(name: str) -> object:
    """:class:`Credentials` and :class:`Refused` (of :mod:`mesoslike.acl`),
    imported on first use: the ACLs' attrs classes and ``hmac`` are no part
    of a client's start."""
    if name in ("Credentials", "Refused"):
        from mesoslike import acl

        value = getattr(acl, name)
        globals()[name] = value
        return value
    raise AttributeError(f"module 'mesoslike.credentials' has no attribute {name!r}")


#: where a client finds its secret certificate, the master's public one, and an operator token
KEY_ENV, MASTER_KEY_ENV, TOKEN_ENV = "MESOSLIKE_KEY", "MESOSLIKE_MASTER_KEY", "MESOSLIKE_TOKEN"
#: the Fuxi service's public certificate (for its job clients) and the credentials it serves them with
FUXI_KEY_ENV, FUXI_CREDENTIALS_ENV = "MESOSLIKE_FUXI_KEY", "MESOSLIKE_FUXI_CREDENTIALS"
#: a framework's Mesos credential, as Mesos's example frameworks read it from their environment
MESOS_PRINCIPAL_ENV, MESOS_SECRET_ENV = "MESOS_EXAMPLE_PRINCIPAL", "MESOS_EXAMPLE_SECRET"
#: ``mesoslike local``'s file of the client's Mesos credential (Mesos's --credential JSON format)
MESOS_CREDENTIAL_FILE = "mesos.credential"


def load_credentials(path: str) -> Credentials:
    """Read and check the credentials file ``path``; ConfigError naming the
    file and the problem. A file holding tokens must be mode 0600."""
    import tomllib   # here, not at the top: a client (`mesoslike run`) reads no credentials file

    try:
        with open(path, "rb") as file:
            document = tomllib.load(file)
    except OSError as exc:
        raise ConfigError(f"cannot read the credentials file {path}: {exc.strerror}") from None
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"credentials file {path}: {exc}") from None
    try:
        credentials = parse_credentials(document, os.path.dirname(os.path.abspath(path)))
    except ConfigError as exc:
        raise ConfigError(f"credentials file {path}: {exc}") from None
    if any(p.token for p in credentials.principals.values()):
        check_secret_file_mode(path)
    return credentials


def parse_credentials(document: dict, base: str = ".") -> Credentials:
    """The :class:`~mesoslike.acl.Credentials` of a parsed document; key
    paths are relative to ``base``."""
    from mesoslike.acl import KINDS, Acls, Credentials, Principal

    unknown = set(document) - {"principals", "acls"}
    if unknown:
        raise ConfigError(f"unknown table(s) {', '.join(sorted(unknown))} (expected principals, acls)")
    tables = document.get("principals", {})
    if not isinstance(tables, dict) or not tables:
        raise ConfigError("no [principals.NAME] tables: a secured master lets nobody in without them")
    principals = {}
    for name, table in tables.items():
        if not isinstance(table, dict):
            raise ConfigError(f"principals.{name}: expected a table")
        bad = set(table) - {"key", "kinds", "token", "user"}
        if bad:
            raise ConfigError(f"principals.{name}: unknown key(s) {', '.join(sorted(bad))}")
        key, kinds, token, user = table.get("key"), table.get("kinds", []), table.get("token", ""), table.get("user", "")
        if not isinstance(key, str) or not key:
            raise ConfigError(f"principals.{name}: 'key' (a certificate path or z85 public key) is required")
        if not isinstance(kinds, list) or not kinds or not set(kinds) <= set(KINDS):
            raise ConfigError(f"principals.{name}: 'kinds' must list some of {', '.join(KINDS)}")
        if not isinstance(token, str):
            raise ConfigError(f"principals.{name}: 'token' must be a string")
        if not isinstance(user, str) or not (user == "" or 0 < len(user) <= 64 and user.isprintable()
                                             and not set(user) & set("/:\0 ")):
            raise ConfigError(f"principals.{name}: 'user' must be a unix user name")
        principals[name] = Principal(name, load_public_key(key, base), frozenset(kinds), token, user)
    return Credentials(principals, Acls.parse(document.get("acls")))


def load_keys(path: str | None) -> CurveKeys | None:
    """``--key FILE``: a process's own secret certificate (mode 0600)."""
    return CurveKeys.load(path) if path else None


def load_master_key(path: str | None) -> bytes | None:
    """``--master-key FILE``: the master's public certificate (or z85 key)."""
    return load_public_key(path) if path else None


def client_keys(key: str | None, master_key: str | None, *, server_env: str = MASTER_KEY_ENV,
                server_option: str = "--master-key",
                server: str = "the master") -> tuple[CurveKeys | None, bytes | None]:
    """What a client connects with: its secret certificate ``key`` and the
    master's public ``master_key`` — each by default from the environment
    (:data:`KEY_ENV`, :data:`MASTER_KEY_ENV`). A key without the master's
    is refused (it would talk to any master); the master's alone encrypts
    with a one-time key (a master with credentials refuses it). The same for
    another server (the Fuxi service: ``server_env`` :data:`FUXI_KEY_ENV`,
    ``server_option`` ``--fuxi-key``)."""
    key = key or os.environ.get(KEY_ENV) or None
    master_key = master_key or os.environ.get(server_env) or None
    if key and not master_key:
        raise ConfigError(f"--key needs {server_option} (or {server_env}): {server}'s public certificate")
    return load_keys(key), load_master_key(master_key)


class LocalKeys(msgspec.Struct, frozen=True):
    """What ``mesoslike local`` made under ``<work-dir>/keys`` (see
    :func:`local_keys`): the master's pair, one pair per agent, the client's
    pair, the credentials file and the operator token."""

    directory: str
    master: CurveKeys
    agents: tuple[CurveKeys, ...]
    client_secret: str          #: path of the client's secret certificate (MESOSLIKE_KEY)
    master_public: str          #: path of the master's public certificate (MESOSLIKE_MASTER_KEY)
    credentials: _CredentialsField   # a Credentials (see _CredentialsField)
    #: the operator's token: never in a repr (below)
    token: str
    #: the ``client`` principal's HTTP secret (Mesos's v1 APIs: pymesos's ``principal="client", secret=...``);
    #: never in a repr
    client_token: str = ""

    def __repr__(self) -> str:
        # a Struct's repr shows every field: the two tokens are left out (they are secrets, and a repr ends
        # up in logs), as the attrs class's ``repr=False`` left them out
        return f"LocalKeys({', '.join(f'{name}={value!r}' for name, value in self.__rich_repr__())})"

    def __rich_repr__(self) -> Any:
        for name in ("directory", "master", "agents", "client_secret", "master_public", "credentials"):
            yield name, getattr(self, name)

    def client_environment(self) -> dict[str, str]:
        """What a client of the cluster needs in its environment. A Fuxi
        service run as the ``client`` principal serves its job clients with
        the same key pair and credentials (docs/security.rst "The Fuxi
        service"): its public certificate is the client's."""
        return {KEY_ENV: self.client_secret, MASTER_KEY_ENV: self.master_public, TOKEN_ENV: self.token,
                FUXI_KEY_ENV: self.client_secret[:-len("_secret")],
                FUXI_CREDENTIALS_ENV: os.path.join(self.directory, "credentials.toml"),
                # Mesos's example frameworks read these (and pass them to their drivers)
                MESOS_PRINCIPAL_ENV: "client", MESOS_SECRET_ENV: self.client_token}

    @property
    def mesos_credential(self) -> str:
        """The file with the client's Mesos credential, Mesos's JSON ``{"principal": ..., "secret": ...}``."""
        return os.path.join(self.directory, MESOS_CREDENTIAL_FILE)


def local_keys(directory: str, agents: int, user: str) -> LocalKeys:
    """Keys and credentials of a local cluster under ``directory``, made
    where missing (kept ones are used again): ``master``, ``node-<i>``
    agents, a ``client`` principal that may register frameworks in any role
    and run tasks as ``user`` (named explicitly, so root too when the
    invoking user is root), and an ``operator`` with a bearer token."""
    names = ["master", "client", "operator", *(f"node-{i}" for i in range(agents))]
    os.makedirs(directory, mode=0o700, exist_ok=True)
    for name in names:
        if not os.path.exists(os.path.join(directory, f"{name}.key_secret")):
            new_certificate(directory, name)
    token = _local_token(os.path.join(directory, "operator.token"))
    # the client's HTTP secret: what a Mesos v1 client (pymesos) gives as principal "client"'s secret
    client_token = _local_token(os.path.join(directory, "client.token"))
    _write_private(os.path.join(directory, MESOS_CREDENTIAL_FILE),
                   json.dumps({"principal": "client", "secret": client_token}) + "\n")
    agent_names = [f"node-{i}" for i in range(agents)]
    lines = ["# made by mesoslike local: its principals and ACLs (docs/security.rst)"]
    for name, kinds in [*((agent, ["agent"]) for agent in agent_names), ("client", ["framework"]),
                        ("operator", ["operator"])]:
        lines += [f"[principals.{json.dumps(name)}]", f"key = {json.dumps(name + '.key')}",
                  f"kinds = {json.dumps(kinds)}", *([f"token = {json.dumps(token)}"] if name == "operator" else []),
                  *([f"token = {json.dumps(client_token)}"] if name == "client" else []),
                  # the Fuxi service runs the client's jobs' workers as this user (docs/security.rst)
                  *([f"user = {json.dumps(user)}"] if name == "client" else [])]
    lines += ["[[acls.register_agents]]", f"principals = {json.dumps(agent_names)}",
              "[[acls.register_frameworks]]", 'principals = ["client"]', 'roles = ["*"]',
              "[[acls.run_tasks]]", 'principals = ["client"]', f"users = {json.dumps([user])}",
              "[[acls.update_quota]]", 'principals = ["operator"]',
              "[[acls.update_weights]]", 'principals = ["operator"]']
    credentials_file = os.path.join(directory, "credentials.toml")
    _write_private(credentials_file, "\n".join(lines) + "\n")
    return LocalKeys(directory, CurveKeys.load(os.path.join(directory, "master.key_secret")),
                     tuple(CurveKeys.load(os.path.join(directory, f"{name}.key_secret")) for name in agent_names),
                     os.path.join(directory, "client.key_secret"), os.path.join(directory, "master.key"),
                     load_credentials(credentials_file), token, client_token)


def _local_token(path: str) -> str:
    """The token kept in ``path`` (0600), made if missing."""
    if not os.path.exists(path):
        descriptor = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(descriptor, "w") as file:
            import secrets   # here: its hashlib (OpenSSL) is ~2 ms of a client's start that uses none

            file.write(secrets.token_urlsafe(24) + "\n")
    check_secret_file_mode(path)
    with open(path) as file:
        return file.read().strip()


def _write_private(path: str, text: str) -> None:
    descriptor = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(descriptor, "w") as file:
        file.write(text)
    os.chmod(path, 0o600)
