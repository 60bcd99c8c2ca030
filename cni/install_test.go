package cni

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

const bridgeList = `{"cniVersion": "1.0.0", "name": "k8s", "plugins": [
  {"type": "bridge", "bridge": "cni0", "ipam": {"type": "host-local"}},
  {"type": "portmap", "capabilities": {"portMappings": true}}]}
`

// installDirs returns a bin and a conf directory holding the network
// configuration list conf under name, and a binary to install.
func installDirs(t *testing.T, name, conf string) InstallConfig {
	t.Helper()
	d := t.TempDir()
	cfg := InstallConfig{Binary: filepath.Join(d, "meshdns"), BinDir: filepath.Join(d, "bin"), ConfDir: filepath.Join(d, "net.d"),
		HostConfDir: "/etc/cni/net.d", Kubeconfig: []byte("kubeconfig v1\n"), Options: map[string]any{"backend": "nft"}}
	for _, dir := range []string{cfg.BinDir, cfg.ConfDir} {
		if err := os.Mkdir(dir, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(cfg.Binary, []byte("binary v1"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(cfg.ConfDir, name), []byte(conf), 0o644); err != nil {
		t.Fatal(err)
	}
	return cfg
}

// pluginTypes returns the types of the plugins in a configuration list,
// and the meshdns entry.
func pluginTypes(t *testing.T, path string) ([]string, map[string]any) {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var list struct {
		Name    string           `json:"name"`
		Plugins []map[string]any `json:"plugins"`
	}
	if err := json.Unmarshal(data, &list); err != nil {
		t.Fatalf("%s: %v\n%s", path, err, data)
	}
	if list.Name != "k8s" {
		t.Errorf("list name %q lost", list.Name)
	}
	var types []string
	var ours map[string]any
	for _, p := range list.Plugins {
		types = append(types, p["type"].(string))
		if p["type"] == PluginType {
			ours = p
		}
	}
	return types, ours
}

func TestInstall(t *testing.T) {
	cfg := installDirs(t, "10-k8s.conflist", bridgeList)
	// A later file is not the one the runtime uses.
	if err := os.WriteFile(filepath.Join(cfg.ConfDir, "99-other.conflist"), []byte(bridgeList), 0o644); err != nil {
		t.Fatal(err)
	}
	list := filepath.Join(cfg.ConfDir, "10-k8s.conflist")

	changed, err := Install(cfg)
	if err != nil || !changed {
		t.Fatalf("Install: changed %v, err %v", changed, err)
	}
	types, ours := pluginTypes(t, list)
	if diff := cmp.Diff([]string{"bridge", "portmap", PluginType}, types); diff != "" {
		t.Errorf("plugins (-want +got):\n%s", diff)
	}
	wantEntry := map[string]any{"type": PluginType, "kubeconfig": "/etc/cni/net.d/" + KubeconfigName,
		"capabilities": map[string]any{"dns": true}, "backend": "nft"}
	if diff := cmp.Diff(wantEntry, ours); diff != "" {
		t.Errorf("entry (-want +got):\n%s", diff)
	}
	if other, _ := os.ReadFile(filepath.Join(cfg.ConfDir, "99-other.conflist")); string(other) != bridgeList {
		t.Errorf("another list was changed:\n%s", other)
	}
	if b, _ := os.ReadFile(filepath.Join(cfg.BinDir, PluginType)); string(b) != "binary v1" {
		t.Errorf("binary %q", b)
	}
	if fi, err := os.Stat(filepath.Join(cfg.ConfDir, KubeconfigName)); err != nil || fi.Mode().Perm() != 0o600 {
		t.Errorf("kubeconfig: %v %v, want mode 0600", fi, err)
	}
	if fi, err := os.Stat(filepath.Join(cfg.BinDir, PluginType)); err != nil || fi.Mode().Perm() != 0o755 {
		t.Errorf("binary: %v %v, want mode 0755", fi, err)
	}

	// Idempotent: nothing to do the second time.
	if changed, err := Install(cfg); err != nil || changed {
		t.Fatalf("second Install: changed %v, err %v", changed, err)
	}
	// A new binary of the same size replaces the old one.
	if err := os.WriteFile(cfg.Binary, []byte("binary v2"), 0o755); err != nil {
		t.Fatal(err)
	}
	if changed, err := Install(cfg); err != nil || !changed {
		t.Fatalf("Install of a new binary: changed %v, err %v", changed, err)
	}
	if b, _ := os.ReadFile(filepath.Join(cfg.BinDir, PluginType)); string(b) != "binary v2" {
		t.Errorf("binary %q, want v2", b)
	}
	// A renewed token, and another installer rewriting the list, are
	// repaired without a second entry.
	cfg.Kubeconfig = []byte("kubeconfig v2\n")
	if err := os.WriteFile(list, []byte(bridgeList), 0o644); err != nil {
		t.Fatal(err)
	}
	if changed, err := Install(cfg); err != nil || !changed {
		t.Fatalf("repairing Install: changed %v, err %v", changed, err)
	}
	if types, _ := pluginTypes(t, list); !cmp.Equal([]string{"bridge", "portmap", PluginType}, types) {
		t.Errorf("after repair: %v", types)
	}
	if b, _ := os.ReadFile(filepath.Join(cfg.ConfDir, KubeconfigName)); string(b) != "kubeconfig v2\n" {
		t.Errorf("kubeconfig not renewed: %q", b)
	}
	// No temporary files left behind for the runtime to trip over.
	ents, _ := os.ReadDir(cfg.ConfDir)
	for _, e := range ents {
		if strings.HasPrefix(e.Name(), ".") {
			t.Errorf("left %s", e.Name())
		}
	}

	if err := Uninstall(cfg); err != nil {
		t.Fatal(err)
	}
	if b, _ := os.ReadFile(list); string(b) != bridgeList {
		t.Errorf("after Uninstall the list is not as before, byte for byte:\n%s\nwant\n%s", b, bridgeList)
	}
	for _, p := range []string{filepath.Join(cfg.ConfDir, KubeconfigName), filepath.Join(cfg.BinDir, PluginType),
		list + BackupSuffix} {
		if _, err := os.Stat(p); !os.IsNotExist(err) {
			t.Errorf("%s still there: %v", p, err)
		}
	}
}

func TestInstallErrors(t *testing.T) {
	tests := []struct {
		name, file, conf, wantErr string
	}{
		{name: "configuration without a type", file: "10-bridge.conf", conf: `{"cniVersion":"1.0.0","name":"k8s"}`, wantErr: "neither plugins nor a type"},
		{name: "malformed configuration", file: "10-bridge.conf", conf: `{"type": `, wantErr: "parse network configuration"},
		{name: "list without plugins", file: "10-k8s.conflist", conf: `{"cniVersion":"1.0.0","name":"k8s","plugins":[]}`, wantErr: "no plugins"},
		{name: "malformed list", file: "10-k8s.conflist", conf: `{"plugins": [`, wantErr: "parse configuration list"},
		{name: "no configuration yet", file: "README", conf: "x", wantErr: "no network configuration"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg := installDirs(t, tt.file, tt.conf)
			_, err := Install(cfg)
			if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
				t.Fatalf("Install error %v, want %q", err, tt.wantErr)
			}
			// The configuration is left as it was.
			if b, _ := os.ReadFile(filepath.Join(cfg.ConfDir, tt.file)); string(b) != tt.conf {
				t.Errorf("configuration changed to %s", b)
			}
		})
	}
}

// TestInstallSingleConf: a single-plugin .conf (flannel and the bridge
// examples write one) becomes the equivalent .conflist with the plugin
// chained after it; the .conf is gone, so the runtime loads the list.
func TestInstallSingleConf(t *testing.T) {
	const bridgeConf = `{"cniVersion": "0.4.0", "name": "k8s", "type": "bridge", "bridge": "cni0", "isGateway": true,
  "ipam": {"type": "host-local", "ranges": [[{"subnet": "10.244.0.0/24"}]]}}
`
	cfg := installDirs(t, "10-bridge.conf", bridgeConf)
	// A later list is not the one the runtime uses, before or after.
	if err := os.WriteFile(filepath.Join(cfg.ConfDir, "20-other.conflist"), []byte(bridgeList), 0o644); err != nil {
		t.Fatal(err)
	}
	if changed, err := Install(cfg); err != nil || !changed {
		t.Fatalf("Install: changed %v, err %v", changed, err)
	}
	if _, err := os.Stat(filepath.Join(cfg.ConfDir, "10-bridge.conf")); !os.IsNotExist(err) {
		t.Errorf("the .conf is still there (%v): the runtime would load it, without the plugin", err)
	}
	list := filepath.Join(cfg.ConfDir, "10-bridge.conflist")
	data, err := os.ReadFile(list)
	if err != nil {
		t.Fatal(err)
	}
	var got map[string]any
	if err := json.Unmarshal(data, &got); err != nil {
		t.Fatal(err)
	}
	want := map[string]any{"cniVersion": "0.4.0", "name": "k8s", "plugins": []any{
		map[string]any{"type": "bridge", "bridge": "cni0", "isGateway": true,
			"ipam": map[string]any{"type": "host-local", "ranges": []any{[]any{map[string]any{"subnet": "10.244.0.0/24"}}}}},
		map[string]any{"type": PluginType, "kubeconfig": "/etc/cni/net.d/" + KubeconfigName, "capabilities": map[string]any{"dns": true}, "backend": "nft"},
	}}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("converted list (-want +got):\n%s", diff)
	}
	if other, _ := os.ReadFile(filepath.Join(cfg.ConfDir, "20-other.conflist")); string(other) != bridgeList {
		t.Errorf("another list was changed:\n%s", other)
	}
	// Idempotent from then on: the list is the runtime's configuration.
	if changed, err := Install(cfg); err != nil || changed {
		t.Fatalf("second Install: changed %v, err %v", changed, err)
	}
	// The network plugin writing its .conf again is repaired the same way.
	if err := os.WriteFile(filepath.Join(cfg.ConfDir, "10-bridge.conf"), []byte(bridgeConf), 0o644); err != nil {
		t.Fatal(err)
	}
	if changed, err := Install(cfg); err != nil || !changed {
		t.Fatalf("repairing Install: changed %v, err %v", changed, err)
	}
	if b, _ := os.ReadFile(list); !bytes.Equal(b, data) {
		t.Errorf("repaired list differs:\n%s\nwant\n%s", b, data)
	}
	if _, err := os.Stat(filepath.Join(cfg.ConfDir, "10-bridge.conf")); !os.IsNotExist(err) {
		t.Errorf("the rewritten .conf is still there (%v)", err)
	}
	if err := Uninstall(cfg); err != nil {
		t.Fatal(err)
	}
	// The network plugin's .conf is back as it wrote it, the list gone.
	if b, err := os.ReadFile(filepath.Join(cfg.ConfDir, "10-bridge.conf")); string(b) != bridgeConf {
		t.Errorf("after Uninstall the .conf is %q (%v), want it byte for byte", b, err)
	}
	ents, _ := os.ReadDir(cfg.ConfDir)
	var names []string
	for _, e := range ents {
		names = append(names, e.Name())
	}
	if diff := cmp.Diff([]string{"10-bridge.conf", "20-other.conflist"}, names); diff != "" {
		t.Errorf("configuration directory after Uninstall (-want +got):\n%s", diff)
	}
}

