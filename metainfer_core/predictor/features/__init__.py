"""What the predictor reads: a kernel's row (its features joined with the target's spec), a plan's kernel graph and its plan-level terms."""
