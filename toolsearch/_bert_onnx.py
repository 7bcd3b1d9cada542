"""The numpy BERT encoder's own weights run by onnxruntime: same vectors, about twice as fast on queries;
or those weights in int8, about three times as fast, ranking like float32.

A query is a few dozen tokens, and at that size OpenBLAS's matrix products (numpy's) reach ~30
GFLOPS on one core against ~45 for onnxruntime's prepacked MLAS kernels, and numpy's element-wise
passes (layer norms, GELU, per-head attention) add ~40% on top; onnxruntime runs the whole graph in
native code. It is the runtime the field uses to serve this model without torch (Chroma's and
fastembed's default MiniLM embedders). No exported model file is shipped or downloaded: the graph
is built here with `onnx`'s helpers over the arrays `BertEncoder` has already loaded, handed over as
external initializers, so there is one set of weights and no export step.

The int8 graph is the same graph with each dense layer's product in integers: the weights rounded
to int8 with one scale per output column (made here, from the loaded arrays), and at run time each
token's activations rounded to uint8 with a scale of its own (`QuantizeLinear` along the tokens),
then one `MatMulIntegerToFloat` (u8 x s8: the CPU's integer dot-product instructions, rescaled by
the columns' scales) and a rescale by the tokens' scales. A layer norm's output has a few channels
~10x larger than the rest in every token; they would set each token's scale and leave the other
channels a handful of levels, so before rounding part of each channel's range moves into the
weights (SmoothQuant: x/s @ (W*s).T is the same product), with s measured when the graph is built,
by one float32 pass over 16 built-in sentences (about 0.1 s). onnxruntime's per-tensor dynamic
quantisation (`quantize_dynamic`, one scale for a whole activation matrix) changed the top hit of
1-2% of hybrid searches; this ranks like float32 (tests/test_embedder_parity.py holds it within
0.003 nDCG@10 of float32 queries, the same top hit for 99%, and benchmarks/results/tools_model_loso.md
scores it held out). It replaced onnxruntime's `MatMulNBits`, whose int8 path rounds activations by
blocks of 32 and ran barely faster than float32 on this project's benchmark host
(benchmarks/results/scale_embedders.md: 4.8 ms per int8 query against 6.4 in float32; 5.8 against
6.3 in the previous run, on `MatMulNBits`).

A query and the clauses of a multi-part request go through one run, their tokens packed side by
side as numpy packs them: an additive attention mask keeps each text to its own tokens, and a
pooling matrix averages each text's tokens into its row. One run of all the tokens costs less than
one run per text, whose fixed cost and small products dominate at query sizes.

A graph is built once per machine, not once per process: importing onnx costs ~0.6 s of CPU, and the int8 graph's
calibration pass, smoothing and rounding ~0.3 s more, on every process's first query. What they make (the serialised
graph and the int8 arrays; the float arrays are the encoder's own) is kept in the embedding cache's folder under
`query-graphs/`, named by a digest of everything it is made from: the model's digest (`BertEncoder.digest`), the
shapes config.json gives, the calibration texts and SMOOTHING, this code's and `_bert`'s source, and what numpy's
arithmetic depends on (its version, the CPU features it and its BLAS dispatch on, the BLAS it was built with), so a
file is read only where building afresh would make the same bytes. A file is written under a temporary name and
renamed, and read only after its BLAKE2b digest and the inputs it records are checked (`_framed_file`, the embedding
cache's shards' framing too): a damaged or foreign one is said (a warning) and built again; a folder that cannot be
written is said and the graph kept in memory, as before. The `_GRAPHS_KEPT` most recently written files of each
precision stay; older versions' go. A caller that turned the embedding cache off keeps the graph in memory only
(`in_memory`): the folder is neither read nor written.
"""

from __future__ import annotations

