"""The numpy BERT encoder's own weights run by onnxruntime: same vectors, about twice as fast on queries;
or those weights in int8, about three times as fast, ranking like float32.

A query is a few dozen tokens, and at that size OpenBLAS's matrix products (numpy's) reach ~30
GFLOPS on one core against ~45 for onnxruntime's prepacked MLAS kernels, and numpy's element-wise
passes (layer norms, GELU, per-head attention) add ~40% on top; onnxruntime runs the whole graph in
native code. It is the runtime the field uses to serve this model without torch (Chroma's and
fastembed's default MiniLM embedders). No exported model file is shipped or downloaded: the graph
is built here with `onnx`'s helpers over the arrays `BertEncoder` has already loaded, handed over as
external initializers, so there is one set of weights and no export step.

The int8 graph is the same graph with each dense layer's product done by onnxruntime's
`MatMulNBits` kernel over 8-bit weights: each block of 32 input weights of an output column is
rounded to int8 with its own scale (made here, from the loaded arrays, in ~0.1 s), and at run time
the kernel quantises the activations to int8 block by block too (`accuracy_level=4`), so the
products run on the CPU's integer dot-product units. Per-block scales keep it close to float32:
onnxruntime's per-tensor dynamic quantisation (`quantize_dynamic`, one scale for a whole activation
matrix) was faster still but changed the top hit of a hybrid search on 2.3% of bfcl queries; this
changes it on 0.5% and moves nDCG@10 by at most 0.002 on bfcl, metatool and seal_tools
(tests/test_embedder_parity.py holds it to 0.003 and 99%).

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

INT8_BLOCK = 32  # input weights per int8 scale: onnxruntime's default block for MatMulNBits


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
    with `int8`, MatMulNBits over the same (out, in) arrays rounded to int8 by blocks).
    """
    from onnx import TensorProto, numpy_helper
    from onnx import helper as h

    weights: dict[str, np.ndarray] = {}
    small: list[Any] = []
    nodes: list[Any] = []

    def weight(name: str, array: np.ndarray) -> str:
        weights[name] = np.ascontiguousarray(array, dtype=array.dtype if array.dtype == np.uint8 else np.float32)
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

    def dense(x: str, w: np.ndarray, b: np.ndarray, name: str) -> str:
        if not int8:
            return op("Gemm", [x, weight(name + "_w", w), weight(name + "_b", b.ravel())], transB=1)
        blocks, scales = _int8_blocks(w)
        product = op("MatMulNBits", [x, weight(name + "_q", blocks), weight(name + "_s", scales)],
                     domain="com.microsoft", K=w.shape[1], N=w.shape[0], bits=8, block_size=INT8_BLOCK,
                     accuracy_level=4)  # 4: int8 activations too (0 would compute in float32)
        return op("Add", [product, weight(name + "_b", b.ravel())])

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
        kind = TensorProto.UINT8 if array.dtype == np.uint8 else TensorProto.FLOAT
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


def _int8_blocks(w: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(out, in) float weights as MatMulNBits' 8-bit blocks: (out, blocks, INT8_BLOCK) uint8 and one scale each.

    Symmetric rounding (the kernel's default zero point for 8 bits is 128); a last partial block
    is padded with zeros, as the kernel expects.
    """
    rows, cols = w.shape
    count = -(-cols // INT8_BLOCK)
    padded = np.zeros((rows, count * INT8_BLOCK), dtype=np.float32)
    padded[:, :cols] = w
    blocks = padded.reshape(rows, count, INT8_BLOCK)
    scales = np.maximum(np.abs(blocks).max(axis=2), np.finfo(np.float32).tiny) / 127.0
    quantised = np.clip(np.rint(blocks / scales[:, :, None]), -127, 127) + 128
    return quantised.astype(np.uint8), scales.astype(np.float32).ravel()
