"""Where a benchmark's figures came from: the machine, the commit and the date, in the one
sentence every section of docs/benchmarks.md starts with (figures count only with it)."""

from __future__ import annotations

import os
import platform
import subprocess
from datetime import UTC, datetime
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def machine_commit_date() -> str:
    """``Machine: <arch>, <n> cores, <GiB> GiB, <os release>, Python <v>. Commit <c>. Date
    <UTC>.``"""
    commit = subprocess.run(["git", "-C", str(REPO), "rev-parse", "--short", "HEAD"],
                            capture_output=True, text=True, check=False).stdout.strip()
    memory = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30
    return (f"Machine: {platform.machine()}, {os.cpu_count()} cores, {memory:.0f} GiB, "
            f"{platform.system()} {platform.release()}, Python {platform.python_version()}. "
            f"Commit {commit or '?'}. Date {datetime.now(UTC):%Y-%m-%d %H:%M} UTC.")
