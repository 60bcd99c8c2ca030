package observe

import (
	"github.com/miekg/dns"

	"github.com/meshdns/meshdns/pkg/metric"
)

// Every answer is timed and sized (meshdns_dns_answer_duration_seconds,
// meshdns_dns_response_size_bytes) in metric.Pow2Histograms: bucket bounds
// are powers of two so an observation finds its bucket with one
// bits.Len64, and sums are integers (nanoseconds, bytes) kept with one
// atomic add: no float search, no CAS loop.

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
// timeout); a table answer lands in the first two. Size buckets: 64 bytes,
// then ×2 up to 64 KiB. Counted in nanoseconds and bytes.
const (
	nDurBuckets  = 13
	nSizeBuckets = 11
)

var (
	answerDurationBuckets = metric.NewPow2Buckets(8, 2, nDurBuckets, 1e-9)
	responseSizeBuckets   = metric.NewPow2Buckets(6, 1, nSizeBuckets, 1)
)
