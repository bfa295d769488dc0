"""The action space: every graph rewrite the search may apply, keyed by its config name."""
from metainfer_core.actions.base import Action, ActionContext, Param, Site, Step
from metainfer_core.actions.conv_bn_fusion import ConvBnFusion
from metainfer_core.actions.fuse_chain import FuseChain
from metainfer_core.actions.low_precision import Fp16, Int8
from metainfer_core.actions.transpose_cancel import TransposeCancel

ACTIONS: dict[str, Action] = {a.name: a for a in (ConvBnFusion(), TransposeCancel(), FuseChain(), Fp16(), Int8())}

__all__ = ["ACTIONS", "Action", "ActionContext", "Param", "Site", "Step"]
