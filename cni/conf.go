package cni

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/netip"
	"strings"

	"github.com/meshdns/meshdns/iptables"
)

// NetConf is the plugin's entry in a network configuration list, as the
// runtime hands it over on stdin (CNI spec, section "Network configuration").
type NetConf struct {
	CNIVersion string `json:"cniVersion"`
	Name       string `json:"name"`
	Type       string `json:"type"`
	// Kubeconfig is the file the plugin reads pods with; the installer
	// writes it beside the configuration list.
	Kubeconfig string `json:"kubeconfig"`
	// Backend is the iptables backend in pods: auto (default), legacy, nft.
	Backend string `json:"backend,omitempty"`
	// DisableIPv6 writes IPv4 rules only.
	DisableIPv6 bool `json:"disableIPv6,omitempty"`
	// CaptureAllDNS redirects port 53 to any address. Without it only the
	// pod's nameservers are captured, as the runtime passes them (the dns
	// capability); a runtime that does not pass them gets capture-all too.
	CaptureAllDNS bool `json:"captureAllDNS,omitempty"`
	// ExcludeNamespaces are namespaces, besides NeverInjected, whose pods
	// pass through with no API call (the installer writes meshdns's own).
	ExcludeNamespaces []string `json:"excludeNamespaces,omitempty"`
	// RuntimeConfig holds the capabilities the runtime fills in.
	RuntimeConfig struct {
		DNS struct {
			Servers []string `json:"servers,omitempty"`
		} `json:"dns"`
	} `json:"runtimeConfig"`
	// PrevResult is the result of the plugins before this one, passed on
	// unchanged: this plugin adds no interface or address.
	PrevResult json.RawMessage `json:"prevResult,omitempty"`
}

// parseNetConf reads the plugin's configuration from stdin.
func parseNetConf(stdin []byte) (NetConf, error) {
	var c NetConf
	if err := json.Unmarshal(stdin, &c); err != nil {
		return NetConf{}, fmt.Errorf("parse network configuration: %w", err)
	}
	if c.CNIVersion == "" {
		return NetConf{}, errors.New("parse network configuration: no cniVersion")
	}
	if string(c.PrevResult) == "null" {
		c.PrevResult = nil
	}
	if _, err := iptables.ParseBackend(c.Backend); err != nil {
		return NetConf{}, fmt.Errorf("parse network configuration: %w", err)
	}
	return c, nil
}

// nameservers returns the pod's nameservers from the dns capability, or
// nil when every port 53 packet is to be captured.
func (c NetConf) nameservers() ([]netip.Addr, error) {
	if c.CaptureAllDNS {
		return nil, nil
	}
	var out []netip.Addr
	for _, s := range c.RuntimeConfig.DNS.Servers {
		a, err := netip.ParseAddr(s)
		if err != nil {
			return nil, fmt.Errorf("runtimeConfig.dns.servers: %w", err)
		}
		out = append(out, a.Unmap())
	}
	return out, nil
}

// Args are the CNI_* environment variables of one call.
type Args struct {
	Command     string // CNI_COMMAND: ADD, DEL, CHECK, VERSION, STATUS, GC
	ContainerID string // CNI_CONTAINERID
	NetNS       string // CNI_NETNS: path of the pod's network namespace
	// Namespace and Pod are K8S_POD_NAMESPACE and K8S_POD_NAME of
	// CNI_ARGS, set by Kubernetes runtimes; empty for other containers.
	Namespace, Pod string
}

// ArgsFromEnv reads the CNI_* variables through getenv (os.Getenv).
func ArgsFromEnv(getenv func(string) string) Args {
	a := Args{
		Command:     getenv("CNI_COMMAND"),
		ContainerID: getenv("CNI_CONTAINERID"),
		NetNS:       getenv("CNI_NETNS"),
	}
	for _, kv := range strings.Split(getenv("CNI_ARGS"), ";") {
		k, v, _ := strings.Cut(kv, "=")
		switch k {
		case "K8S_POD_NAMESPACE":
			a.Namespace = v
		case "K8S_POD_NAME":
			a.Pod = v
		}
	}
	return a
}
