"""Profiles kernels with Nsight Compute (`ncu`): finding it, the command (clocks never touched), its CSV parsed into
grader.evidence.kernel_profiles. Groundwork: the grade path does not call it yet. May import the model only."""
