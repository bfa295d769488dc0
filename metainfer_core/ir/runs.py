"""Runs of a graph on ONNX Runtime's CPU provider (one thread unless asked): the numerics every
accuracy figure, calibration and normalize check reads, sessions built in this one place. `exposed_runs` reads chosen
intermediate tensors too, one validation input at a time (a large graph need not hold every
input's intermediates)."""
from __future__ import annotations

from typing import Iterator

import numpy as np
import onnx
import onnxruntime as ort

from metainfer_core.ir.graph_utils import with_outputs
from metainfer_core.ir.tensors import quiet_session_options

Feeds = list[dict[str, np.ndarray]]


def cpu_session(model: onnx.ModelProto, optimization: ort.GraphOptimizationLevel | None = None,
                threads: int = 1) -> ort.InferenceSession:
    """A CPU session; `optimization` None: ONNX Runtime's default level; threads 0: its default
    (normalize's checks of the whole graph, where the numbers are compared within tolerances)."""
    options = {"intra_op_num_threads": threads}
    if optimization is not None:
        options["graph_optimization_level"] = optimization
    return ort.InferenceSession(model.SerializeToString(), quiet_session_options(**options),
                                providers=["CPUExecutionProvider"])


def exposed_runs(model: onnx.ModelProto, names: list[str], feeds: Feeds, dtypes: dict[str, int] | None = None,
                 optimization: ort.GraphOptimizationLevel | None = ort.GraphOptimizationLevel.ORT_ENABLE_BASIC
                 ) -> Iterator[list[np.ndarray]]:
    """The named tensors (graph outputs or intermediates) per feed, in `names`' order. dtypes:
    the intermediates to expose as outputs first (name -> ONNX element type); None: `model`
    exposes them already. Basic optimisations by default: an exposed graph (thousands of
    outputs) takes seconds to optimise fully, and every value it reads is exposed anyway."""
    sess = cpu_session(with_outputs(model, dtypes) if dtypes else model, optimization)
    spec = {i.name for i in sess.get_inputs()}
    for f in feeds:
        yield sess.run(names, {k: v for k, v in f.items() if k in spec})
