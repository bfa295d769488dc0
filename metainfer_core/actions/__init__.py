"""The action space: every graph rewrite the search may apply, keyed by its config name.

The eight action classes of the design (SPEC.md section 2): Conv+BN fusion (conv_bn_fusion),
adjacent convolution merge (conv_merge), transpose cancellation (transpose_cancel), data
layout (layout), kernel fusion (fuse_chain), low-precision substitution (fp16, bf16, int8, int8_dynamic),
subgraph splitting (tiling), memory reuse (memory_reuse) and compute/copy overlap scheduling
(schedule), and execution-path binding (binding: which runtime runs the plan, in which
precision). Operator binding on a modeled device (device or host per kernel) is computed for every
candidate by metainfer_core.kernels.bind; an action that would add an op the device lacks is illegal."""
from metainfer_core.actions.base import Action, ActionContext, Param, Site, Step
from metainfer_core.actions.bf16 import Bf16
from metainfer_core.actions.binding import Binding
from metainfer_core.actions.conv_bn_fusion import ConvBnFusion
from metainfer_core.actions.conv_merge import ConvMerge
from metainfer_core.actions.fp16 import Fp16
from metainfer_core.actions.fuse_chain import FuseChain
from metainfer_core.actions.int8 import Int8
from metainfer_core.actions.int8_dynamic import Int8Dynamic
from metainfer_core.actions.layout import Layout
from metainfer_core.actions.memory_reuse import MemoryReuse
from metainfer_core.actions.schedule import Schedule
from metainfer_core.actions.tiling import Tiling
from metainfer_core.actions.transpose_cancel import TransposeCancel

ACTIONS: dict[str, Action] = {a.name: a for a in (
    ConvBnFusion(), ConvMerge(), TransposeCancel(), Layout(), FuseChain(), Fp16(), Bf16(), Int8(), Int8Dynamic(), Tiling(),
    MemoryReuse(), Schedule(), Binding())}

__all__ = ["ACTIONS", "Action", "ActionContext", "Param", "Site", "Step"]
