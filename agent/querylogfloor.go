package agent

import (
	"fmt"
	"math"

	"github.com/meshdns/meshdns/pkg/proxy"
)

// The operator's query log (the flags, the control plane's settings and
// the pod's annotation: the floor) is the pod's audit trail, and the
// admin port is reachable by every process of the pod. So what comes in
// through the port (/debug/querylog, SetQueryLog) may only make the log
// more complete: add classes, log a larger share (sample toward 1), cap
// it higher (rate toward 0, no cap); a request that would remove or thin
// out the floor is refused, naming what is protected. While the floor is
// off there is nothing to protect, and the port sets the log as it asks.

// floorError is a runtime change refused because it would lower the
// operator's query log; the admin endpoint answers it with 403.
type floorError struct{ msg string }

func (e *floorError) Error() string { return "query log: " + e.msg }

// covers is the set of classes c logs: all of them when it has LogAll.
func covers(c proxy.QueryLogClass) proxy.QueryLogClass {
	if c&proxy.LogAll != 0 {
		return proxy.LogDenied | proxy.LogNXDomain | proxy.LogServFail | proxy.LogUpstreamError | proxy.LogAll
	}
	return c
}

// sampleEvery is the N of "one in N" (0 and 1 both log each answer).
func sampleEvery(s int) int { return max(s, 1) }

// rateCap is the lines a second a rate lets through (0 is no cap).
func rateCap(r int) int {
	if r == 0 {
		return math.MaxInt
	}
	return r
}

// raise composes the floor with the admin port's patch: p's classes join
// the floor's, its sample and rate count where they log more. Over a
// floor that is off, p applies as it is.
func raise(floor proxy.QueryLogConfig, p queryLogPatch) proxy.QueryLogConfig {
	if floor.Classes == 0 {
		return p.apply(floor)
	}
	c := floor
	if p.Classes != nil {
		c.Classes |= *p.Classes
	}
	if p.Sample != nil && sampleEvery(*p.Sample) < sampleEvery(c.Sample) {
		c.Sample = *p.Sample
	}
	if p.Rate != nil && rateCap(*p.Rate) > rateCap(c.Rate) {
		c.Rate = *p.Rate
	}
	return c
}

// checkRaise returns a *floorError when the request req would lower the
// floor; result is what the log becomes with it.
func checkRaise(floor proxy.QueryLogConfig, req queryLogPatch, result proxy.QueryLogConfig) error {
	if floor.Classes == 0 {
		return nil
	}
	const who = "set by the operator (flags, the control plane's settings or the pod's annotation)"
	if req.Classes != nil {
		if missing := floor.Classes &^ covers(*req.Classes); missing != 0 {
			return &floorError{fmt.Sprintf("classes %s are %s and cannot be removed at runtime; ask for %q",
				missing, who, (floor.Classes | *req.Classes).String())}
		}
	}
	if req.Sample != nil && sampleEvery(*req.Sample) > sampleEvery(floor.Sample) {
		return &floorError{fmt.Sprintf("sample %d: one answer in %d is %s; at runtime the sample may only go toward 1 (every answer)",
			*req.Sample, sampleEvery(floor.Sample), who)}
	}
	if req.Rate != nil && rateCap(*req.Rate) < rateCap(floor.Rate) {
		return &floorError{fmt.Sprintf("rate %d: rate %d (%s) is %s; at runtime the cap may only rise (rate=0 lifts it)",
			*req.Rate, floor.Rate, rateName(floor.Rate), who)}
	}
	// The rate cap counts the lines of every class together: classes
	// added under it would let a flood of ordinary answers take the lines
	// a denial needs.
	if covers(result.Classes)&^covers(floor.Classes) != 0 && result.Rate > 0 {
		return &floorError{fmt.Sprintf("classes %s added under a cap of %d lines a second would take lines from the classes %s %s: lift the cap in the same request (rate=0)",
			result.Classes&^floor.Classes, result.Rate, floor.Classes, who)}
	}
	return nil
}

// rateName says what a rate means.
func rateName(r int) string {
	if r == 0 {
		return "no cap"
	}
	return fmt.Sprintf("at most %d lines a second", r)
}
