"""`hwtune doctor`: what is slowing a running TensorFlow job, from measurements.

samples (the recorded data) <- sampling (reads /proc, the cgroup, NVML) -> analysis (a pure
function of the samples: the bottleneck and the findings) -> report (text or JSON).
docs/doctor.md explains how the verdict is decided.
"""
