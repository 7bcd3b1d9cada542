"""benchmarks/reliability.py writes its report: the committed figures rendered again, with the security section."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

from benchmarks import reliability

RESULTS = Path(__file__).resolve().parents[2] / "benchmarks" / "results"


def test_the_report_is_written_with_the_security_section_beside_it(tmp_path: Path) -> None:
    shutil.copy(RESULTS / "security.json", tmp_path / "security.json")
    report = json.loads((RESULTS / "reliability.json").read_text())
    assert reliability._write(tmp_path, report) == 0
    text = (tmp_path / "reliability.md").read_text()
    assert text.startswith("# Reliability") and "## Concurrency stress" in text
    assert "\n## Security\n" in text  # the section benchmarks/security.py wrote, kept
