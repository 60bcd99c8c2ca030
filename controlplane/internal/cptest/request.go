package cptest

import meshdnsv1 "github.com/meshdns/meshdns/proto/meshdns/v1"

// Send sends r as it is: a report, a repeated answer, a malformed one.
func (a *Agent) Send(r *meshdnsv1.StreamNameTableRequest) {
	a.t.Helper()
	if err := a.stream.Send(r); err != nil {
		a.t.Fatal(err)
	}
}
