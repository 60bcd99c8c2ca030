package nodetest

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
)

// network gives the node its address and keeps pod traffic on the
// machine: the bridge plugin turns on IP forwarding, so the host drops
// anything a pod sends that would be routed out of the pod bridge.
func (n *Node) network() error {
	cmds := [][]string{
		{"ip", "link", "add", nodeLink, "type", "bridge"},
		{"ip", "addr", "add", NodeIP.String() + "/32", "dev", nodeLink},
		{"ip", "link", "set", nodeLink, "up"},
		{"iptables", "-w", "-I", "FORWARD", "-i", podBridge, "!", "-o", podBridge, "-j", "DROP"},
		{"ip6tables", "-w", "-I", "FORWARD", "-i", podBridge, "!", "-o", podBridge, "-j", "DROP"},
	}
	for _, c := range cmds {
		if out, err := exec.Command(c[0], c[1:]...).CombinedOutput(); err != nil {
			return fmt.Errorf("%s: %v: %s", strings.Join(c, " "), err, out)
		}
	}
	return nil
}

// writeConfigs writes containerd's, the CNI network's and the kubelet's
// configuration into Dir.
func (n *Node) writeConfigs(o Options) error {
	d := n.Dir
	for _, sub := range []string{"cni/net.d", "cni/ipam", "cni/bin", "kubelet", "images", "manifests"} {
		if err := os.MkdirAll(filepath.Join(d, sub), 0o755); err != nil {
			return err
		}
	}
	// The node's own CNI bin directory, so a test can install a plugin
	// there (as a CNI DaemonSet does) without touching the machine's.
	for _, p := range cniPlugins {
		if err := os.Symlink(filepath.Join("/usr/lib/cni", p), filepath.Join(d, "cni/bin", p)); err != nil {
			return err
		}
	}
	// restrict_oom_score_adj: root here lacks CAP_SYS_RESOURCE, and runc
	// fails every sandbox that asks for a lower oom_score_adj.
	containerd := fmt.Sprintf(`version = 2
root = "%[1]s/containerd/root"
state = "%[1]s/containerd/state"
[grpc]
  address = "%[1]s/containerd.sock"
[ttrpc]
  address = "%[1]s/containerd.sock.ttrpc"
[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = "localhost/%[2]s:test"
  disable_apparmor = true
  restrict_oom_score_adj = true
  [plugins."io.containerd.grpc.v1.cri".containerd]
    snapshotter = "overlayfs"
    default_runtime_name = "runc"
    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
        SystemdCgroup = false
        Root = "%[1]s/containerd/runc"
  [plugins."io.containerd.grpc.v1.cri".cni]
    bin_dir = "%[1]s/cni/bin"
    conf_dir = "%[1]s/cni/net.d"
`, d, pauseImage)
	cni := fmt.Sprintf(`{"cniVersion": "1.0.0", "name": "nodetest", "plugins": [
  {"type": "bridge", "bridge": %q, "isGateway": true, "ipMasq": false, "hairpinMode": true,
   "ipam": {"type": "host-local", "dataDir": "%s/cni/ipam", "ranges": [[{"subnet": %q}]], "routes": [{"dst": "0.0.0.0/0"}]}},
  {"type": "loopback"}]}
`, podBridge, d, podSubnet)
	resolv := "nameserver " + NodeIP.String() + "\n"
	if len(o.Search) > 0 {
		resolv += "search " + strings.Join(o.Search, " ") + "\n"
	}
	kubelet := fmt.Sprintf(`apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
address: %[2]s
port: 10250
readOnlyPort: 0
healthzPort: 0
# The API server reaches the kubelet (logs, exec) without a client
# certificate; the node address is on this machine only.
authentication: {anonymous: {enabled: true}, webhook: {enabled: false}}
authorization: {mode: AlwaysAllow}
containerRuntimeEndpoint: unix://%[1]s/containerd.sock
cgroupDriver: cgroupfs
cgroupsPerQOS: true
failSwapOn: false
makeIPTablesUtilChains: false
rotateCertificates: false
serverTLSBootstrap: false
resolvConf: %[1]s/resolv.conf
clusterDNS: [%[2]s]
clusterDomain: cluster.local
syncFrequency: 5s
fileCheckFrequency: 5s
nodeStatusUpdateFrequency: 5s
imageGCHighThresholdPercent: 100
imageGCLowThresholdPercent: 99
evictionHard: {memory.available: 50Mi, nodefs.available: 1%%, imagefs.available: 1%%, nodefs.inodesFree: 1%%}
maxPods: 50
podLogsDir: %[1]s/pod-logs
staticPodPath: %[1]s/manifests
`, d, NodeIP)
	files := map[string]string{
		"containerd.toml":          containerd,
		"cni/net.d/" + CNIConfName: cni,
		"resolv.conf":              resolv,
		"kubelet.yaml":             kubelet,
	}
	for name, body := range files {
		if err := os.WriteFile(filepath.Join(d, name), []byte(body), 0o644); err != nil {
			return err
		}
	}
	return nil
}
