"""Static int8 quantization in QDQ form (the format of ONNX Runtime's quantize_static), written
directly: one pass over the graph, linear in its size. ONNX Runtime's own tool is quadratic in
the node count (seconds on a large graph), too slow to apply inside a search.

Calibration (calibration.py) keeps one range per float activation; the scales and zero points
come from those ranges and the weights (params.py); the rewrite (rewrite.py) writes the form.

Format, as ONNX Runtime writes it: activations read by a quantized op go through
QuantizeLinear -> DequantizeLinear (per tensor, asymmetric); weights of Conv/MatMul/Gemm are
stored int8/uint8 (per channel or per tensor) behind a DequantizeLinear; biases int32 with
scale = input scale x weight scale; the output of a quantized op goes through Q -> DQ.
Relu/Clip in scope right after a quantized op are folded into that op's output range (the
saturating Q computes them); MaxPool/Reshape/Flatten share their input's scale.

Placement "inputs" is OpenVINO's convention (what NNCF writes): only what a quantized op reads
is quantized (activations symmetric, zero point 0: uint8 where the calibrated range is
non-negative, else int8), biases stay float and outputs stay float. OpenVINO's CPU plugin runs
such a Conv/MatMul as an int8 kernel with a float output; ONNX Runtime fuses only the
"inputs_outputs" form into its QLinear kernels."""
