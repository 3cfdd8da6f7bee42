"""The bench's CPU meter and what a storm row says of the free CPU."""

from __future__ import annotations

import subprocess
import sys

from bench.cases import bootstorm
from bench.procstat import CpuMeter


def test_a_process_gone_before_the_stop_counts_for_nothing() -> None:
    # A process that ends within the interval (a CLI run by someone else, found
    # at the start) takes its count with it: nothing, never a negative figure.
    busy = subprocess.Popen(
        [sys.executable, "-c", "sum(range(3_000_000)); input()"], stdin=subprocess.PIPE
    )
    meter = CpuMeter({"gone": [busy.pid]}, include_services=False).start()
    busy.communicate(b"\n", timeout=60)
    assert meter.stop()["gone"] == 0


def test_a_process_there_at_both_ends_counts_what_it_used() -> None:
    child = subprocess.Popen(
        [sys.executable, "-c", "input(); sum(range(20_000_000)); input()"], stdin=subprocess.PIPE
    )
    meter = CpuMeter({"child": [child.pid]}, include_services=False).start()
    assert child.stdin is not None
    child.stdin.write(b"\n")
    child.stdin.flush()
    subprocess.run([sys.executable, "-c", "import time; time.sleep(1.5)"], check=True)
    used = meter.stop()["child"]
    child.communicate(b"\n", timeout=60)
    assert used > 0.1


def test_free_cpu_says_no_free_core_below_one() -> None:
    # 2 cores, 1.3 busy over 10 s, the run's processes 1.2 of them: 0.7 free.
    row = bootstorm.free_cpu(2, 1.3, 10.0, 12.0)
    assert row["free_cores"] == 0.7 and row["free_core_seconds"] == 7.0
    assert row["ours_cores"] == 1.2
    assert row["cpu_free"].endswith(": no free core")
    assert "others 0.10" in row["cpu_free"]
    assert not bootstorm.free_cpu(2, 0.9, 10.0, 9.0)["cpu_free"].endswith("no free core")


def test_allowed_ratio_is_what_the_free_cpu_allows() -> None:
    assert bootstorm.allowed_ratio({"ours_cores": 1.0, "free_cores": 0.5}) == 1.5
    assert bootstorm.allowed_ratio({"ours_cores": 0.0, "free_cores": 0.5}) is None
