// Package cni is meshdns's chained CNI plugin and its installer: the
// node-level way to program a pod's DNS redirect, for namespaces whose Pod
// Security level (baseline, restricted) forbids the init container's
// NET_ADMIN.
//
// The container runtime runs the plugin after the pod's network plugin,
// as root on the node, with the pod's network namespace in CNI_NETNS. For a
// pod the webhook injected in CNI mode (the Redirect annotation) the plugin
// applies the rules of package iptables inside that namespace; any other
// pod passes through untouched. The plugin imports the standard library,
// iptables and x/sys only: the Kubernetes lookup of the pod's annotations
// is injected (Config.Pods), so the command wires a REST client.
package cni
