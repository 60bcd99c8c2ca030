// Package bench holds benchmarks only: pkg/dnstap's encoder and writer
// against golang-dnstap's generated code and its Frame Streams output
// (golang-framestream), on the same messages. See pkg/dnstap/README.md.
package bench
