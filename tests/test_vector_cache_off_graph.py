"""A vector index built with the embedding cache off keeps its query graph in memory only."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow

SEARCH = textwrap.dedent("""
    import json, sys
    from toolsearch import Tool, ToolIndex
    from toolsearch.embeddings import NumpyEmbedder
    from toolsearch.model_file import SHIPPED
    tools = [Tool(name="send_email", description="Send an email"), Tool(name="get_weather", description="Weather")]
    index = ToolIndex.build(tools, "vector", embedder=NumpyEmbedder(str(SHIPPED.folder), runtime="int8"),
                            cache=sys.argv[1] == "on")
    hits = [hit.name for hit in index.search("email my team", k=1).hits]
    print(json.dumps({"hits": hits, "built": "onnx" in sys.modules}))
""")


@pytest.mark.parametrize("switch", ["off", "on"])
def test_a_vector_index_without_the_embedding_cache_writes_no_query_graph(tmp_path: Path, switch: str) -> None:
    done = subprocess.run([sys.executable, "-c", SEARCH, switch], capture_output=True, text=True, timeout=240,
                          env={**os.environ, "TOOLSEARCH_CACHE_DIR": str(tmp_path)})
    assert done.returncode == 0, done.stderr[-3000:]
    out = json.loads(done.stdout)
    assert out["hits"] == ["send_email"] and out["built"] is True
    graphs = sorted(path.name.split("-")[0] for path in tmp_path.rglob("*.graph"))
    assert graphs == ([] if switch == "off" else ["int8"])
