"""BERT-like encoder: token embedding (Gather) plus a learned position embedding, two pre-norm
encoder layers (2 heads, hidden 64, GELU FFN of 256) and a final LayerNormalization.
Input `input_ids` int64 [batch, 32] in [0, 1000); output the last hidden state."""

from onnx import TensorProto

from metainfer_core.zoo._builder import GraphBuilder

VOCAB, SEQ, HIDDEN, HEADS, FFN, LAYERS = 1000, 32, 64, 2, 256, 2


def build(seed: int = 0):
    b = GraphBuilder("bert_tiny", seed)
    ids = b.input("input_ids", [SEQ], TensorProto.INT64)
    tokens = b.param("embeddings.word_embeddings", b.small((VOCAB, HIDDEN), 1.0))
    positions = b.param("embeddings.position_embeddings", b.small((SEQ, HIDDEN), 0.5))
    x = b.op("Add", [b.op("Gather", [tokens, ids], axis=0), positions])
    x = b.layer_norm(x, HIDDEN)
    for _ in range(LAYERS):
        x = b.encoder_layer(x, SEQ, HIDDEN, HEADS, FFN)
    return b.model({"last_hidden_state": b.layer_norm(x, HIDDEN)})