// TestUninstallKeepsLaterChanges: a list changed since Install (by hand,
// or by a network plugin that keeps other entries) only loses the plugin's
// entry; a list installed before the original was kept (an older
// installer) too.
func TestUninstallKeepsLaterChanges(t *testing.T) {
	for _, tt := range []struct {
		name string
		edit func(t *testing.T, cfg InstallConfig, list string)
	}{
		{name: "changed since", edit: func(t *testing.T, _ InstallConfig, list string) {
			b, _ := os.ReadFile(list)
			if err := os.WriteFile(list, bytes.Replace(b, []byte(`"cni0"`), []byte(`"cni1"`), 1), 0o644); err != nil {
				t.Fatal(err)
			}
		}},
		{name: "no original kept", edit: func(t *testing.T, cfg InstallConfig, list string) {
			if err := os.Remove(list + BackupSuffix); err != nil {
				t.Fatal(err)
			}
		}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			cfg := installDirs(t, "10-k8s.conflist", bridgeList)
			list := filepath.Join(cfg.ConfDir, "10-k8s.conflist")
			if _, err := Install(cfg); err != nil {
				t.Fatal(err)
			}
			tt.edit(t, cfg, list)
			want, _ := os.ReadFile(list)
			if err := Uninstall(cfg); err != nil {
				t.Fatal(err)
			}
			if types, ours := pluginTypes(t, list); !cmp.Equal([]string{"bridge", "portmap"}, types) || ours != nil {
				t.Errorf("after Uninstall: %v", types)
			}
			got, _ := os.ReadFile(list)
			wantList, _ := chain(want, nil)
			if !bytes.Equal(got, wantList) {
				t.Errorf("after Uninstall:\n%s\nwant the installed list without the entry:\n%s", got, wantList)
			}
			if _, err := os.Stat(list + BackupSuffix); !os.IsNotExist(err) {
				t.Errorf("the original's copy is left: %v", err)
			}
		})
	}
}
