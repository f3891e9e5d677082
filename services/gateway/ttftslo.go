package gateway

import (
	"errors"
	"math"
	"net/http"
	"strconv"
	"strings"
)

// ttftSLOHeader carries a request's time-to-first-token target in milliseconds; it becomes
// DecideRequest.ttft_slo_ms (docs/decisions.md, "TTFT target").
const ttftSLOHeader = "x-ttft-slo-ms"

// ttftSLO reads the target header: nil when absent or blank; NaN when it is not a number, so
// that the decider, which knows whether its configuration enables the preference, refuses it
// (400 INVALID_TTFT_SLO) or ignores it.
func ttftSLO(h http.Header) *float64 {
	v := strings.TrimSpace(h.Get(ttftSLOHeader))
	if v == "" {
		return nil
	}
	ms, err := strconv.ParseFloat(v, 64)
	if err != nil && !errors.Is(err, strconv.ErrRange) { // out of range is ±Inf, above any cap
		ms = math.NaN()
	}
	return &ms
}
