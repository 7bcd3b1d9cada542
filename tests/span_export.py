"""Spans of child processes, exported to files: a `sitecustomize` hook that sets an OpenTelemetry SDK provider in
every Python process started with it on PYTHONPATH (a gateway, its upstreams), and a reader of what they wrote."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest

SITECUSTOMIZE = """
import os
from opentelemetry import trace
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import ConsoleSpanExporter, SimpleSpanProcessor

_out = open(os.path.join(os.environ["TRACE_DIR"], f"spans-{os.getpid()}.jsonl"), "a", buffering=1)
_provider = TracerProvider()
_exporter = ConsoleSpanExporter(out=_out, formatter=lambda span: span.to_json(indent=None) + "\\n")
_provider.add_span_processor(SimpleSpanProcessor(_exporter))
trace.set_tracer_provider(_provider)
"""


def tracing_children(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[Path, Path]:
    """(the hook's folder, the spans' folder): processes started from now on (PYTHONPATH and TRACE_DIR set through
    `monkeypatch`) export their spans into the second."""
    hook = tmp_path / "hook"
    hook.mkdir()
    (hook / "sitecustomize.py").write_text(SITECUSTOMIZE)
    spans = tmp_path / "spans"
    spans.mkdir()
    monkeypatch.setenv("TRACE_DIR", str(spans))
    monkeypatch.setenv("PYTHONPATH", f"{hook}{os.pathsep}{os.environ.get('PYTHONPATH', '')}")
    return hook, spans


def exported(folder: Path) -> list[dict[str, Any]]:
    """Every span the processes wrote into `folder`, as the SDK's JSON."""
    return [json.loads(line) for path in sorted(folder.glob("spans-*.jsonl")) for line in path.read_text().splitlines()]
