// The dnstap writer measured against golang-dnstap and golang-framestream,
// the well-kept libraries it does not use: a module of its own, so neither
// library (nor the protobuf runtime they bring) enters the main module's
// build, go.mod or any binary.
module github.com/meshdns/meshdns/pkg/dnstap/internal/bench

go 1.26.0

require (
	github.com/dnstap/golang-dnstap v0.4.0
	github.com/meshdns/meshdns v0.0.0
	google.golang.org/protobuf v1.36.12
)

require (
	github.com/farsightsec/golang-framestream v0.3.0 // indirect
	github.com/miekg/dns v1.1.73 // indirect
	golang.org/x/net v0.60.0 // indirect
	golang.org/x/sys v0.48.0 // indirect
)

replace github.com/meshdns/meshdns => ../../../..
