"""Starts and confines processes: a submission's sandbox and its zygote (`sandbox`, `confinement`), the grader's
side of a worker with every deadline (`client`), each worker's GPU memory (`gpu_memory`, `nvml`) and the GPU's
shared or exclusive slot (`gpu_slot`); what a batch shares among its grades (`shared_zygote`: the reference's zygote,
the sandbox zygotes' template). May import grader.running.worker (the zygote's control channel, the
worker's channel), grader.running.protocol and the model; never cases/, timing/ or judging/."""
