"""The peers' labels and table names, and the accuracy-aware peer's caps: plain data, imported by
the peers (bench/peers.py), the report and the plots alike, so that none of them imports another
to learn a name."""

# the peers, in column order (ORT default first: every ratio is taken against it)
PEERS = ("ort_default", "ort_static", "ort_dynamic", "ov_default", "ov_f32", "ov_nncf_int8", "ov_nncf_aac")
# meta-infer's two plans: the run's weights (the defaults) and weights=latency (what the peers optimise)
PLANS = ("meta_infer", "meta_infer_latency")
NAMES = {"ort_default": "ORT default", "ort_static": "ORT quantize_static", "ort_dynamic": "ORT quantize_dynamic",
         "ov_default": "OpenVINO default", "ov_f32": "OpenVINO f32", "ov_nncf_int8": "OpenVINO+NNCF int8",
         "ov_nncf_aac": "NNCF int8 accuracy-aware", "meta_infer": "meta-infer",
         "meta_infer_latency": "meta-infer weights=latency"}
AAC_ITERATIONS = 3        # layers reverted to float at most (NNCF's max_num_iterations)
AAC_RANKING_SUBSET = 4    # inputs each layer's ranking runs on (NNCF's ranking_subset_size)
AAC_TIMEOUT_S = 300.0     # wall-clock cap: NNCF's ranking cannot be stopped from inside, so it runs in a process
