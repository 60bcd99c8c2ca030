package iptables

import "errors"

var (
	// ErrNoProxyOwner: without the agent's uid or gid its own upstream
	// queries would be redirected back to itself.
	ErrNoProxyOwner = errors.New("need the agent's uid or gid (--proxy-uid, --proxy-gid) so its own queries bypass the redirect")
	// ErrNoNameservers: nothing would be captured.
	ErrNoNameservers = errors.New("no nameservers to capture: give a resolv.conf with nameserver lines or use --capture-all-dns")
	// ErrNoBackend: neither iptables-legacy nor iptables-nft could be run.
	ErrNoBackend = errors.New("neither iptables-legacy nor iptables-nft works here")
)
