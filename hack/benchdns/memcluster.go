package main

import (
	"bufio"
	"context"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/encoding"
	_ "google.golang.org/grpc/encoding/proto" // registers the proto codec rawCodec delegates to
	"google.golang.org/grpc/mem"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"

	meshdnsv1 "github.com/meshdns/meshdns/proto/meshdns/v1"
)

// A table shaped like a cluster, beside the plain names: what a control
// plane sends for Kubernetes Services (registry, short name and namespace,
// so alternate names and search expansions; named ports for SRV; headless
// services with endpoints; ExternalNames). Service i is name memName(i):
// 5% ExternalName (i%20 == 7), 10% headless with 3-10 endpoints
// (i%10 == 3), the rest ClusterIP with 1-2 named ports and the address
// memAddr(i, changed), so the names the benchmark waits for (0, the last,
// and the last changed) are ClusterIP ones.

const (
	shapePlain   = "plain"
	shapeCluster = "cluster"
)

func clusterInfo(i, changed int) *meshdnsv1.NameInfo {
	ns := "ns-" + strconv.Itoa(i%namespaces)
	info := &meshdnsv1.NameInfo{Registry: "Kubernetes", Shortname: "svc-" + strconv.Itoa(i), Namespace: ns}
	gen := 0
	if i < changed {
		gen = 1
	}
	switch {
	case i%20 == 7:
		info.CanonicalName = fmt.Sprintf("ext-%d-%d.example.com", i, gen)
	case i%10 == 3:
		info.Ports = []*meshdnsv1.Port{{Name: "http", Port: 8080, Protocol: "TCP"}}
		for e := range 3 + i%8 {
			info.Endpoints = append(info.Endpoints, &meshdnsv1.Endpoint{Hostname: fmt.Sprintf("pod-%d", e),
				Ips: []string{fmt.Sprintf("10.%d.%d.%d", 128+gen*16+e, byte(i>>8), byte(i))}})
		}
	default:
		info.Ips = []string{memAddr(i, changed)}
		info.Ports = []*meshdnsv1.Port{{Name: "http", Port: 80, Protocol: "TCP"}}
		if i%2 == 0 {
			info.Ports = append(info.Ports, &meshdnsv1.Port{Name: "grpc", Port: 9090, Protocol: "TCP"})
		}
	}
	return info
}

// clusterTable is the cluster-shaped table of n services, the first
// changed of them changed.
func clusterTable(n, changed int) *meshdnsv1.NameTable {
	nt := &meshdnsv1.NameTable{Table: make(map[string]*meshdnsv1.NameInfo, n), AuthoritativeZones: []string{"cluster.local"}}
	for i := range n {
		nt.Table[memName(i)] = clusterInfo(i, changed)
	}
	return nt
}

// writeClusterTable writes the cluster-shaped table as a --nametable-file.
func writeClusterTable(dir string, n, changed int) (string, error) {
	b, err := protojson.Marshal(clusterTable(n, changed))
	if err != nil {
		return "", err
	}
	path := filepath.Join(dir, fmt.Sprintf("cluster-%d.json", n))
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, b, 0o600); err != nil {
		return "", err
	}
	return path, os.Rename(tmp, path)
}

// writeClusterQueries writes the dnsperf input of the cluster shape: every
// name once, A but for the ExternalNames (CNAME: their A would go to an
// upstream).
func writeClusterQueries(dir string, n int) (string, error) {
	return writeLines(dir, fmt.Sprintf("cluster-queries-%d.txt", n), n, "", "", func(w *bufio.Writer, i int) {
		qtype := "A"
		if i%20 == 7 {
			qtype = "CNAME"
		}
		fmt.Fprintf(w, "%s %s\n", memName(i), qtype)
	})
}

// tableServer is a NameDiscoveryService that sends every stream the table
// it holds, full, and a new table full when set replaces it: the
// control plane for the cluster shape, which the control plane's entries
// files cannot describe. Like the control plane it encodes a table once,
// when it is set (names sorted, then the zones), and sends those bytes to
// every stream: a start measures the agent, not the server's marshalling
// (a quarter of a second at 100,000 services) on the cores it shares.
type tableServer struct {
	meshdnsv1.UnimplementedNameDiscoveryServiceServer
	srv *grpc.Server
	lis net.Listener

	mu      sync.Mutex
	version int
	encoded encodedResponse
	changed chan struct{} // closed when the table changes
}

func startTableServer(addr string, t *meshdnsv1.NameTable) (*tableServer, error) {
	lis, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, err
	}
	s := &tableServer{srv: grpc.NewServer(grpc.MaxSendMsgSize(256<<20), grpc.ForceServerCodecV2(rawCodec{encoding.GetCodecV2("proto")})),
		lis: lis, changed: make(chan struct{})}
	if err := s.set(t); err != nil {
		lis.Close()
		return nil, err
	}
	meshdnsv1.RegisterNameDiscoveryServiceServer(s.srv, s)
	go s.srv.Serve(lis)
	return s, nil
}

