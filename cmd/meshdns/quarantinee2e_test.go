package main

import (
	"bytes"
	"context"
	"io"
	"regexp"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/meshdns/meshdns/cmd/internal/cli"
	"github.com/meshdns/meshdns/internal/testkit/testenv"
	meshdnsv1 "github.com/meshdns/meshdns/proto/meshdns/v1"
)

// openStream opens an agent's stream to addr with first as its first
// request and returns its first response's version.
// openStream opens an agent's stream with first; with recv, it returns
// the version of the first response.
func openStream(t *testing.T, addr string, first *meshdnsv1.StreamNameTableRequest, recv bool) string {
	t.Helper()
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	st, err := meshdnsv1.NewNameDiscoveryServiceClient(conn).StreamNameTable(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := st.Send(first); err != nil {
		t.Fatal(err)
	}
	if !recv {
		return ""
	}
	r, err := st.Recv()
	if err != nil {
		t.Fatal(err)
	}
	return r.GetVersionInfo()
}

// TestStatusShowsQuarantineOfControlPlane runs a control plane that
// quarantines a table once one agent reports crashing on it, and reads the
// quarantine with `meshdns status`.
func TestStatusShowsQuarantineOfControlPlane(t *testing.T) {
	grpcAddr, cpAdmin := testenv.FreeAddr(t), testenv.FreeAddr(t)
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		if code := cli.Run(ctx, []string{"controlplane", "--insecure-allow-unauthenticated", "--entries", "../../examples/entries",
			"--grpc-addr", grpcAddr, "--admin-addr", cpAdmin, "--debounce", "10ms", "--log-level", "error",
			"--quarantine-min-agents", "1"}, io.Discard, io.Discard); code != 0 {
			t.Errorf("controlplane exited with %d", code)
		}
	}()
	t.Cleanup(func() { cancel(); wg.Wait() })
	testenv.Eventually(t, "control plane serving", 10*time.Second, func() bool {
		return cli.Run(context.Background(), []string{"status", "--admin-addr", cpAdmin}, io.Discard, io.Discard) == 0
	})
	id := func(pod string) *meshdnsv1.AgentIdentity {
		return &meshdnsv1.AgentIdentity{PodName: pod, Namespace: "team-a", InstanceId: pod + "-1"}
	}
	bad := openStream(t, grpcAddr, &meshdnsv1.StreamNameTableRequest{Identity: id("web-0")}, true)
	// An agent holding another table that reports the view's only version
	// is sent nothing: it keeps its own table.
	openStream(t, grpcAddr, &meshdnsv1.StreamNameTableRequest{Identity: id("web-1"), VersionInfo: "0123456789abcdef", RejectedVersion: bad,
		ErrorDetail: &meshdnsv1.ErrorDetail{Code: 10, Message: "agent died applying " + bad}}, false)

	row := regexp.MustCompile(`(?m)^\S+\s+` + bad + `\s+QUARANTINED\s+1/1\s+-\s+\S+Z\s+agent died applying ` + bad + `$`)
	var out bytes.Buffer
	code := 0
	testenv.Eventually(t, "status showing "+bad+" quarantined", time.Minute, func() bool {
		out.Reset()
		code = cli.Run(context.Background(), []string{"status", "--admin-addr", cpAdmin}, &out, &out)
		return code == 0 && row.MatchString(out.String())
	})
}
