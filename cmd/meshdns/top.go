package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/meshdns/meshdns/cmd/internal/cli"
	"github.com/meshdns/meshdns/controlplane/admin"
	"github.com/meshdns/meshdns/controlplane/server"
)

func init() {
	cli.Register("top", cli.Command{
		Summary: "show the names that fail most for each pod (NXDOMAIN, SERVFAIL, REFUSED), from the agents' reports to the control plane",
		Run:     runTop,
	})
}

// runTop reads /debug/agents of every control plane replica given (the
// reports ride with the agents, so one read serves status and top) and
// shows each pod's last failing-names report.
func runTop(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("top", flag.ContinueOnError)
	fs.SetOutput(stdout)
	f := newFleetFlags(fs, fleetOpts{admin: "admin addresses of control plane replicas, comma-separated, whose reports are merged per pod", namespace: "only the pods of this namespace", timeout: 5 * time.Second})
	name := fs.String("name", "", "only this query name: which pods fail for it")
	rcode := fs.String("rcode", "", "only this response code: NXDOMAIN, SERVFAIL or REFUSED")
	limit := fs.Int("limit", 10, "at most this many names per pod in the table (0: all)")
	if err := f.parse(fs, args); err != nil {
		return err
	}
	switch strings.ToUpper(*rcode) {
	case "", "NXDOMAIN", "SERVFAIL", "REFUSED":
	default:
		return cli.Usagef("--rcode %q: want NXDOMAIN, SERVFAIL or REFUSED", *rcode)
	}
	if *limit < 0 {
		return cli.Usagef("--limit %d: want 0 or more", *limit)
	}
	ctx, cancel := context.WithTimeout(ctx, f.timeout)
	defer cancel()
	var lists [][]server.AgentInfo
	var errs []error
	where := f.adminAddr
	if !f.direct() {
		where = "the control plane replicas of " + f.system
		var err error
		if lists, errs, err = fleetAgents(ctx, f); err != nil {
			return err
		}
	}
	for _, addr := range strings.Split(f.adminAddr, ",") {
		addr = strings.TrimSpace(addr)
		if addr == "" {
			continue
		}
		as, err := fetchAgents(ctx, addr)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		lists = append(lists, as)
	}
	if len(lists) == 0 && len(errs) > 0 {
		return errors.Join(errs...)
	}
	if len(lists) == 0 && f.direct() {
		return cli.Usagef("--admin-addr: no address")
	}
	for _, err := range errs {
		// Some replicas answered: show theirs, say which did not.
		fmt.Fprintf(stderr, "warning: %v\n", err)
	}
	pods := admin.Failing(mergeReports(lists), f.namespace, *name, *rcode)
	if f.output == "json" {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		return enc.Encode(pods)
	}
	return printTop(stdout, pods, *limit, where, time.Now())
}

// fleetAgents reads the agents of every replica as status --kubeconfig
// does, one list per replica; a replica that could not be read is an
// error of errs.
func fleetAgents(ctx context.Context, fleet *fleetFlags) (lists [][]server.AgentInfo, errs []error, err error) {
	fs, err := fleet.read(ctx)
	if err != nil {
		return nil, nil, err
	}
	byReplica := map[string][]server.AgentInfo{}
	for _, a := range fs.Agents {
		byReplica[a.Replica] = append(byReplica[a.Replica], a.AgentInfo)
	}
	for _, r := range fs.Replicas {
		if r.Error != "" {
			errs = append(errs, fmt.Errorf("replica %s: %s", r.Pod, r.Error))
		}
		if as := byReplica[r.Pod]; len(as) > 0 {
			lists = append(lists, as)
		}
	}
	return lists, errs, nil
}

// mergeReports merges the agents of several replicas into one per pod,
// sorted by namespace and pod: an agent holds one stream, and a pod seen
// on two replicas (a stream ending on the replica it left) keeps its
// newest report.
func mergeReports(lists [][]server.AgentInfo) []server.AgentInfo {
	byPod := map[string]server.AgentInfo{}
	for _, as := range lists {
		for _, a := range as {
			key := a.Namespace + "/" + a.Pod
			old, ok := byPod[key]
			if !ok || newer(a, old) {
				byPod[key] = a
			}
		}
	}
	out := make([]server.AgentInfo, 0, len(byPod))
	for _, a := range byPod {
		out = append(out, a)
	}
	slices.SortFunc(out, func(a, b server.AgentInfo) int {
		return strings.Compare(a.Namespace+"/"+a.Pod, b.Namespace+"/"+b.Pod)
	})
	return out
}

// newer reports whether a's report is more recent than b's (an agent with
// a report beats one without).
func newer(a, b server.AgentInfo) bool {
	switch {
	case a.Failing == nil:
		return b.Failing == nil && a.Connected.After(b.Connected)
	case b.Failing == nil:
		return true
	}
	return a.Failing.Received.After(b.Failing.Received)
}

func printTop(w io.Writer, pods []admin.PodFailing, limit int, addr string, now time.Time) error {
	if len(pods) == 0 {
		_, err := fmt.Fprintf(w, "no failing-names reports at %s (agents report only where the control plane's --failing-report covers their namespace)\n", addr)
		return err
	}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "NAMESPACE\tPOD\tRCODE\tCOUNT\tNAME\tWINDOW\tREPORTED")
	for _, p := range pods {
		age := now.Sub(p.Received).Round(time.Second).String() + " ago"
		window := (time.Duration(p.WindowSeconds) * time.Second).String()
		if len(p.Names) == 0 {
			fmt.Fprintf(tw, "%s\t%s\t-\t0\t-\t%s\t%s\n", p.Namespace, p.Pod, window, age)
			continue
		}
		names := p.Names
		if limit > 0 && len(names) > limit {
			names = names[:limit]
		}
		for _, n := range names {
			fmt.Fprintf(tw, "%s\t%s\t%s\t%d\t%s\t%s\t%s\n", p.Namespace, p.Pod, n.Rcode, n.Count, n.Name, window, age)
		}
	}
	return tw.Flush()
}
