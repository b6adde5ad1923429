"""The burn-in: a short collective benchmark run on one node, and the judging of its figure against a baseline
kept per GPU model.

`python -m remediate.burnin` (remediate.burnin.__main__) runs it where it is started (the node, under `srun`
or in a Kubernetes Job) and prints one JSON line, its Measurement; `allreduce` is the benchmark (torch, imported
only there); `verdict` judges a Measurement (pure, imported by the actions: no torch).
"""
