"""Float32 -> int8 substitution (lossy): the ops in scope are quantized in QDQ form (static,
calibrated on the run's calibration inputs: random, or the user's .npz), the format ONNX
Runtime's quantize_static writes and QDQ-aware runtimes fuse into integer kernels, or in
OpenVINO's placement (only what quantized ops read, symmetric activations, float outputs) where
the target offers an OpenVINO path. The rewrite itself is metainfer_core.actions.qdq (linear in
the graph size), NNCF's (engine nncf: nncf_engine.py, OpenVINO's form only) or ONNX Runtime's
quantize_static (engine onnxruntime: ort_engine.py, ONNX Runtime's QDQ form only). `float_layers`
keeps the most sensitive layers out of scope (float_layers.py)."""
from __future__ import annotations

from metainfer_core.actions.qdq.calibration import range_table
from metainfer_core.actions.qdq.rewrite import ALL_OPS, COMPUTE_OPS, INPUTS_COMPUTE_OPS, INPUTS_ONLY_OPS, PLACEMENTS, quantize

from metainfer_core.actions.base import Action, Param, Site, lowered, opset_of
from metainfer_core.actions.binding import offered
from metainfer_core.actions import float_layers
from metainfer_core.actions.float_layers import FIT, FLOAT_LAYERS, FLOAT_LAYERS_DOMAIN, narrowed
from metainfer_core.actions.fp16 import is_float32_model
from metainfer_core.actions.nncf_engine import NNCF, nncf_quantize
from metainfer_core.actions.ort_engine import ORT, ort_quantize
from metainfer_core.backends.paths import ExecutionPath
from metainfer_core.backends.runtimes import runtime_for_form


INPUTS_FORM = "inputs"      # the placement that only one runtime runs in int8 (its own form)


def form_path() -> ExecutionPath:
    """The path a plan in the inputs-only form binds to: the runtime that declares it native."""
    return ExecutionPath(runtime_for_form(INPUTS_FORM).name, "f32")    # its float remainder in f32


_TYPES = {"QUInt8": "u8", "QInt8": "s8"}    # int8 u8s8: uint8 activations, int8 weights (the usual naming)
# the outside quantizers: (short name, in words)
_ENGINES = {ORT: ("ORT quantizer", "ONNX Runtime's quantize_static"), NNCF: ("NNCF", "NNCF")}


