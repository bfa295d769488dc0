"""The recurrent family: Keras-style recurrence loops into ONNX's LSTM / GRU / RNN operators.
One job per module: values.py (constants, affine forms, activations), cells.py (the cell a body
computes, weights in ONNX's gate order), loops.py (the Loop / Scan around it), rewrite.py (the
operator and the outputs' reshaping), action.py (the action). Such loops built the way tf2onnx
writes them: metainfer_core/zoo/keras_rnn.py."""
from metainfer_core.actions.recurrent.action import RecurrentOps

__all__ = ["RecurrentOps"]