import contextlib
import contextvars
import errno
import functools
import importlib
import importlib.util
import io
import itertools
import json
import logging
import platform
import threading
import zipfile
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from ._cache_dir import default_cache_dir
from ._errors import named_error
from ._framed_file import Framing, checksum, sweep_abandoned, write_whole

if TYPE_CHECKING:
    from ._bert import BertEncoder

__all__ = ["OnnxRunner", "available", "in_memory"]


def available() -> bool:
    """Whether onnxruntime can be imported and onnx is installed (both are in the `vector` extra).

    onnx is only looked for: it is imported (~0.6 s of CPU) where a graph is built, not where one is read back.
    """
    try:
        import onnxruntime  # noqa: F401
    except ImportError:
        return False
    return importlib.util.find_spec("onnx") is not None


class OnnxRunner:
    """Mean-pooled (unnormalised) last hidden states of texts, one onnxruntime session per thread count.

    `int8`: the dense layers run on 8-bit weights and activations (see the module's docstring).
    """

    def __init__(self, encoder: BertEncoder, *, int8: bool = False) -> None:
        import onnxruntime as ort

        self._ort = ort
        self.int8 = int8
        self._model, self._weights = _kept_graph(encoder, int8=int8)
        self._sessions: dict[int, Any] = {}
        self._lock = threading.Lock()
        self.session(1)  # fail here, at build time, rather than on a query

    def session(self, threads: int) -> Any:
        session = self._sessions.get(threads)
        if session is None:
            with self._lock:
                session = self._sessions.get(threads)
                if session is None:
                    options = self._ort.SessionOptions()
                    options.intra_op_num_threads = threads
                    options.inter_op_num_threads = 1
                    options.log_severity_level = 3  # warnings would go to stderr of the host application
                    # Idle pool threads sleep instead of spinning: spinning kept a core busy after every
                    # query, and a hybrid search's bm25 half (tantivy's threads) then waited for it:
                    # hybrid p50 26.7 -> 17.6 ms at 10,000 tools, and a third less CPU per search.
                    options.add_session_config_entry("session.intra_op.allow_spinning", "0")
                    names = list(self._weights)
                    options.add_external_initializers(
                        names, [self._ort.OrtValue.ortvalue_from_numpy(self._weights[n]) for n in names]
                    )
                    session = self._ort.InferenceSession(
                        self._model, options, providers=["CPUExecutionProvider"]
                    )
                    self._sessions[threads] = session
        return session

    def forward(self, ids: list[list[int]], threads: int) -> np.ndarray:
        """One row per text, all texts in one run: their tokens packed side by side, each attending to its own."""
        lengths = [len(seq) for seq in ids]
        count = sum(lengths)
        tokens = np.fromiter(itertools.chain.from_iterable(ids), dtype=np.int64, count=count)
        positions = np.fromiter(itertools.chain.from_iterable(map(range, lengths)), dtype=np.int64, count=count)
        # Which text each token belongs to: a token attends only to its own text's tokens (an additive
        # mask), and a text's row is the mean of its own tokens (a pooling matrix).
        owner = np.repeat(np.arange(len(ids)), lengths)
        mask = np.where(owner[:, None] == owner[None, :], np.float32(0.0), np.float32(_MASKED))
        pool = (owner[None, :] == np.arange(len(ids))[:, None]).astype(np.float32)
        pool /= np.array(lengths, dtype=np.float32)[:, None]
        inputs = {"ids": tokens, "positions": positions, "mask": mask, "pool": pool}
        return np.asarray(self.session(threads).run(None, inputs)[0])


# Added to the attention scores of a token pair from different texts: exp() of it is exactly 0 in float32,
# and, unlike -inf, it cannot turn a row into NaN.
_MASKED = -1e9


