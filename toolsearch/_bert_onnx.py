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
"""

from __future__ import annotations

import itertools
import threading
from typing import TYPE_CHECKING, Any

import numpy as np

if TYPE_CHECKING:
    from ._bert import BertEncoder

__all__ = ["OnnxRunner", "available"]


def available() -> bool:
    """Whether onnxruntime and onnx can be imported (both are in the `vector` extra)."""
    try:
        import onnx  # noqa: F401
        import onnxruntime  # noqa: F401
    except ImportError:
        return False
    return True


class OnnxRunner:
    """Mean-pooled (unnormalised) last hidden states of texts, one onnxruntime session per thread count.

    `int8`: the dense layers run on 8-bit weights and activations (see the module's docstring).
    """

    def __init__(self, encoder: BertEncoder, *, int8: bool = False) -> None:
        import onnxruntime as ort

        self._ort = ort
        self.int8 = int8
        self._model, self._weights = _graph(encoder, int8=int8)
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


def _graph(encoder: BertEncoder, *, int8: bool = False) -> tuple[bytes, dict[str, np.ndarray]]:
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

    def weight(name: str, array: np.ndarray) -> str:
        weights[name] = np.ascontiguousarray(array, dtype=array.dtype if array.dtype == np.int8 else np.float32)
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
    x = op("Gather", [weight("word", encoder.word), "ids"])
    x = op("Add", [x, op("Gather", [weight("position", encoder.position), "positions"])])
    x = op("Add", [x, weight("token_type", encoder.token_type0)])
    eps = encoder.eps

    def layer_norm(x: str, gain: np.ndarray, bias: np.ndarray, name: str) -> str:
        return op("LayerNormalization", [x, weight(name + "_g", gain.ravel()), weight(name + "_b", bias.ravel())],
                  axis=-1, epsilon=eps)

    peaks = _activation_peaks(encoder) if int8 else {}
    if int8:
        const("axis1", [1])
        const("flat", [-1])
        for name, value, kind in (("tiny", np.finfo(np.float32).tiny, np.float32), ("one", 1.0, np.float32),
                                  ("inverse_int8_max", 1 / 127, np.float32), ("zero_point", 128, np.uint8)):
            small.append(numpy_helper.from_array(np.array(value, dtype=kind), name))
        # QuantizeLinear along the tokens takes one zero point per token: 128 for each, made once per run.
        nodes.append(h.make_node("Expand", ["zero_point", op("Shape", ["ids"])], ["zero_points"]))

    def dense(x: str, w: np.ndarray, b: np.ndarray, name: str) -> str:
        if not int8:
            return op("Gemm", [x, weight(name + "_w", w), weight(name + "_b", b.ravel())], transB=1)
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
        return op("Add", [op("Mul", [product, scale]), weight(name + "_b", b.ravel())])

    x = layer_norm(x, encoder.emb_ln_g, encoder.emb_ln_b, "emb_ln")
    for i, layer in enumerate(encoder.layers):
        qkv = op("Reshape", [dense(x, layer.qkv_w, layer.qkv_b, f"l{i}_qkv"), "qkv_shape"])
        qkv = op("Transpose", [qkv], perm=[1, 2, 0, 3])  # (3, heads, tokens, size)
        q, k, v = (f"l{i}_{n}" for n in "qkv")
        nodes.append(h.make_node("Split", [qkv], [q, k, v], axis=0, num_outputs=3))
        q, k, v = (op("Squeeze", [m, "axis0"]) for m in (q, k, v))
        scores = op("MatMul", [q, op("Transpose", [k], perm=[0, 2, 1])])
        scores = op("Softmax", [op("Add", [scores, "mask"])], axis=-1)
        context = op("Reshape", [op("Transpose", [op("MatMul", [scores, v])], perm=[1, 0, 2]), "hidden_shape"])
        attended = op("Add", [dense(context, layer.out_w, layer.out_b, f"l{i}_out"), x])
        attended = layer_norm(attended, layer.ln1_g, layer.ln1_b, f"l{i}_ln1")
        inner = op("Gelu", [dense(attended, layer.up_w, layer.up_b, f"l{i}_up")])
        x = op("Add", [dense(inner, layer.down_w, layer.down_b, f"l{i}_down"), attended])
        x = layer_norm(x, layer.ln2_g, layer.ln2_b, f"l{i}_ln2")
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
