"""Judging a plan: the analytic judge and the measured backends (fbgemm / torch TBE kernels on CPU or GPU, the
torchrun all-to-all program), the measurement cache, and cost-data collection. Imports the core, shardopt.data and
costmodels; never a solver."""