def _graph(
    encoder: BertEncoder, *, int8: bool = False, own: dict[str, np.ndarray] | None = None
) -> tuple[bytes, dict[str, np.ndarray]]:
    """The encoder's forward pass as an ONNX graph over (tokens, hidden) rows, and its weights by name.

    Its inputs hold several texts packed side by side: `ids` and `positions` per token, `mask` (tokens,
    tokens) added to every head's attention scores, and `pool` (texts, tokens), whose product with the
    last hidden states is each text's mean-pooled row.

    The same arithmetic as `BertEncoder._forward`: the query weights come pre-scaled and fused with
    the key and value weights, products are `x @ W.T` (Gemm with transB, on the arrays as stored;
    with `int8`, MatMulIntegerToFloat over each token's activations and the same arrays rounded to int8,
    see the module's docstring).
    """
    from onnx import TensorProto, numpy_helper
    from onnx import helper as h

    weights: dict[str, np.ndarray] = {}
    small: list[Any] = []
    nodes: list[Any] = []

    own = _encoder_arrays(encoder) if own is None else own  # the encoder's arrays by name (its caller may have them)

    def weight(name: str, array: np.ndarray | None = None) -> str:
        """The encoder's array of that name (None), else one made here, under a name the encoder's arrays do not have
        (`_kept_graph` keeps only those on disk)."""
        weights[name] = own[name] if array is None else np.ascontiguousarray(
            array, dtype=array.dtype if array.dtype == np.int8 else np.float32
        )
        return name

    def const(name: str, values: list[int] | int) -> str:
        small.append(numpy_helper.from_array(np.array(values, dtype=np.int64), name))
        return name

    def op(kind: str, inputs: list[str], **attributes: Any) -> str:
        out = f"{kind.lower()}_{len(nodes)}"
        nodes.append(h.make_node(kind, inputs, [out], **attributes))
        return out

    hidden, heads = encoder.hidden, encoder.heads
    size = hidden // heads
    const("axis0", [0])
    const("qkv_shape", [0, 3, heads, size])  # 0 = copy the token count
    const("hidden_shape", [0, hidden])
    x = op("Gather", [weight("word"), "ids"])
    x = op("Add", [x, op("Gather", [weight("position"), "positions"])])
    x = op("Add", [x, weight("token_type")])
    eps = encoder.eps

    def layer_norm(x: str, name: str) -> str:
        return op("LayerNormalization", [x, weight(name + "_g"), weight(name + "_b")], axis=-1, epsilon=eps)

    peaks = _activation_peaks(encoder) if int8 else {}
    if int8:
        const("axis1", [1])
        const("flat", [-1])
        for name, value, kind in (("tiny", np.finfo(np.float32).tiny, np.float32), ("one", 1.0, np.float32),
                                  ("inverse_int8_max", 1 / 127, np.float32), ("zero_point", 128, np.uint8)):
            small.append(numpy_helper.from_array(np.array(value, dtype=kind), name))
        # QuantizeLinear along the tokens takes one zero point per token: 128 for each, made once per run.
        nodes.append(h.make_node("Expand", ["zero_point", op("Shape", ["ids"])], ["zero_points"]))

    def dense(x: str, name: str) -> str:
        if not int8:
            return op("Gemm", [x, weight(name + "_w"), weight(name + "_b")], transB=1)
        w = own[name + "_w"]
        if name in peaks:
            # A layer norm's output carries a few channels ~10x larger than the rest in every token, and
            # they would set each token's scale: moved partly into the weights (x/s @ (W*s).T, the same product).
            factor = _smoothing(peaks[name], w)
            x = op("Mul", [x, weight(name + "_smooth", 1.0 / factor)])
            w = w * factor
        # Each token's row gets its own scale (its largest magnitude over 127), and is rounded to uint8 around
        # 128, the operand order the integer kernels run fastest (u8 x s8).
        peak = op("Max", [op("ReduceMax", [op("Abs", [x]), "axis1"], keepdims=1), "tiny"])
        scale = op("Mul", [peak, "inverse_int8_max"])  # (tokens, 1)
        quantised = op("QuantizeLinear", [x, op("Reshape", [scale, "flat"]), "zero_points"], axis=0)
        columns, column_scales = _int8_columns(w)
        product = op("MatMulIntegerToFloat", [quantised, weight(name + "_q", columns), "one",
                                              weight(name + "_s", column_scales), "zero_point"], domain="com.microsoft")
        return op("Add", [op("Mul", [product, scale]), weight(name + "_b")])

    x = layer_norm(x, "emb_ln")
    for i in range(len(encoder.layers)):
        qkv = op("Reshape", [dense(x, f"l{i}_qkv"), "qkv_shape"])
        qkv = op("Transpose", [qkv], perm=[1, 2, 0, 3])  # (3, heads, tokens, size)
        q, k, v = (f"l{i}_{n}" for n in "qkv")
        nodes.append(h.make_node("Split", [qkv], [q, k, v], axis=0, num_outputs=3))
        q, k, v = (op("Squeeze", [m, "axis0"]) for m in (q, k, v))
        scores = op("MatMul", [q, op("Transpose", [k], perm=[0, 2, 1])])
        scores = op("Softmax", [op("Add", [scores, "mask"])], axis=-1)
        context = op("Reshape", [op("Transpose", [op("MatMul", [scores, v])], perm=[1, 0, 2]), "hidden_shape"])
        attended = op("Add", [dense(context, f"l{i}_out"), x])
        attended = layer_norm(attended, f"l{i}_ln1")
        inner = op("Gelu", [dense(attended, f"l{i}_up")])
        x = op("Add", [dense(inner, f"l{i}_down"), attended])
        x = layer_norm(x, f"l{i}_ln2")
    nodes.append(h.make_node("MatMul", ["pool", x], ["pooled"]))

    def external(name: str, array: np.ndarray) -> Any:
        kind = TensorProto.INT8 if array.dtype == np.int8 else TensorProto.FLOAT
        tensor = TensorProto(name=name, data_type=kind, dims=array.shape)
        tensor.data_location = TensorProto.EXTERNAL
        entry = tensor.external_data.add()
        entry.key, entry.value = "location", "toolsearch-in-memory"  # replaced before load
        return tensor

    graph = h.make_graph(
        nodes,
        "toolsearch-bert",
        [
            h.make_tensor_value_info("ids", TensorProto.INT64, ["tokens"]),
            h.make_tensor_value_info("positions", TensorProto.INT64, ["tokens"]),
            h.make_tensor_value_info("mask", TensorProto.FLOAT, ["tokens", "tokens"]),
            h.make_tensor_value_info("pool", TensorProto.FLOAT, ["texts", "tokens"]),
        ],
        [h.make_tensor_value_info("pooled", TensorProto.FLOAT, ["texts", hidden])],
        [*small, *(external(n, a) for n, a in weights.items())],
    )
    model = h.make_model(graph, opset_imports=[h.make_opsetid("", 20), h.make_opsetid("com.microsoft", 1)])
    model.ir_version = 10  # what onnxruntime >= 1.17 reads
    return model.SerializeToString(), weights


