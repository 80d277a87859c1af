"""Measuring: wall time, threads, counted FLOPs and bytes, closed-form counts, calibration, attention
costs."""
