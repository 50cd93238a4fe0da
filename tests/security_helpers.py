"""A secured cluster's keys and credentials for tests (issue 13): one
certificate pair per principal under ``<dir>/keys`` and a credentials file
in the issue's shape."""

from __future__ import annotations

import getpass
import os
import secrets
from pathlib import Path

from mesoslike.transport import CurveKeys, load_certificate, new_certificate

#: principal -> its kinds
PRINCIPALS = {"master": (), "agent1": ("agent",), "agent2": ("agent",), "fwA": ("framework",),
              "fwB": ("framework",), "ops": ("operator",)}


class SecuredKeys:
    """Keys of every principal of :data:`PRINCIPALS`, the credentials file
    (frameworks may run tasks as ``nobody`` and the test's own user) and the
    operator's token."""

    def __init__(self, directory: Path, users: tuple[str, ...] = ("nobody",), framework_tokens: bool = False,
                 acls: str = "") -> None:
        self.dir = directory / "keys"
        for name in PRINCIPALS:
            new_certificate(str(self.dir), name)
        self.token = secrets.token_hex(16)
        #: the frameworks' HTTP tokens: their secret for Mesos's v1 scheduler API (HTTP Basic,
        #: docs/mesos-api.rst), and what they read their sandboxes with on an agent with credentials
        self.framework_tokens = {name: secrets.token_hex(16) for name, kinds in PRINCIPALS.items()
                                 if "framework" in kinds}
        self.tokens = self.framework_tokens   # the name the tenant tests use
        self.users = tuple(dict.fromkeys((*users, getpass.getuser())))
        self.credentials = directory / "credentials.toml"
        lines = []
        for name, kinds in PRINCIPALS.items():
            if kinds:
                lines += [f"[principals.{name}]", f'key = "keys/{name}.key"', f"kinds = {list(kinds)!r}".replace("'", '"')]
                if name == "ops":
                    lines.append(f'token = "{self.token}"')
                elif name in self.framework_tokens:
                    lines.append(f'token = "{self.framework_tokens[name]}"')
        lines += ["[[acls.register_agents]]", 'principals = ["agent1", "agent2"]',
                  "[[acls.register_frameworks]]", 'principals = ["fwA", "fwB"]', 'roles = ["*"]',
                  "[[acls.run_tasks]]", 'principals = ["fwA", "fwB"]',
                  "users = [" + ", ".join(f'"{u}"' for u in self.users) + "]",
                  "[[acls.update_quota]]", 'principals = ["ops"]',
                  "[[acls.update_weights]]", 'principals = ["ops"]']
        self.credentials.write_text("\n".join(lines) + "\n" + acls)
        os.chmod(self.credentials, 0o600)

    def secret(self, name: str) -> str:
        return str(self.dir / f"{name}.key_secret")

    def public(self, name: str) -> str:
        return str(self.dir / f"{name}.key")

    def keys(self, name: str) -> CurveKeys:
        return CurveKeys.load(self.secret(name))

    @property
    def master_public(self) -> bytes:
        return load_certificate(self.public("master"))[0]