# What the int8 graph's smoothing is measured on: requests and tool texts of many kinds. Which channels
# carry the outliers is a property of the model, not of the text, so a few sentences find them.
_CALIBRATION = (
    "Send an email to the team that the quarterly report is ready",
    "What's the weather going to be like in Paris tomorrow?",
    "Book a table for four at an Italian restaurant tonight at 8pm",
    "convert 250 US dollars to euros",
    "Find all open pull requests assigned to me in the payments repository",
    "my package never arrived, where is it?",
    "Calculate the area of a circle with a radius of 5 cm",
    "translate 'good morning' into Japanese",
    "get_user_profile: Returns a user's profile (name, e-mail, plan) by user id.",
    "Create a calendar event with a title, start and end time and a list of attendees.",
    "Search flights between two airports on a date; returns prices and carriers.",
    "Upload a file to a storage bucket and return its public URL.",
    "Run a read-only SQL query against the analytics database and return the rows as JSON.",
    "Track a shipment by its tracking number.",
    "Play a song or a playlist on the user's speaker",
    "List the files changed in a git commit",
)
# How much of an input channel's range moves into the weights (SmoothQuant's alpha): 0.7 kept int8's
# top hit equal to float32's for 99% of bfcl, metatool and seal_tools requests with either model,
# against 98.3-99.5% with none.
SMOOTHING = 0.7


