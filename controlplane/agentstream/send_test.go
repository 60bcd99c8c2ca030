package agentstream

import (
	"io"
	"testing"
)

// BenchmarkSendDelta: a fan-out worker's send of a 100-byte message to a
// connection: framed and written by the caller, no allocation.
func BenchmarkSendDelta(b *testing.B) {
	h := newTestHandler()
	_, addr := newTestServer(b, Config{Handler: h})
	c := dialRaw(b, addr)
	c.open(1, testMethod)
	c.send(1, []byte("go"), false)
	st := <-h.st
	go func() { _, _ = io.Copy(io.Discard, c.conn) }()
	msg := [][]byte{make([]byte, 100)}
	b.ReportAllocs()
	for b.Loop() {
		if err := st.Send(msg); err != nil {
			b.Fatal(err)
		}
	}
}
