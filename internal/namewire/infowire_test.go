package namewire_test

import (
	"fmt"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/meshdns/meshdns/internal/namewire"
)

// clusterInfos are n NameInfos in wire form, shaped as clusterTable's:
// one in 20 an ExternalName, one in 10 headless with 3 to 10 endpoints
// behind one port, the others a ClusterIP with one or two named ports.
func clusterInfos(n int) [][]byte {
	out := make([][]byte, n)
	for i := range n {
		ns := fmt.Sprintf("ns-%d", i%100)
		m := &namewire.NameInfo{Registry: "Kubernetes", Shortname: fmt.Sprintf("svc-%d", i), Namespace: ns}
		switch {
		case i%20 == 7:
			m.CanonicalName = fmt.Sprintf("ext-%d.example.com", i)
		case i%10 == 3:
			m.Ports = []namewire.Port{{Name: "http", Port: 8080, Protocol: "TCP"}}
			for e := range 3 + i%8 {
				m.Endpoints = append(m.Endpoints, namewire.Endpoint{
					Hostname: fmt.Sprintf("pod-%d", e),
					IPs:      []string{fmt.Sprintf("10.%d.%d.%d", 128+e, i>>8&255, i&255)},
				})
			}
		default:
			m.IPs = []string{fmt.Sprintf("10.%d.%d.%d", i>>16&255, i>>8&255, i&255)}
			m.Ports = []namewire.Port{{Name: "http", Port: 80, Protocol: "TCP"}}
			if i%2 == 0 {
				m.Ports = append(m.Ports, namewire.Port{Name: "grpc", Port: 9090, Protocol: "TCP"})
			}
		}
		out[i] = m.Append(nil)
	}
	return out
}

// BenchmarkUnmarshalCluster decodes cluster-shaped NameInfos one after
// another into one NameInfo, as an agent's table build does; an op is
// one name.
func BenchmarkUnmarshalCluster(b *testing.B) {
	infos := clusterInfos(1000)
	var info namewire.NameInfo
	b.ReportAllocs()
	start := cpuTime(b) // less noisy than wall time on a shared machine
	i := 0
	for b.Loop() {
		if err := info.Unmarshal(infos[i]); err != nil {
			b.Fatal(err)
		}
		if i++; i == len(infos) {
			i = 0
		}
	}
	b.ReportMetric(float64((cpuTime(b)-start).Nanoseconds())/float64(b.N), "cpu-ns/op")
}

// A NameInfo decoding a table's names in turn, reusing what it held
// before, decodes each as a new one does.
func TestUnmarshalInTurn(t *testing.T) {
	infos := clusterInfos(400)
	var reused namewire.NameInfo
	for round := range 2 {
		for i, in := range infos {
			var alone namewire.NameInfo
			if err := alone.Unmarshal(in); err != nil {
				t.Fatalf("%d: %v", i, err)
			}
			if err := reused.Unmarshal(in); err != nil {
				t.Fatalf("round %d, %d: %v", round, i, err)
			}
			if diff := cmp.Diff(&alone, &reused, equate); diff != "" {
				t.Fatalf("round %d, %d: (-alone +reused):\n%s", round, i, diff)
			}
		}
	}
}

// A NameInfo that decoded names from the wire decodes JSON as a new one
// does, and the other way round: what Unmarshal keeps past its lists'
// ends for the next name must not show through DecodeJSON, nor reuse
// what DecodeJSON made.
func TestUnmarshalThenJSON(t *testing.T) {
	infos := clusterInfos(20)
	js := []byte(`{"endpoints": [{"ips": ["10.0.0.1"]}, {"hostname": "b", "ips": ["10.0.0.2"]}, {"ips": ["10.0.0.3"]}]}`)
	var reused namewire.NameInfo
	for _, i := range []int{13, 3} { // 6 endpoints, then 3
		if err := reused.Unmarshal(infos[i]); err != nil {
			t.Fatal(err)
		}
	}
	if err := reused.Unmarshal(infos[0]); err != nil { // none
		t.Fatal(err)
	}
	var alone namewire.NameInfo
	if err := alone.DecodeJSON(js); err != nil {
		t.Fatal(err)
	}
	if err := reused.DecodeJSON(js); err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(&alone, &reused, equate); diff != "" {
		t.Fatalf("(-alone +after Unmarshal):\n%s", diff)
	}
	// And back: a caller may keep a shallow copy of an endpoint
	// DecodeJSON made.
	kept := reused.Endpoints[0]
	if err := reused.Unmarshal(infos[13]); err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(alone.Endpoints[0], kept); diff != "" {
		t.Fatalf("an endpoint kept changed (-want +kept):\n%s", diff)
	}
	var wire namewire.NameInfo
	if err := wire.Unmarshal(infos[13]); err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(&wire, &reused, equate); diff != "" {
		t.Fatalf("(-alone +after DecodeJSON):\n%s", diff)
	}
}
