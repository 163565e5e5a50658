"""Does memory work between matmuls make each matmul faster on a power-capped GPU? (issue 47: the reference's tf32
matmul reads ~5.7% faster with fresh samples, whose poison and input restores run between the timed calls.)

    python benchmarks/matmul_duty_cycle.py

Times a 4096^3 tf32 torch.matmul in CUDA graphs three ways, in turn, five rounds each: back to back (`plain`, the
old samples), each call preceded by the output's poison (`poison`, what a fresh sample of perf-linear-gelu does
outside the events around the call), and by the poison and a restore of both inputs (`restore`). A round replays its
graph for about 0.3 s and reads the last replay, so the power limiter has settled (session 12's first try read
single 22 ms replays: the GPU's warming up, 0.34 -> 0.38 ms, hid any difference). Prints the median ms per call of
each way, and the SM clock NVML read meanwhile."""

from __future__ import annotations

import statistics
import threading
import time

import torch

N, CALLS, ROUNDS, REPLAYS = 4096, 60, 5, 12  # a round: 12 replays of 60 calls (~0.3 s), the last one read


def main() -> None:
    torch.backends.cuda.matmul.allow_tf32 = True
    a, b = (torch.randn(N, N, device="cuda") for _ in range(2))
    keep_a, keep_b, out = a.clone(), b.clone(), torch.empty(N, N, device="cuda")
    starts = [torch.cuda.Event(enable_timing=True, external=True) for _ in range(CALLS)]
    ends = [torch.cuda.Event(enable_timing=True, external=True) for _ in range(CALLS)]
    s = torch.cuda.Stream()
    with torch.cuda.stream(s):
        for _ in range(3):
            torch.matmul(a, b, out=out)
    torch.cuda.synchronize()
    plain = torch.cuda.CUDAGraph()
    with torch.cuda.graph(plain):
        starts[0].record()
        for _ in range(CALLS):
            torch.matmul(a, b, out=out)
        ends[0].record()

    def fresh_graph(restore: bool) -> tuple[torch.cuda.CUDAGraph, list[torch.cuda.Event], list[torch.cuda.Event]]:
        f_starts = [torch.cuda.Event(enable_timing=True, external=True) for _ in range(CALLS)]
        f_ends = [torch.cuda.Event(enable_timing=True, external=True) for _ in range(CALLS)]
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            for i in range(CALLS):
                out.fill_(float("nan"))
                if restore:
                    a.copy_(keep_a)
                    b.copy_(keep_b)
                f_starts[i].record()
                torch.matmul(a, b, out=out)
                f_ends[i].record()
        return graph, f_starts, f_ends

    fresh = {"poison": fresh_graph(False), "restore": fresh_graph(True)}
    clocks: dict[str, list[int]] = {"plain": [], "poison": [], "restore": []}
    mode = {"now": ""}
    stop = threading.Event()

    def watch() -> None:
        try:
            import pynvml
            pynvml.nvmlInit()
            handle = pynvml.nvmlDeviceGetHandleByIndex(torch.cuda.current_device())
        except Exception as exc:  # noqa: BLE001
            print("no NVML:", exc)
            return
        while not stop.is_set():
            if mode["now"]:
                clocks[mode["now"]].append(pynvml.nvmlDeviceGetClockInfo(handle, pynvml.NVML_CLOCK_SM))
            time.sleep(0.005)

    watcher = threading.Thread(target=watch, daemon=True)
    watcher.start()
    results: dict[str, list[float]] = {name: [] for name in clocks}
    for _ in range(ROUNDS):
        for name, graph in (("plain", plain), ("poison", fresh["poison"][0]), ("restore", fresh["restore"][0])):
            mode["now"] = name
            for _ in range(REPLAYS):  # long enough for the power limiter to settle; the events keep the last replay's
                graph.replay()
            torch.cuda.synchronize()
            mode["now"] = ""
            if name == "plain":
                results[name].append(starts[0].elapsed_time(ends[0]) / CALLS)
            else:
                _, f_starts, f_ends = fresh[name]
                results[name].append(statistics.mean(f_starts[i].elapsed_time(f_ends[i]) for i in range(CALLS)))
    stop.set()
    for name in results:
        c = clocks[name]
        print(f"{name:7s}: median {statistics.median(results[name]):.4f} ms per call, rounds "
              + " ".join(f"{v:.4f}" for v in results[name])
              + (f"; SM clock median {statistics.median(c)} MHz (min {min(c)}, max {max(c)}, {len(c)} reads)"
                 if c else ""))


if __name__ == "__main__":
    main()