class Int8(Action):
    name = "int8"
    summary = "QDQ static quantization: see int8 in depth below"
    lossy = True
    width = 8
    params = {
        "scope": Param("compute", ("all", "compute"), "quantize every supported op, or only Conv/MatMul/Gemm",
                       numeric=False),
        "activation_type": Param("QUInt8", ("QUInt8", "QInt8"), "activation type (U8S8 vs S8S8 differ in speed on x86)"),
        "weight_type": Param("QInt8", ("QInt8", "QUInt8"), "weight type (int8 symmetric, or uint8 asymmetric)"),
        "per_channel": Param("auto", ("auto", True, False),
                             "weight scales per output channel (needs opset >= 13), per tensor, or auto: per "
                             "channel only for weights whose channels' ranges differ (qdq/params.py weight_axis)"),
        "calibrate_method": Param("MinMax", ("MinMax", "Entropy", "Percentile"), "calibration method"),
        "placement": Param("inputs_outputs", PLACEMENTS,
                           "inputs_outputs: Q/DQ around every quantized op (ONNX Runtime's QDQ form, fused into its "
                           "QLinear kernels); inputs: only what quantized ops read, activations symmetric by sign, "
                           "outputs and biases float (OpenVINO's form: offered where the target has the "
                           "openvino:f32 path, and binds the plan to it; activation_type does not apply)"),
        FLOAT_LAYERS: Param(0, FLOAT_LAYERS_DOMAIN,
                            "mixed precision: the k quantizable layers most sensitive to int8 (per-node "
                            "sensitivity on the run's inputs) stay in float, on whichever path runs the plan "
                            "(ONNX Runtime f32; OpenVINO f32 or bf16); fit: the fewest that bring the estimated "
                            "loss within accuracy.max_loss; offered in a search only", numeric=False),
        "engine": Param("metainfer", ("metainfer", NNCF, ORT),
                        "who writes the Q/DQ: meta-infer's rewrite, NNCF's post-training quantizer (OpenVINO's "
                        "form only, scope compute) or ONNX Runtime's quantize_static (ONNX Runtime's QDQ form only); "
                        "an outside quantizer calibrates (seconds per graph), so it is offered with float_layers 0 or "
                        "fit only, and the float layers read their original inputs and weights afterwards",
                        numeric=False),
    }

    def choices(self, domain_override=None):
        """float_layers varies slowest, in its domain's order (conf: 0, fit, then fixed counts):
        every engine's and placement's whole-int8 plan is reached before any float-layer variant,
        so a search whose budget ends early has still scored each quantizer's own form. Within
        one activation type ONNX Runtime's quantizer on its own op set (scope all: the graph its
        users get) comes before its compute-only scope, which differs little from meta-infer's
        own QDQ rewrite of the same ops: on a text detector the budget ended between the two and
        the quantizer's own graph, the fastest peer there, was never scored."""
        def domain(name):
            values = (domain_override or {}).get(name, self.params[name].domain)
            return list(values) if isinstance(values, (list, tuple)) else [values]

        layers, types = domain(FLOAT_LAYERS), domain("activation_type")
        return sorted(super().choices(domain_override),
                      key=lambda p: (layers.index(p[FLOAT_LAYERS]), types.index(p["activation_type"]),
                                     p["engine"] == ORT and p["scope"] == "compute"))

    def calibrates(self, params):
        engine = self.with_defaults(params)["engine"]
        return engine if engine in (NNCF, ORT) else None

    def kind_label(self, params):
        """OpenVINO's form is a kind apart, and so is an outside quantizer's writing of either
        form: the predictor tells none of them from meta-infer's QDQ form. ONNX Runtime's
        quantizer on its own op set (scope all) is the graph its users get: a kind apart from its
        compute-only scope."""
        if params.get("engine") == ORT and params.get("scope") == "compute":
            return f"int8:{ORT}:compute"
        if params.get("engine") in (NNCF, ORT):
            return f"int8:{params['engine']}"
        return "int8:openvino-form" if params.get("placement") == "inputs" else self.name

    def native_runtime(self, params):
        inputs_form = params.get("placement") == "inputs" or params.get("engine") == NNCF
        return form_path().runtime if inputs_form else None

    def words(self, params, scope=""):
        p = params
        outside = [_ENGINES[p["engine"]][0]] if p.get("engine") in _ENGINES else []
        outside += ["all ops"] if p.get("scope") == "all" else []
        short = ("int8 OpenVINO form" if p.get("placement") == "inputs" else
                 f"int8 {_TYPES.get(p.get('activation_type'), '?')}{_TYPES.get(p.get('weight_type'), '?')}") \
            + (f" ({', '.join(outside)})" if outside else "")
        long = (f"quantize to int8 in OpenVINO's form (only what quantized ops read; symmetric activations, "
                f"{p.get('weight_type', '?')} weights, float outputs), calibrated with "
                f"{p.get('calibrate_method', 'MinMax')}, run on OpenVINO" if p.get("placement") == "inputs" else
                f"quantize to int8, static QDQ calibrated with {p.get('calibrate_method', 'MinMax')} "
                f"({p.get('activation_type', '?')} activations, {p.get('weight_type', '?')} weights, "
                f"per-channel {p.get('per_channel', '?')})") \
            + (f", {'every supported op' if p.get('scope') == 'all' else 'Conv/MatMul/Gemm'}" if p.get("scope") else "") \
            + (f", written by {_ENGINES[p['engine']][1]}" if p.get("engine") in _ENGINES else "")
        k = float_layers.kept_float(p, scope)
        if k:
            short += f", {k} layers float"
            long += f"; its {k} layers most sensitive to int8 kept in float (mixed precision)"
        return short, long

    def whole(self, params):
        return float_layers.whole_params(params)

    def fits_by_runs(self, params):
        return params.get(FLOAT_LAYERS) == FIT

    def pruned(self, params, whole, view):
        return float_layers.pruned(whole, view)

    def prepare_search(self, cache, estimates):
        float_layers.prepare_search(self, cache, estimates)

    def known_loss(self, step, estimates):
        return float_layers.known_loss(step, estimates)

    def narrow(self, site, params, cache):
        return narrowed(site, params, cache)

    def sites(self, model, params, target):
        if not is_float32_model(model) or not any(n.op_type in COMPUTE_OPS for n in model.graph.node):
            return []
        if params["placement"] == "inputs" and (params["activation_type"] != "QUInt8"
                                                or form_path().label not in offered(target)):
            return []       # one variant per scope; the form only OpenVINO runs as int8
        if params["engine"] == NNCF and (params["placement"] != "inputs" or params["scope"] != "compute"
                                         or params[FLOAT_LAYERS] not in (0, FIT)):
            return []       # NNCF places its own Q/DQ, for OpenVINO: one variant, whole or fitted
        if params["engine"] == ORT and (params["placement"] != "inputs_outputs" or params[FLOAT_LAYERS] not in (0, FIT)):
            return []       # ONNX Runtime's quantizer writes its own QDQ form: whole or fitted
        return [Site(self._scope(model, params), params["scope"])]

    @staticmethod
    def _scope(model, params) -> tuple[str, ...]:
        """The nodes the scope quantizes, in graph order."""
        if params["placement"] == "inputs":
            ops = INPUTS_COMPUTE_OPS if params["scope"] == "compute" else ALL_OPS + INPUTS_ONLY_OPS
        else:
            ops = COMPUTE_OPS if params["scope"] == "compute" else ALL_OPS
        inits = {i.name for i in model.graph.initializer}
        return tuple(n.name for n in model.graph.node if n.op_type in ops
                     and not (n.op_type == "Add" and params["scope"] == "compute" and set(n.input) & inits))

    def legal(self, model, site, params, target):
        if "int8" not in target.dtypes:
            return f"target {target.name} has no int8 datapath"
        if "QDQ" not in target.quantization:
            return f"target {target.name} does not take QDQ-quantized graphs"
        if params["per_channel"] is True and opset_of(model) < 13:
            return f"per-channel quantization needs opset >= 13 (graph has {opset_of(model)})"
        return lowered(model)

    def apply(self, model, site, params, ctx):
        if not ctx.calibration_feeds:
            raise ValueError("int8 needs calibration inputs")
        if params["engine"] in (NNCF, ORT):     # an outside quantizer writes the whole scope; these stay float
            kept = set(site.nodes)
            floats = [n for n in self._scope(model, params) if n not in kept]
        if params["engine"] == NNCF:
            return self._bound(model, nncf_quantize(model, ctx.calibration_feeds, floats, ctx.cache))
        if params["engine"] == ORT:
            return ort_quantize(model, ctx.calibration_feeds, floats, params,
                                COMPUTE_OPS if params["scope"] == "compute" else None, ctx.cache)
        table = range_table(ctx.cache, ctx.calibration_feeds, params["calibrate_method"])
        out = quantize(model, set(site.nodes), table, params["activation_type"], params["weight_type"],
                       params["per_channel"], params["placement"])
        return self._bound(model, out) if params["placement"] == "inputs" else out

    @staticmethod
    def _bound(model, out):
        if ExecutionPath.of(model).runtime != form_path().runtime:
            # OpenVINO's form is a plan for OpenVINO (ONNX Runtime runs it in float); its float
            # remainder in f32 there, and `binding` may move it (bf16, or back)
            form_path().write_to(out)
        return out