def _activation_peaks(encoder: BertEncoder) -> dict[str, np.ndarray]:
    """The largest magnitude per channel of each layer norm's output that feeds a dense layer, over `_CALIBRATION`."""
    peaks: dict[str, np.ndarray] = {}

    def observe(name: str, x: np.ndarray) -> None:
        peak = np.abs(x).max(axis=1)
        peaks[name] = np.maximum(peaks[name], peak) if name in peaks else peak

    encoder._forward(encoder.token_ids(list(_CALIBRATION)), observe)
    return peaks


def _smoothing(peak: np.ndarray, w: np.ndarray) -> np.ndarray:
    """Per input channel: the factor s of x/s @ (W*s).T that evens activation and weight ranges (SmoothQuant)."""
    tiny = np.float32(1e-5)
    weight_peak = np.maximum(np.abs(w).max(axis=0), tiny)
    factor = np.power(np.maximum(peak, tiny), SMOOTHING) / np.power(weight_peak, 1 - SMOOTHING)
    return np.asarray(factor, dtype=np.float32)


def _int8_columns(w: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(out, in) float weights as MatMulIntegerToFloat's (in, out) int8 matrix and one scale per output column.

    Symmetric rounding: the weights' zero point is 0, so only the activations carry one.
    """
    scales = np.maximum(np.abs(w).max(axis=1), np.finfo(np.float32).tiny) / 127.0
    quantised = np.clip(np.rint(w / scales[:, None]), -127, 127).astype(np.int8)
    return np.ascontiguousarray(quantised.T), scales.astype(np.float32)


def _encoder_arrays(encoder: BertEncoder) -> dict[str, np.ndarray]:
    """The encoder's own arrays by the names the graph gives them (float32, contiguous; gains and biases flat).

    A layer's are `l{i}_` and its field's name (`l0_qkv_w`, `l0_ln1_g`); none is copied.
    """
    arrays = {"word": encoder.word, "position": encoder.position, "token_type": encoder.token_type0,
              "emb_ln_g": encoder.emb_ln_g, "emb_ln_b": encoder.emb_ln_b}
    for i, layer in enumerate(encoder.layers):
        arrays.update({f"l{i}_{name}": array for name, array in vars(layer).items()})
    return {
        name: np.ascontiguousarray(array.ravel() if name.endswith(("_g", "_b")) else array, dtype=np.float32)
        for name, array in arrays.items()
    }


# --- graphs kept on disk (see the module's docstring) ----------------------------------------------------------------

_GRAPH_FILE = Framing(b"toolsearch-query-graph-1\n")  # the file's layout; what the graph is made from is in its key
_GRAPH_FOLDER = "query-graphs"
# Graph files of each precision kept, the most recently written: each new model, toolsearch or numpy version writes
# another (~11 MB in int8), and a few covers installs that share one cache folder.
_GRAPHS_KEPT = 4
_log = logging.getLogger("toolsearch")
# True within `in_memory()`: set by a caller that turned the embedding cache off (`embeddings.graphs_follow`).
_IN_MEMORY: contextvars.ContextVar[bool] = contextvars.ContextVar("toolsearch_graphs_in_memory", default=False)


@contextlib.contextmanager
def in_memory() -> Iterator[None]:
    """A graph built within (in this thread or task) is kept in memory only: the cache folder is neither read nor
    written, as the embedding cache is not when it is turned off. A runner built before is used as it is."""
    token = _IN_MEMORY.set(True)
    try:
        yield
    finally:
        _IN_MEMORY.reset(token)


def _kept_graph(encoder: BertEncoder, *, int8: bool) -> tuple[bytes, dict[str, np.ndarray]]:
    """`_graph(encoder, int8=int8)`, read from the graph cache where it holds it, else built and written there
    (in memory only within `in_memory()`)."""
    key = None if _IN_MEMORY.get() else _graph_key(encoder, int8=int8)
    if key is None:
        return _graph(encoder, int8=int8)

    path = default_cache_dir() / _GRAPH_FOLDER / f"{'int8' if int8 else 'fp32'}-{checksum(key.encode()).hex()}.graph"
    own = _encoder_arrays(encoder)
    kept = _read_graph(path, key, own)
    if kept is not None:
        return kept
    model, weights = _graph(encoder, int8=int8, own=own)
    # only what the build made: the encoder's own arrays are in memory already, and are the larger part (the vocabulary)
    made = {name: array for name, array in weights.items() if name not in own}
    _write_graph(path, key, model, list(weights), made)
    return model, weights


def _graph_key(encoder: BertEncoder, *, int8: bool) -> str | None:
    """Everything a graph is made from, as text; None for an encoder whose weights have no digest (not cached)."""
    if encoder.digest is None:
        return None
    try:
        # the code that builds the graph, runs the calibration pass and reads the weights (`_bert` and `model_file`,
        # beside this module; read, not imported: `_bert` imports this one): a change to any is a new graph
        here = Path(__file__)
        code = checksum(b"".join(here.with_name(name).read_bytes()
                                 for name in (here.name, "_bert.py", "model_file.py"))).hex()
    except OSError:  # sources not on disk (a frozen application): nothing to tell one version from another by
        return None
    return json.dumps({
        "int8": int8,
        "model": encoder.digest,
        # from config.json, which the model's digest does not cover
        "shape": [encoder.hidden, encoder.heads, len(encoder.layers), encoder.max_length, encoder.eps],
        "smoothing": SMOOTHING,
        # the calibration pass's input as the tokenizer gives it: a `tokenizers` release that splits a text
        # otherwise moves the peaks, and with them the int8 weights
        "calibration": encoder.token_ids(list(_CALIBRATION)),
        "code": code,
        "arithmetic": _arithmetic(),
    }, sort_keys=True)


@functools.cache
def _arithmetic() -> list[str]:
    """What the calibration pass's float32 results depend on besides its inputs: numpy, the CPU features its loops
    and its BLAS's kernels are chosen by, and the BLAS numpy was built with. (Not threadpoolctl's list of loaded BLAS
    libraries: faiss or torch add theirs, which numpy never calls, and the key would then change with what a process
    imported first. onnx only serialises the graph: its version changes no value.)"""
    parts = [f"numpy {np.__version__}", platform.machine()]
    for module in ("numpy._core._multiarray_umath", "numpy.core._multiarray_umath"):  # numpy 2, numpy 1
        with contextlib.suppress(ImportError):
            features = getattr(importlib.import_module(module), "__cpu_features__", {})
            parts.append(" ".join(sorted(name for name, present in features.items() if present)))
            break
    with contextlib.suppress(ImportError, AttributeError, KeyError, TypeError):
        blas = importlib.import_module("numpy.__config__").CONFIG["Build Dependencies"]["blas"]
        parts.append(f"{blas.get('name')} {blas.get('version')} {blas.get('openblas configuration', '')}".strip())
    return parts


def _read_graph(path: Path, key: str, own: dict[str, np.ndarray]) -> tuple[bytes, dict[str, np.ndarray]] | None:
    """The graph and weights a graph file holds, after checking its digest and that it was made from `key`.

    None where there is no file; where there is one that cannot be used (damaged, truncated, made from other inputs)
    also a warning: the graph is built again and the file written anew.
    """
    try:
        raw = path.read_bytes()
    except (FileNotFoundError, NotADirectoryError):  # no graph kept (a file where a folder would be: said on write)
        return None
    except OSError as exc:
        problem = f"it cannot be read ({exc})"
    else:
        problem, kept = _parse_graph(raw, key, own)
        if kept is not None:
            return kept
    _log.warning("the query graph kept in %s is unusable (%s); it is built again (about 1 s of CPU) and written anew",
                 path, problem)
    return None


def _parse_graph(
    raw: bytes, key: str, own: dict[str, np.ndarray]
) -> tuple[str, tuple[bytes, dict[str, np.ndarray]] | None]:
    """(the problem, None) or ("", (graph, weights)) for a graph file's bytes."""
    body, intact = _GRAPH_FILE.unframe(raw)
    if body is None:
        return "it is not a toolsearch query graph file", None
    if not intact:
        return "it does not match its checksum", None
    try:
        with np.load(io.BytesIO(body), allow_pickle=False) as stored:
            arrays = {name: stored[name] for name in stored.files}
        made_from = str(arrays["key"])
        model = arrays["model"].tobytes()
        names = [str(name) for name in arrays["names"]]
    except (OSError, ValueError, KeyError, EOFError, zipfile.BadZipFile) as exc:
        return f"its contents cannot be read ({named_error(exc)})", None
    if made_from != key:
        return "it was made from another model, code or numpy than this process runs", None
    missing = [name for name in names if f"weight.{name}" not in arrays and name not in own]
    if missing:
        return f"it names weights the model does not have ({', '.join(missing[:3])})", None
    return "", (model, {name: arrays[f"weight.{name}"] if f"weight.{name}" in arrays else own[name] for name in names})


