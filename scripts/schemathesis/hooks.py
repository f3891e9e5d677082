"""Schemathesis hooks for the decider's REST API (services/deciderserver TestSchemathesis).

sluice_server_fault replaces the built-in not_a_server_error check, which fails every 5xx.
The decider answers 503 by contract on Decide when no engine can take the request (every
compatible bucket refused admission, no candidates left in a stage, none healthy) or when it
sheds load; the fuzzer's own writes (draining and removing engines, replacing buckets) bring
those states about. Those 503s are accepted only with the documented ErrorInfo reason; any
other 5xx, and a 503 elsewhere or with another reason, fails the run.
"""

import json

import schemathesis

# google.rpc.ErrorInfo reasons a Decide may carry with 503 Unavailable (README: errors).
DECIDE_UNAVAILABLE_REASONS = frozenset(
    {
        "ADMISSION_REJECTED",
        "NO_CANDIDATES",
        "NO_PREFILL_CANDIDATES",
        "NO_DECODE_CANDIDATES",
        "NO_HEALTHY_ENGINES",
        "DECIDER_OVERLOADED",
    }
)


def _reasons(response):
    try:
        body = json.loads(response.content)
    except ValueError:
        return []
    if not isinstance(body, dict):
        return []
    return [d.get("reason") for d in body.get("details") or [] if isinstance(d, dict)]


@schemathesis.check
def sluice_server_fault(ctx, response, case):
    """A 5xx is a server fault unless it is a Decide 503 with a documented reason."""
    status = response.status_code
    if status < 500:
        return None
    reasons = _reasons(response)
    if (
        status == 503
        and case.operation.method.upper() == "POST"
        and case.operation.path == "/v1/decide"
        and DECIDE_UNAVAILABLE_REASONS.intersection(reasons)
    ):
        return None
    raise AssertionError(
        f"{case.operation.method.upper()} {case.operation.path} answered {status} "
        f"(ErrorInfo reasons {reasons or 'none'}): a server fault"
    )
