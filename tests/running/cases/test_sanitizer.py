"""compute-sanitizer memcheck reports become oob-read / oob-write findings that name the buffer."""

from __future__ import annotations

import shutil
import sys
from pathlib import Path

import pytest

from grader.authoring.spec import load_assignment
from grader.running.cases.battery import Battery
from grader.running.cases.sanitizer import memcheck_findings, parse_memcheck

# The format of compute-sanitizer's memcheck (CUDA 12/13), two reports and the summary.
MEMCHECK_OUTPUT = """\
========= COMPUTE-SANITIZER
========= Invalid __global__ read of size 4 bytes
=========     at row_mean_var_kernel+0x2f0
=========     by thread (5,0,0) in block (0,0,0)
=========     Address 0x7f6510c61a80 is out of bounds
=========     and is 398,976 bytes after the nearest allocation at 0x7f6510c00000 of size 1,024 bytes
=========
========= Invalid __global__ read of size 4 bytes
=========     at row_mean_var_kernel+0x2f0
=========     by thread (6,0,0) in block (0,0,0)
=========     Address 0x7f6510c61a84 is out of bounds
=========     and is 398,980 bytes after the nearest allocation at 0x7f6510c00000 of size 1,024 bytes
=========
========= Invalid __global__ write of size 4 bytes
=========     at layernorm_forward_kernel+0x90
=========     by thread (0,0,0) in block (2,0,0)
=========     Address 0x87654320 is out of bounds
=========     and is 3,559,277,024 bytes before the nearest allocation at 0x7f6510d00000 of size 4,096 bytes
=========
========= ERROR SUMMARY: 3 errors
"""


def test_memcheck_reports_are_parsed() -> None:
    reports = parse_memcheck(MEMCHECK_OUTPUT)
    assert [r.access for r in reports] == ["read", "read", "write"]
    first = reports[0]
    assert first.kernel == "row_mean_var_kernel" and first.size == 4
    assert first.thread == (5, 0, 0) and first.block == (0, 0, 0)
    assert first.address == 0x7F6510C61A80 and first.problem == "out of bounds"
    assert (first.distance, first.side, first.nearest, first.nearest_size) == (
        398976,
        "after",
        0x7F6510C00000,
        1024,
    )
    assert reports[2].distance == 3_559_277_024 and reports[2].side == "before"
    assert parse_memcheck("========= ERROR SUMMARY: 0 errors\n") == []


def test_findings_name_the_buffer_and_the_program() -> None:
    buffers = {"x": (0x7F6510C00000, 1024), "out": (0x7F6510D00000, 4096), "mean": (0x7F6510E00000, 256)}
    findings = memcheck_findings(parse_memcheck(MEMCHECK_OUTPUT), buffers)
    assert [f.trap for f in findings] == ["oob-read", "oob-write"]
    assert "2 invalid read(s) of 4 bytes in row_mean_var_kernel" in findings[0].message
    assert "398976 bytes after the buffer `x`, the nearest allocation" in findings[0].message
    assert "program [0, 0, 0]" in findings[0].message
    assert (
        "bytes before the buffer `out`" in findings[1].message and "program [2, 0, 0]" in findings[1].message
    )


def test_an_access_near_no_buffer_of_the_case_says_so() -> None:
    findings = memcheck_findings(parse_memcheck(MEMCHECK_OUTPUT), {"mean": (0x1000, 256)})
    assert findings and all("not near any buffer of the case" in f.message for f in findings)


def test_the_h200_format_is_understood() -> None:
    # compute-sanitizer on the H200 (CUDA 13): "Access to 0x...", and the kernel's source line
    text = (Path(__file__).resolve().parents[2] / "data" / "memcheck-h200.txt").read_text(encoding="utf-8")
    reports = parse_memcheck(text)
    assert len(reports) == 3 and {r.access for r in reports} == {"read"}
    assert reports[0].kernel == "row_mean_var_kernel" and reports[0].source == "fused_layers.py, line 148"
    assert (
        reports[0].distance == 393873
        and reports[0].nearest == 0x7FDD2A801400
        and reports[0].nearest_size == 2068
    )
    findings = memcheck_findings(reports, {"x": (0x7FDD2A800000, 2248), "var": (0x7FDD2A801400, 2068)})
    assert len(findings) == 1 and findings[0].trap == "oob-read"
    assert (
        "3 invalid read(s) of 4 bytes in row_mean_var_kernel (fused_layers.py, line 148)"
        in findings[0].message
    )
    assert "393873 bytes after the buffer `var`" in findings[0].message


@pytest.mark.slow
def test_a_kernel_case_under_the_tool_names_what_it_reports(tmp_path, repo_root) -> None:
    # The plumbing of --sanitize on the CPU: a stand-in tool wraps the worker and reports a read past
    # the first buffer of each launch; the case fails with oob-read naming that buffer and the line.
    submission = tmp_path / "fused_layers.py"
    shutil.copyfile(repo_root / "reference" / "fused_layers" / "reference.py", submission)
    assignment = load_assignment(repo_root / "assignments" / "fused_layers" / "assignment.toml")
    tool = (sys.executable, str(Path(__file__).resolve().parents[2] / "data" / "fake_memcheck.py"))
    battery = Battery(assignment, submission, "interpreter", 3, sanitizer=tool)
    try:
        case = next(c for c in assignment.cases if c.target == "row_mean_var_kernel")
        result = battery.run_case(case)
    finally:
        battery.close()
    assert not result.passed and result.traps == ("oob-read",), (result.traps, result.message)
    assert "1 invalid read(s) of 4 bytes in fake_kernel (fused_layers.py, line 148)" in result.message
    assert "by program [1, 0, 0]" in result.message and "64 bytes after the buffer `x`" in result.message
