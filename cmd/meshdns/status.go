package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	neturl "net/url"
	"strings"
	"syscall"
	"text/tabwriter"
	"time"

	"github.com/meshdns/meshdns/cmd/internal/cli"
	"github.com/meshdns/meshdns/controlplane/server"
)

func init() {
	cli.Register("status", cli.Command{
		Summary: "list the agents connected to the control plane (every replica through the API server, or one with --admin-addr): acked vs current version, last NACK, injected pods not connected (with --kubeconfig, those in safe mode and why, read from their probe port through the API server)",
		Run:     runStatus,
	})
}

// statusHint says how to reach the admin API, which listens on localhost.
const statusHint = "is the control plane running, and its admin port forwarded? " +
	"kubectl -n meshdns-system port-forward deploy/meshdns-controlplane 15014"

func runStatus(ctx context.Context, args []string, stdout, _ io.Writer) error {
	fs := flag.NewFlagSet("status", flag.ContinueOnError)
	fs.SetOutput(stdout)
	f := newFleetFlags(fs, fleetOpts{admin: "admin address of one control plane replica", namespace: "only the agents of this namespace", timeout: 5 * time.Second})
	if err := f.parse(fs, args); err != nil {
		return err
	}
	if !f.direct() {
		return runStatusFleet(ctx, stdout, f)
	}
	ctx, cancel := context.WithTimeout(ctx, f.timeout)
	defer cancel()
	agents, err := fetchAgents(ctx, f.adminAddr)
	if err != nil {
		return err
	}
	if f.namespace != "" {
		kept := agents[:0]
		for _, a := range agents {
			if a.Namespace == f.namespace {
				kept = append(kept, a)
			}
		}
		agents = kept
	}
	if f.output == "json" {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		return enc.Encode(agents)
	}
	if err := printStatus(stdout, agents, f.adminAddr); err != nil {
		return err
	}
	qs, err := fetchQuarantine(ctx, http.DefaultClient, adminURL(f.adminAddr))
	if err != nil {
		return err
	}
	return printQuarantine(stdout, qs)
}

// fetchAgents reads the list of connected agents from the control plane
// whose admin address is addr (host:port, or an http:// or https:// URL).
func fetchAgents(ctx context.Context, addr string) ([]server.AgentInfo, error) {
	if !strings.HasPrefix(addr, "http://") && !strings.HasPrefix(addr, "https://") {
		addr = "http://" + addr
	}
	return fetchAgentsWith(ctx, http.DefaultClient, strings.TrimSuffix(addr, "/")+"/debug/agents")
}

// fetchAgentsWith is fetchAgents over client (a port-forward's).
func fetchAgentsWith(ctx context.Context, client *http.Client, url string) ([]server.AgentInfo, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return nil, cli.Usagef("--admin-addr: %v", err)
	}
	res, err := client.Do(req)
	if err != nil {
		switch {
		case errors.Is(err, syscall.ECONNREFUSED):
			return nil, fmt.Errorf("nothing listens at %s (%s)", url, statusHint)
		case errors.Is(err, context.DeadlineExceeded):
			return nil, fmt.Errorf("no answer from %s within --timeout (%s)", url, statusHint)
		}
		var ue *neturl.Error // says the URL again
		if errors.As(err, &ue) {
			err = ue.Err
		}
		return nil, fmt.Errorf("get %s: %w", url, err)
	}
	defer res.Body.Close()
	body, err := io.ReadAll(io.LimitReader(res.Body, 64<<20))
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", url, err)
	}
	if res.StatusCode != http.StatusOK {
		first, _, _ := strings.Cut(strings.TrimSpace(string(body)), "\n")
		return nil, fmt.Errorf("get %s: %s: %s", url, res.Status, first)
	}
	var agents []server.AgentInfo
	if err := json.Unmarshal(body, &agents); err != nil {
		return nil, fmt.Errorf("%s did not answer with the agent list (is it the admin address of a meshdns control plane?): %w", url, err)
	}
	return agents, nil
}

// syncState is the STATUS column, as istioctl proxy-status says SYNCED or
// STALE: SYNCED when the agent ACKed the current version of its view;
// NACKED when it has not and refused a version; SENT when the current
// version is on its way; STALE when it has not been sent yet.
func syncState(a server.AgentInfo) string {
	switch {
	case a.Acked != "" && a.Acked == a.View:
		return "SYNCED"
	case a.LastNack != "":
		return "NACKED"
	case a.Sent == a.View:
		return "SENT"
	}
	return "STALE"
}

func printStatus(w io.Writer, agents []server.AgentInfo, addr string) error {
	if len(agents) == 0 {
		_, err := fmt.Fprintf(w, "no agents connected to the control plane at %s\n", addr)
		return err
	}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "NAMESPACE\tPOD\tSTATUS\tACKED\tCURRENT\tNACKS\tLAST NACK\tSETTINGS\tAGENT VERSION\tCONNECTED")
	for _, a := range agents {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%d\t%s\t%s\t%s\t%s\n",
			orDash(a.Namespace), orDash(a.Pod), syncState(a), orDash(short(a.Acked, 12)), orDash(short(a.View, 12)),
			a.Nacks, orDash(short(a.LastNack, 60)), settingsSummary(a.Settings), orDash(a.AgentVersion), a.Connected.UTC().Format(time.RFC3339))
	}
	return tw.Flush()
}

// settingsSummary is the SETTINGS column: the settings version (the part
// of CURRENT after "+") and what they hold.
func settingsSummary(st *server.SettingsInfo) string {
	if st == nil {
		return "-"
	}
	out := short(st.Version, 8)
	if st.Policy != "" {
		out += " policy=" + short(st.Policy, 40)
	}
	if st.Zone != "" {
		out += " zone=" + st.Zone
	}
	return out
}

// short cuts s to n characters, marking the cut.
func short(s string, n int) string {
	s = strings.Join(strings.Fields(s), " ") // a NACK message may hold newlines
	if len(s) <= n {
		return s
	}
	return s[:n-1] + "…"
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}
