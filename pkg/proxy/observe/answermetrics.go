package observe

import (
	"math/bits"
	"sync/atomic"

	"github.com/miekg/dns"

	"github.com/meshdns/meshdns/pkg/metric"
)

// Every answer is timed and sized (meshdns_dns_answer_duration_seconds,
// meshdns_dns_response_size_bytes). Bucket bounds are powers of two so an
// observation finds its bucket with one bits.Len64, and sums are integers
// (nanoseconds, bytes) kept with one atomic add: no float search, no CAS
// loop.

// answerRcode buckets response codes into the few classes the answer
// histogram is labelled by.
type answerRcode uint8

const (
	arNoError answerRcode = iota
	arNXDomain
	arServFail
	arOther
	nAnswerRcodes
)

var answerRcodeNames = [nAnswerRcodes]string{"noerror", "nxdomain", "servfail", "other"}

func classifyAnswerRcode(rc int) answerRcode {
	switch rc {
	case dns.RcodeSuccess:
		return arNoError
	case dns.RcodeNameError:
		return arNXDomain
	case dns.RcodeServerFailure:
		return arServFail
	}
	return arOther
}

// Duration buckets: 256ns, then ×4 up to 2^32ns (4.3s, past any upstream
// timeout). A table answer lands in the first two.
const (
	durMinShift  = 8
	nDurBuckets  = 13
	sizeMinShift = 6 // 64 bytes, then ×2 up to 64 KiB
	nSizeBuckets = 11
)

var (
	answerDurationBuckets = pow2Buckets(durMinShift, 2, nDurBuckets, 1e-9)
	responseSizeBuckets   = pow2Buckets(sizeMinShift, 1, nSizeBuckets, 1)
)

// pow2Buckets returns n bounds 2^shift, 2^(shift+step), ... times unit.
func pow2Buckets(shift, step, n int, unit float64) []float64 {
	b := make([]float64, n)
	for i := range b {
		b[i] = float64(uint64(1)<<(shift+i*step)) * unit
	}
	return b
}

// durBucket is the index of the smallest bound 2^(8+2i) ns >= ns, or
// nDurBuckets (+Inf).
func durBucket(ns uint64) int {
	if ns == 0 {
		return 0
	}
	b := bits.Len64(ns - 1) // smallest b with ns <= 2^b
	if b <= durMinShift {
		return 0
	}
	return min((b-durMinShift+1)/2, nDurBuckets)
}

// sizeBucket is the index of the smallest bound 2^(6+i) >= n, or
// nSizeBuckets (+Inf).
func sizeBucket(n uint64) int {
	if n == 0 {
		return 0
	}
	b := bits.Len64(n - 1)
	if b <= sizeMinShift {
		return 0
	}
	return min(b-sizeMinShift, nSizeBuckets)
}

// durHistogram and sizeHistogram count integer observations, each with a
// weight (a sampled observation stands for weight answers), per bucket
// (not cumulative; the last is +Inf). Two types because Go generics cannot
// range over array lengths.
type durHistogram struct {
	counts [nDurBuckets + 1]atomic.Uint64
	sum    atomic.Uint64 // nanoseconds
}

func (h *durHistogram) observe(ns, weight uint64) {
	h.counts[durBucket(ns)].Add(weight)
	h.sum.Add(ns * weight)
}

func (h *durHistogram) collect(emit func(metric.Series), labelValues ...string) {
	var cum [nDurBuckets + 1]uint64
	if emitCumulative(h.counts[:], cum[:]) {
		emit(metric.Series{LabelValues: labelValues, Counts: cum[:], Sum: float64(h.sum.Load()) * 1e-9})
	}
}

type sizeHistogram struct {
	counts [nSizeBuckets + 1]atomic.Uint64
	sum    atomic.Uint64 // bytes
}

func (h *sizeHistogram) observe(n, weight uint64) {
	h.counts[sizeBucket(n)].Add(weight)
	h.sum.Add(n * weight)
}

func (h *sizeHistogram) collect(emit func(metric.Series), labelValues ...string) {
	var cum [nSizeBuckets + 1]uint64
	if emitCumulative(h.counts[:], cum[:]) {
		emit(metric.Series{LabelValues: labelValues, Counts: cum[:], Sum: float64(h.sum.Load())})
	}
}

// emitCumulative fills cum with the running totals of counts and reports
// whether there was any observation.
func emitCumulative(counts []atomic.Uint64, cum []uint64) bool {
	var n uint64
	for i := range counts {
		n += counts[i].Load()
		cum[i] = n
	}
	return n > 0
}