func (s *tableServer) stop() { s.srv.Stop() }

// set replaces the table; open streams send it.
func (s *tableServer) set(t *meshdnsv1.NameTable) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	version := "cluster-" + strconv.Itoa(s.version+1)
	b, err := proto.MarshalOptions{Deterministic: true}.Marshal(&meshdnsv1.StreamNameTableResponse{
		VersionInfo: version, Nonce: version, Update: &meshdnsv1.StreamNameTableResponse_Full{Full: t}})
	if err != nil {
		return err
	}
	s.encoded = b
	s.version++
	close(s.changed)
	s.changed = make(chan struct{})
	return nil
}

func (s *tableServer) StreamNameTable(st grpc.BidiStreamingServer[meshdnsv1.StreamNameTableRequest, meshdnsv1.StreamNameTableResponse]) error {
	if _, err := st.Recv(); err != nil {
		return err
	}
	ctx, cancel := context.WithCancel(st.Context())
	defer cancel()
	go func() { // ACKs and NACKs: read and dropped
		defer cancel()
		for {
			if _, err := st.Recv(); err != nil {
				return
			}
		}
	}()
	sent := 0
	for {
		s.mu.Lock()
		v, b, changed := s.version, s.encoded, s.changed
		s.mu.Unlock()
		if v != sent {
			if err := st.SendMsg(b); err != nil {
				return err
			}
			sent = v
		}
		select {
		case <-ctx.Done():
			return nil
		case <-changed:
		}
	}
}

// encodedResponse is a StreamNameTableResponse encoded before, which
// rawCodec sends as it is.
type encodedResponse []byte

// rawCodec is the proto codec but for encodedResponse.
type rawCodec struct{ proto encoding.CodecV2 }

func (c rawCodec) Marshal(v any) (mem.BufferSlice, error) {
	if b, ok := v.(encodedResponse); ok {
		return mem.BufferSlice{mem.SliceBuffer(b)}, nil
	}
	return c.proto.Marshal(v)
}

func (c rawCodec) Unmarshal(data mem.BufferSlice, v any) error { return c.proto.Unmarshal(data, v) }

func (c rawCodec) Name() string { return "proto" }

// memAgentClusterStream measures the agent on the cluster-shaped table
// from a stream, with a state directory: the first full table, a full
// table changing 1% of the services and one changing all of them, and a
// restart from the state directory at the same version.
func memAgentClusterStream(cfg *memConfig, n int, files memFiles) ([]memRow, error) {
	grpcAddr, err := freeTCPAddr()
	if err != nil {
		return nil, err
	}
	ts, err := startTableServer(grpcAddr, clusterTable(n, 0))
	if err != nil {
		return nil, err
	}
	defer ts.stop()
	stateRoot := cfg.dir
	if fi, err := os.Stat("/dev/shm"); err == nil && fi.IsDir() {
		stateRoot = "/dev/shm"
	}
	state, err := os.MkdirTemp(stateRoot, fmt.Sprintf("benchmem-cluster-%d-", n))
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(state)
	agentArgs := []string{"--control-plane", grpcAddr, "--state-dir", state, "--resolv-conf", files.resolv}
	r := memRow{server: "meshdns agent", event: "start: stream (cluster)", names: n}
	p, err := startAgentProc(cfg, agentArgs...)
	if err != nil {
		return nil, err
	}
	var rows []memRow
	err = func() error {
		defer p.stop()
		if err := readyAndMeasure(cfg, p, &r, files); err != nil {
			return err
		}
		rows = append(rows, r)
		for _, change := range []struct {
			event   string
			changed int
		}{
			{event: "stream full table 1% (cluster)", changed: max(1, n/100)},
			{event: "stream full table all (cluster)", changed: n},
		} {
			rr, err := replace(cfg, p, r, change.event, func() error {
				return ts.set(clusterTable(n, change.changed))
			}, memName(change.changed-1), memAddr(change.changed-1, change.changed))
			if err != nil {
				return err
			}
			rows = append(rows, rr)
		}
		// Back to the first table, unmeasured, for the restart.
		if err := ts.set(clusterTable(n, 0)); err != nil {
			return err
		}
		_, err := waitAnswer(p.dnsAddr, memName(n-1), memAddr(n-1, 0), time.Minute)
		return err
	}()
	if err != nil {
		return rows, err
	}
	rs := memRow{server: "meshdns agent", event: "start: state dir (cluster)", names: n}
	if p, err = startAgentProc(cfg, agentArgs...); err != nil {
		return rows, err
	}
	err = readyAndMeasure(cfg, p, &rs, files)
	p.stop()
	if err != nil {
		return rows, err
	}
	return append(rows, rs), nil
}