def _write_graph(path: Path, key: str, model: bytes, names: list[str], made: dict[str, np.ndarray]) -> None:
    """Write a graph file atomically (a temporary file renamed over it): concurrent processes write the same bytes,
    and a reader sees a whole file, old or new. A folder that cannot be written costs each process the build, said."""
    contents = {"key": np.array(key), "model": np.frombuffer(model, dtype=np.uint8), "names": np.array(names),
                **{f"weight.{name}": array for name, array in made.items()}}
    buffer = io.BytesIO()
    np.savez(buffer, **contents)  # type: ignore[arg-type]  # no name here is savez's own allow_pickle
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        write_whole({path: _GRAPH_FILE.frame(buffer.getvalue())})
    except OSError as exc:
        if exc.errno in (errno.EACCES, errno.EPERM, errno.EROFS):
            # a cache made read-only on purpose (one built ahead, served by another user): no fault, a cost
            _log.info("the query graph is not kept in %s, which this process may not write (%s): each process builds "
                      "it on its first query (about 1 s of CPU) until one that may write there does", path.parent, exc)
        else:
            _log.warning("the query graph is not kept in %s (%s): each process builds it again on its first query "
                         "(about 1 s of CPU)", path.parent, exc)
        return
    _log.info("query graph built and kept in %s", path)
    _prune(path.parent, path.name.split("-", 1)[0])


def _prune(folder: Path, precision: str) -> None:
    """Remove all but the `_GRAPHS_KEPT` most recently written graph files of a precision (a process still reading
    one has it whole: it is read in one go), and temporary files a process killed while writing left behind
    (`sweep_abandoned`: those older than an hour)."""
    found = []
    for path in folder.glob(f"{precision}-*.graph"):
        with contextlib.suppress(OSError):
            found.append((path.stat().st_mtime_ns, path))
    for _, stale in sorted(found, reverse=True)[_GRAPHS_KEPT:]:
        with contextlib.suppress(OSError):
            stale.unlink()
    sweep_abandoned(folder, f"{precision}-*.graph")
