package upstream

import (
	"github.com/miekg/dns"

	"github.com/meshdns/meshdns/internal/dnswire"
)

// maxQuestion is the longest question section: a 255-byte name, type, class.
const maxQuestion = dnswire.MaxQuestion

// lowerQuestion checks qwire and writes it lowercased into key; see
// dnswire.LowerQuestion.
func lowerQuestion(key *[maxQuestion]byte, qwire []byte) (nameLen int, err error) {
	return dnswire.LowerQuestion(key, qwire)
}

// questionWire packs q into the question-section form AppendReply takes.
func questionWire(q dns.Question) ([]byte, error) {
	buf := make([]byte, maxQuestion)
	n, err := dns.PackDomainName(dns.Fqdn(q.Name), buf, 0, nil, false)
	if err != nil {
		return nil, err
	}
	buf = append(buf[:n], byte(q.Qtype>>8), byte(q.Qtype), byte(q.Qclass>>8), byte(q.Qclass))
	return buf, nil
}
