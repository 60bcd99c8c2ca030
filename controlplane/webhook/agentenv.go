package webhook

import (
	"errors"
	"fmt"
	"strings"
)

// supervisorEnv is what the supervisor passes its agent (see
// cmd/internal/agentcmd): set in the container, it would make an agent
// without a supervisor look for sockets it never inherited.
const supervisorEnv = "MESHDNS_INHERITED_FDS"

// reservedAgentEnv names the variables a template's agentEnv may not set,
// each with who sets it: those the webhook puts in the agent container,
// the supervisor's, and MESHDNS_<FLAG> of every flag the webhook
// generates, which the agent reads only when the flag is not on its
// command line, so a value there would be silently ignored. They are
// taken from the container itself, so a variable or flag added there is
// reserved without a line here.
func (t Template) reservedAgentEnv() map[string]string {
	probe := t
	probe.AgentArgs, probe.AgentEnv = nil, nil
	// Turn on every generated flag: reserved names must not depend on
	// what this request happens to generate.
	probe.Supervise, probe.Plaintext, probe.IPv6, probe.caBundle = ptr(true), false, true, []byte{0}
	c := probe.agentContainer()
	reserved := map[string]string{supervisorEnv: "the agent's supervisor"}
	for _, e := range c.Env {
		reserved[e.Name] = "the webhook"
	}
	for _, a := range c.Args {
		if name, ok := strings.CutPrefix(a, "--"); ok {
			reserved["MESHDNS_"+strings.ToUpper(strings.ReplaceAll(name, "-", "_"))] = "the webhook's --" + name
		}
	}
	return reserved
}

// validateAgentEnv refuses what the API server would refuse in the
// patch (and so fail the pod) and a name meshdns sets itself.
func (t Template) validateAgentEnv() error {
	if len(t.AgentEnv) == 0 {
		return nil
	}
	reserved := t.reservedAgentEnv()
	seen := map[string]bool{}
	var errs []error
	for i, e := range t.AgentEnv {
		switch {
		case e.Name == "":
			errs = append(errs, fmt.Errorf("entry %d has no name", i))
		case strings.Contains(e.Name, "="):
			errs = append(errs, fmt.Errorf("name %q contains '='", e.Name))
		case reserved[e.Name] != "":
			errs = append(errs, fmt.Errorf("%s is set by %s", e.Name, reserved[e.Name]))
		case seen[e.Name]:
			errs = append(errs, fmt.Errorf("%s is set twice", e.Name))
		case e.Value != "" && e.ValueFrom != nil:
			errs = append(errs, fmt.Errorf("%s has both value and valueFrom", e.Name))
		}
		seen[e.Name] = true
	}
	return errors.Join(errs...)
}
