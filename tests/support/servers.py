"""A program a test runs beside the cluster (a Collector, a Prometheus), for a ``with`` block.

:class:`LocalServer` owns a temporary folder (its configuration, data and log), starts the
program in a session of its own with its output in ``<name>.log``, waits until
:meth:`LocalServer.ready` says so (an early exit raises, with the log), and at the end
stops it (SIGTERM, then SIGKILL after 15 s) and removes the folder.
"""

from __future__ import annotations

import shutil
import subprocess
import tempfile
from pathlib import Path
from types import TracebackType
from typing import Self

from tests.support.waiting import ConditionTimeout, wait_for


class LocalServer:
    """Subclasses give :meth:`command` and :meth:`ready`; see the module docstring."""

    name = "server"
    ready_timeout = 60.0

    def __init__(self) -> None:
        self.folder = Path(tempfile.mkdtemp(prefix=f"agentrun-{self.name}-"))
        self.process: subprocess.Popen[bytes] | None = None

    def command(self) -> list[str]:
        """The program and its arguments (its configuration written into the folder)."""
        raise NotImplementedError

    def ready(self) -> bool:
        raise NotImplementedError

    def log(self) -> str:
        path = self.folder / f"{self.name}.log"
        return path.read_text(errors="replace")[-3000:] if path.exists() else "(none)"

    def __enter__(self) -> Self:
        try:
            with open(self.folder / f"{self.name}.log", "ab") as log:
                self.process = subprocess.Popen(self.command(), stdout=log,
                                                stderr=subprocess.STDOUT,
                                                start_new_session=True)
            wait_for(self._ready, timeout=self.ready_timeout, message=f"{self.name} ready")
        except BaseException as failed:
            said = self.log()  # read before the folder goes
            self.__exit__(None, None, None)  # nothing outlives a start that failed
            if isinstance(failed, ConditionTimeout):
                raise ConditionTimeout(f"{failed}; its log: {said}") from None
            raise
        return self

    def _ready(self) -> bool:
        assert self.process is not None
        if self.process.poll() is not None:
            raise RuntimeError(f"{self.name} exited {self.process.returncode}: {self.log()}")
        return self.ready()

    def __exit__(self, kind: type[BaseException] | None, error: BaseException | None,
                 trace: TracebackType | None) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=15)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        shutil.rmtree(self.folder, ignore_errors=True)
