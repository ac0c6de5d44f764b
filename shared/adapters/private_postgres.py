"""A PostgreSQL instance of memoryd's own, from the machine's `initdb` and `pg_ctl` binaries.

The fault suite restarts PostgreSQL, which it may not do to the machine's server. This one
lives in a temporary directory, listens on a free loopback port with trust authentication,
and is removed when stopped. As root it runs under the ``postgres`` account (``initdb``
refuses root), its directory owned by that account.
"""

from __future__ import annotations

import contextlib
import os
import pwd
import shutil
import subprocess
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

from memoryd.shared.adapters.embedded_nats import free_port
from memoryd.shared.settings import StartupError

SERVICE_ACCOUNT = "postgres"


def _binary(name: str) -> str:
    found = shutil.which(name)
    if found is None:
        raise StartupError(
            f"{name} not found: install the PostgreSQL server binaries "
            "(Debian: apt-get install postgresql) to run a private instance"
        )
    return found


@dataclass
class PrivatePostgres:
    """A throwaway PostgreSQL server: ``start()``, ``restart()``, ``stop()``."""

    port: int = field(default_factory=free_port)
    directory: Path = field(default_factory=lambda: Path(tempfile.mkdtemp(prefix="memoryd-pg-")))

    @property
    def url(self) -> str:
        """Return the SQLAlchemy URL of its ``postgres`` database."""
        return f"postgresql+asyncpg://postgres@127.0.0.1:{self.port}/postgres"

    @property
    def _data(self) -> Path:
        return self.directory / "data"

    def _as_owner(self, command: list[str]) -> list[str]:
        if os.geteuid() == 0:  # initdb and postgres refuse to run as root
            return ["runuser", "-u", SERVICE_ACCOUNT, "--", *command]
        return command

    def _run(self, command: list[str]) -> None:
        done = subprocess.run(
            self._as_owner(command), capture_output=True, text=True, timeout=120, check=False
        )
        if done.returncode != 0:
            raise StartupError(f"{command[0]} failed: {(done.stderr or done.stdout).strip()}")

    def start(self) -> None:
        """Create the cluster on first start, then start the server and wait until it accepts."""
        if not self._data.exists():
            if os.geteuid() == 0:
                account = pwd.getpwnam(SERVICE_ACCOUNT)
                os.chown(self.directory, account.pw_uid, account.pw_gid)
            self._run([_binary("initdb"), "-D", str(self._data), "-U", "postgres", "--auth=trust"])
        self._ctl("start")

    def _ctl(self, action: str, mode: str = "fast") -> None:
        options = f"-p {self.port} -k {self.directory} -c listen_addresses=127.0.0.1"
        command = [_binary("pg_ctl"), "-D", str(self._data), "-w", "-t", "60"]
        if action == "stop":
            command += ["-m", mode]
        else:
            command += ["-o", options, "-l", str(self.directory / "postgres.log")]
        self._run([*command, action])

    def restart(self) -> None:
        """Stop the server at once (immediate: a crash, recovered on start) and start it."""
        self._ctl("stop", mode="immediate")
        self._ctl("start")

    def stop(self) -> None:
        """Stop the server and remove its files."""
        if self._data.exists():
            with contextlib.suppress(StartupError):  # already stopped
                self._ctl("stop")
        shutil.rmtree(self.directory, ignore_errors=True)
