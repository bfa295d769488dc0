"""The graph layer every stage stands on: tensor shapes and types (tensors), work per node
(flops), the grouping of nodes into kernels (kernels), the plan's directives carried in node
and model metadata (directives), the liveness memory planner (memory) and graph utilities
(graph_utils). It imports nothing of meta-infer's above it."""
