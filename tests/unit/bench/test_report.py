"""docs/benchmarks.md's sections: each command replaces its own and keeps the others."""

from __future__ import annotations

from pathlib import Path

import pytest

from bench.common.report import TITLE, write_section


def test_a_new_file_gets_the_title_and_the_section(tmp_path: Path) -> None:
    path = tmp_path / "b.md"
    write_section(path, heading="## Faults", text="## Faults\n\nfigures\n")
    assert path.read_text() == f"{TITLE}\n\n## Faults\n\nfigures\n"


def test_a_section_is_replaced_and_the_others_kept(tmp_path: Path) -> None:
    path = tmp_path / "b.md"
    path.write_text("# Benchmarks\n\n## Control loop\n\nold loop\n\n## Faults\n\nold faults\n")
    write_section(path, heading="## Control loop", text="## Control loop\n\nnew loop\n")
    assert path.read_text() == ("# Benchmarks\n\n## Control loop\n\nnew loop\n\n## Faults\n\n"
                                "old faults\n")
    write_section(path, heading="## Faults", text="## Faults\n\nnew faults\n")
    assert path.read_text().endswith("## Faults\n\nnew faults\n")
    assert "new loop" in path.read_text() and "old" not in path.read_text()


def test_an_absent_section_is_appended(tmp_path: Path) -> None:
    path = tmp_path / "b.md"
    path.write_text("# Benchmarks\n\n## Control loop\n\nloop\n")
    write_section(path, heading="## Latency", text="## Latency\n\np99\n")
    assert path.read_text() == "# Benchmarks\n\n## Control loop\n\nloop\n\n## Latency\n\np99\n"


def test_a_text_that_does_not_start_with_its_heading_is_refused(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="starts with its '## ' heading"):
        write_section(tmp_path / "b.md", heading="## Faults", text="figures")
    assert not (tmp_path / "b.md").exists()
