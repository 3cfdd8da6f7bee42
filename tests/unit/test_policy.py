"""What a user may read about a failure: one table for every failure the
scheduler and the conductor record (faults, ERROR notifications)."""

from __future__ import annotations

import pytest

from scheduler.exceptions import (
    CapacityExceeded,
    Forbidden,
    InvalidRequest,
    MaxRetriesExceeded,
    NoValidHost,
    RequestTimedOut,
    StoreUnavailable,
)
from scheduler.policy import INTERNAL_ERROR_MESSAGE, admin_details, user_reason

HOST = "compute-secret-007"


@pytest.mark.parametrize(
    "exc, user_sees, admin_sees",
    [
        pytest.param(
            NoValidHost(details=f"0/1 hosts available: 1 missing trait X on {HOST}"),
            NoValidHost.USER_MESSAGE,
            HOST,
            id="no-valid-host",
        ),
        pytest.param(
            MaxRetriesExceeded(),
            MaxRetriesExceeded.USER_MESSAGE,
            MaxRetriesExceeded.USER_MESSAGE,
            id="retries-exhausted",
        ),
        pytest.param(
            RequestTimedOut(),
            "The request timed out.",
            "The request timed out.",
            id="re-drives-exhausted",
        ),
        pytest.param(
            InvalidRequest(reason="flavor.vcpus must be an integer"),
            "invalid request: flavor.vcpus must be an integer",
            "flavor.vcpus",
            id="invalid-request",
        ),
        pytest.param(
            Forbidden(reason="forcing a host requires an admin context"),
            "forbidden: forcing a host requires an admin context",
            "forcing a host",
            id="forbidden",
        ),
        pytest.param(
            CapacityExceeded(uuid=HOST, rc="VCPU", requested=1, free=0),
            INTERNAL_ERROR_MESSAGE,
            HOST,
            id="claim-refused",
        ),
        pytest.param(
            StoreUnavailable(reason=f"redis://:s3cret@{HOST}:6379 refused"),
            INTERNAL_ERROR_MESSAGE,
            "refused",
            id="store-down",
        ),
        pytest.param(
            RuntimeError(f"bug near {HOST}"), INTERNAL_ERROR_MESSAGE, "RuntimeError", id="a-bug"
        ),
    ],
)
def test_the_user_reads_only_what_the_policy_allows(
    exc: BaseException, user_sees: str, admin_sees: str
) -> None:
    assert user_reason(exc) == user_sees
    assert HOST not in user_reason(exc)
    assert admin_sees in admin_details(exc)
