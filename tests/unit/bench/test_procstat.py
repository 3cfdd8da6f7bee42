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


def test_ratio_limit_is_the_flat_target_with_a_free_core() -> None:
    assert bootstorm.ratio_limit(True, 2.4) == bootstorm.RATIO_TARGET


def test_ratio_limit_without_a_free_core_is_a_share_of_what_the_idle_cpu_allowed() -> None:
    # 0.5 core idle on a run using 1.0: at most 1.5x; held to 60 % of the gain.
    assert bootstorm.ratio_limit(False, 1.5) == 1.3
    # Never above the flat target, nothing to judge when next to nothing was idle.
    assert bootstorm.ratio_limit(False, 3.0) == bootstorm.RATIO_TARGET
    assert bootstorm.ratio_limit(False, 1.02) is None
    assert bootstorm.ratio_limit(False, None) is None


def test_by_process_gives_each_process_and_the_machine_per_boot_and_per_core() -> None:
    # 100 boots over 10 s on 2 cores, 1.5 of them busy: the run's processes 1.2
    # cores (worker 0.8, compute 0.4), a streamed client 0.1, the rest others'.
    cpu = bootstorm.by_process({"worker 1": 8.0, "compute": 4.0}, 1.0, True, 100, 10.0, 2, 1.5)
    assert cpu["worker 1"] == {"ms_per_boot": 80.0, "core_pct": 80.0}
    assert cpu["client"] == {"ms_per_boot": 10.0, "core_pct": 10.0}
    assert cpu["others"] == {"ms_per_boot": 20.0, "core_pct": 20.0}
    assert cpu["idle"] == {"ms_per_boot": 50.0, "core_pct": 50.0}
    # A backlog's client ran before the span: its CPU per boot only, not in the others'.
    backlog = bootstorm.by_process({"worker 1": 8.0}, 1.0, False, 100, 10.0, 2, 1.0)
    assert backlog["client"] == {"ms_per_boot": 10.0, "core_pct": None}
    assert backlog["others"]["core_pct"] == 20.0
