package iptables

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

// TestReconcilerRun checks the periodic loop against a fake runner that
// shows no rules of ours: every check reports drift, Repair writes the
// rules, and Run returns nil once its context ends.
func TestReconcilerRun(t *testing.T) {
	tests := []struct {
		name        string
		repair      bool
		wantRestore bool
	}{
		{name: "report only", repair: false, wantRestore: false},
		{name: "repair", repair: true, wantRestore: true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			f := &fakeRunner{out: map[string]string{"iptables-nft-save": "", "ip6tables-nft-save": ""}}
			m, err := New(Config{ProxyUIDs: []uint32{1337}, Nameservers: addrs("10.96.0.10"), Backend: NFT, Runner: f})
			if err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			var mu sync.Mutex
			var got []bool
			rec, err := NewReconciler(ReconcilerConfig{Manager: m, Interval: time.Millisecond, Repair: tc.repair,
				OnCheck: func(drift bool, err error) {
					if err != nil {
						t.Errorf("check error: %v", err)
					}
					mu.Lock()
					defer mu.Unlock()
					got = append(got, drift)
					if len(got) == 3 {
						cancel()
					}
				}})
			if err != nil {
				t.Fatal(err)
			}
			done := make(chan error, 1)
			go func() { done <- rec.Run(ctx) }()
			select {
			case err := <-done:
				if err != nil {
					t.Errorf("Run() = %v, want nil", err)
				}
			case <-time.After(10 * time.Second):
				t.Fatal("Run did not return after its context ended")
			}
			mu.Lock()
			defer mu.Unlock()
			if diff := cmp.Diff([]bool{true, true, true}, got[:3]); diff != "" {
				t.Errorf("drift reports (-want +got):\n%s", diff)
			}
			f.mu.Lock()
			defer f.mu.Unlock()
			if restored := len(f.inputs) > 0; restored != tc.wantRestore {
				t.Errorf("restore ran: %v, want %v", restored, tc.wantRestore)
			}
			for _, in := range f.inputs {
				if !strings.HasPrefix(in, "iptables-nft-restore") && !strings.HasPrefix(in, "ip6tables-nft-restore") {
					t.Errorf("repair ran %q, want the nft backend's restore", strings.SplitN(in, "\n", 2)[0])
				}
			}
		})
	}
}

func TestReconcilerCheckError(t *testing.T) {
	m, err := New(Config{ProxyUIDs: []uint32{1337}, CaptureAllDNS: true, Backend: Legacy, Runner: &fakeRunner{out: map[string]string{}}})
	if err != nil {
		t.Fatal(err)
	}
	rec, err := NewReconciler(ReconcilerConfig{Manager: m})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := rec.Reconcile(context.Background()); err == nil {
		t.Error("Reconcile succeeded although iptables-legacy-save cannot run")
	}
	if _, err := NewReconciler(ReconcilerConfig{}); err == nil {
		t.Error("NewReconciler accepted a config without a Manager")
	}
}
