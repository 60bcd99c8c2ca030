package cni

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"

	"github.com/meshdns/meshdns/internal/atomicfile"
)

// PluginType is the plugin's binary name in the CNI bin directory and its
// "type" in the configuration list.
const PluginType = "meshdns-cni"

// InstallConfig says where the installer (the DaemonSet's container) finds
// the node's CNI directories, mounted from the host.
type InstallConfig struct {
	// Binary is the meshdns binary to copy (os.Executable()).
	Binary string
	// BinDir and ConfDir are the node's CNI bin and configuration
	// directories as the installer sees them (host mounts).
	BinDir, ConfDir string
	// HostConfDir is ConfDir as the node sees it, for the kubeconfig path
	// written into the plugin's entry; empty means ConfDir.
	HostConfDir string
	// ConfName is the configuration list to chain into; empty means the
	// one the runtime uses: the first *.conflist, *.conf or *.json of
	// ConfDir in lexical order. A single-plugin configuration is replaced
	// by the equivalent list under the .conflist name (as istio-cni does);
	// Uninstall leaves that list, without the plugin, in its place.
	ConfName string
	// Kubeconfig is the content of the plugin's kubeconfig, written to
	// ConfDir/KubeconfigName with mode 0600.
	Kubeconfig []byte
	// Options are extra fields of the plugin's entry (backend,
	// disableIPv6, captureAllDNS).
	Options map[string]any
}

// KubeconfigName is the plugin's kubeconfig file in the CNI configuration
// directory. Its name does not end in .conf, so runtimes never load it as a
// network.
const KubeconfigName = "meshdns-cni.kubeconfig"

// Install copies the binary and chains the plugin into the network
// configuration list; it is idempotent and writes only what changed, so the
// installer calls it again to repair a list another installer rewrote. It
// reports whether it changed anything.
func Install(cfg InstallConfig) (changed bool, err error) {
	if cfg.HostConfDir == "" {
		cfg.HostConfDir = cfg.ConfDir
	}
	if c, err := copyIfChanged(cfg.Binary, filepath.Join(cfg.BinDir, PluginType), 0o755); err != nil {
		return false, err
	} else if c {
		changed = true
	}
	if c, err := writeIfChanged(filepath.Join(cfg.ConfDir, KubeconfigName), cfg.Kubeconfig, 0o600); err != nil {
		return changed, err
	} else if c {
		changed = true
	}
	name, err := confName(cfg)
	if err != nil {
		return changed, err
	}
	path := filepath.Join(cfg.ConfDir, name)
	data, err := os.ReadFile(path)
	if err != nil {
		return changed, fmt.Errorf("read network configuration: %w", err)
	}
	// The configuration as the network plugin wrote it is kept, before it
	// is first changed, for Uninstall to put back byte for byte.
	if has, err := hasEntry(data); err == nil && !has {
		if c, err := writeIfChanged(filepath.Join(cfg.ConfDir, name+BackupSuffix), data, 0o644); err != nil {
			return changed, fmt.Errorf("keep the original configuration: %w", err)
		} else if c {
			changed = true
		}
	}
	// A single-plugin configuration (.conf) cannot chain a second plugin:
	// it becomes the equivalent list under the .conflist name, which takes
	// its place in the runtime's order once the .conf is gone.
	single := ""
	if !strings.HasSuffix(name, ".conflist") {
		list, converted, err := asList(data)
		if err != nil {
			return changed, fmt.Errorf("%s: %w", path, err)
		}
		if converted {
			single, data = path, list
			path = filepath.Join(cfg.ConfDir, strings.TrimSuffix(strings.TrimSuffix(name, ".conf"), ".json")+".conflist")
		}
	}
	entry := map[string]any{"type": PluginType, "kubeconfig": filepath.Join(cfg.HostConfDir, KubeconfigName),
		"capabilities": map[string]bool{"dns": true}}
	for k, v := range cfg.Options {
		entry[k] = v
	}
	out, err := chain(data, entry)
	if err != nil {
		return changed, fmt.Errorf("%s: %w", path, err)
	}
	c, err := writeIfChanged(path, out, 0o644)
	if err != nil || single == "" {
		return changed || c, err
	}
	if err := os.Remove(single); err != nil {
		return true, fmt.Errorf("remove the converted configuration: %w", err)
	}
	return true, nil
}

// asList returns a single-plugin network configuration as the equivalent
// configuration list (CNI spec: the list holds cniVersion and name, its
// plugin the rest), and whether it converted; a list is returned as it is.
func asList(data []byte) ([]byte, bool, error) {
	var conf map[string]json.RawMessage
	if err := json.Unmarshal(data, &conf); err != nil {
		return nil, false, fmt.Errorf("parse network configuration: %w", err)
	}
	if _, ok := conf["plugins"]; ok {
		return data, false, nil
	}
	if _, ok := conf["type"]; !ok {
		return nil, false, errors.New("network configuration has neither plugins nor a type")
	}
	list := map[string]any{"cniVersion": conf["cniVersion"], "name": conf["name"]}
	delete(conf, "cniVersion")
	delete(conf, "name")
	list["plugins"] = []any{conf}
	out, err := json.Marshal(list)
	return out, true, err
}

// BackupSuffix names the copy of a network configuration as it was before
// Install chained the plugin into it: <name>.meshdns-cni-orig in the
// configuration directory. Runtimes load only *.conf, *.conflist and *.json.
const BackupSuffix = ".meshdns-cni-orig"

// Uninstall takes the plugin out of the node's network configuration and
// removes its kubeconfig and binary. Where the configuration is still what
// Install made of the network plugin's (the same JSON once the plugin's
// entry is out), the original file is put back byte for byte, a converted
// .conf included; otherwise only the plugin's entry is taken out, keeping
// what changed since.
func Uninstall(cfg InstallConfig) error {
	var errs []error
	restored := map[string]bool{}
	backups, _ := filepath.Glob(filepath.Join(cfg.ConfDir, "*"+BackupSuffix))
	for _, b := range backups {
		name, err := restore(cfg.ConfDir, strings.TrimSuffix(filepath.Base(b), BackupSuffix), b)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		restored[name] = true
	}
	if name, err := confName(cfg); err == nil && !restored[name] {
		if err := removeEntry(filepath.Join(cfg.ConfDir, name)); err != nil {
			errs = append(errs, err)
		}
	}
	for _, p := range []string{filepath.Join(cfg.ConfDir, KubeconfigName), filepath.Join(cfg.BinDir, PluginType)} {
		if err := os.Remove(p); err != nil && !errors.Is(err, os.ErrNotExist) {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// restore puts the configuration orig back from its backup when the list
// Install wrote holds nothing else new, or else takes the plugin's entry
// out of that list; it removes the backup and returns the list's name.
func restore(dir, orig, backup string) (string, error) {
	list := orig
	if !strings.HasSuffix(orig, ".conflist") {
		list = strings.TrimSuffix(strings.TrimSuffix(orig, ".conf"), ".json") + ".conflist"
	}
	saved, err := os.ReadFile(backup)
	if err != nil {
		return list, err
	}
	cur, err := os.ReadFile(filepath.Join(dir, list))
	if errors.Is(err, os.ErrNotExist) && list != orig {
		// Not converted after all: the entry went into the file itself.
		list = orig
		cur, err = os.ReadFile(filepath.Join(dir, list))
	}
	if err != nil {
		if errors.Is(err, os.ErrNotExist) {
			// The network plugin removed its configuration: nothing to undo.
			return list, os.Remove(backup)
		}
		return list, fmt.Errorf("read network configuration: %w", err)
	}
	if has, err := hasEntry(cur); err != nil || !has {
		// Rewritten by someone else since, without the plugin: theirs.
		return list, os.Remove(backup)
	}
	without, err := chain(cur, nil)
	if err != nil {
		return list, fmt.Errorf("%s: %w", list, err)
	}
	savedList, _, err := asList(saved)
	if err != nil || !sameJSON(without, savedList) {
		if err := removeEntry(filepath.Join(dir, list)); err != nil {
			return list, err
		}
		return list, os.Remove(backup)
	}
	if _, err := writeIfChanged(filepath.Join(dir, orig), saved, 0o644); err != nil {
		return list, err
	}
	if list != orig {
		if err := os.Remove(filepath.Join(dir, list)); err != nil && !errors.Is(err, os.ErrNotExist) {
			return list, err
		}
	}
	return list, os.Remove(backup)
}

// removeEntry takes the plugin's entry out of the configuration list at
// path, if it is there.
func removeEntry(path string) error {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil
	}
	if has, err := hasEntry(data); err != nil || !has {
		return nil
	}
	out, err := chain(data, nil)
	if err != nil {
		return fmt.Errorf("%s: %w", path, err)
	}
	_, err = writeIfChanged(path, out, 0o644)
	return err
}

// hasEntry reports whether a network configuration chains the plugin.
func hasEntry(data []byte) (bool, error) {
	var list struct {
		Plugins []struct {
			Type string `json:"type"`
		} `json:"plugins"`
	}
	if err := json.Unmarshal(data, &list); err != nil {
		return false, err
	}
	return slices.ContainsFunc(list.Plugins, func(p struct {
		Type string `json:"type"`
	}) bool {
		return p.Type == PluginType
	}), nil
}

// sameJSON reports whether a and b hold the same JSON value, whatever
// their layout.
func sameJSON(a, b []byte) bool {
	var va, vb any
	if json.Unmarshal(a, &va) != nil || json.Unmarshal(b, &vb) != nil {
		return false
	}
	return reflect.DeepEqual(va, vb)
}

// confName returns the configuration list the plugin goes into.
func confName(cfg InstallConfig) (string, error) {
	if cfg.ConfName != "" {
		return cfg.ConfName, nil
	}
	ents, err := os.ReadDir(cfg.ConfDir)
	if err != nil {
		return "", fmt.Errorf("read CNI configuration directory: %w", err)
	}
	var names []string
	for _, e := range ents {
		if n := e.Name(); !e.IsDir() && (strings.HasSuffix(n, ".conflist") || strings.HasSuffix(n, ".conf") || strings.HasSuffix(n, ".json")) {
			names = append(names, n)
		}
	}
	if len(names) == 0 {
		return "", fmt.Errorf("no network configuration in %s yet (the pod network plugin writes it)", cfg.ConfDir)
	}
	slices.Sort(names)
	return names[0], nil
}

// chain returns the configuration list data with entry as its last
// plugin, replacing an earlier meshdns entry; a nil entry only removes it.
// Other fields and plugins are kept as they were.
func chain(data []byte, entry map[string]any) ([]byte, error) {
	var list map[string]json.RawMessage
	if err := json.Unmarshal(data, &list); err != nil {
		return nil, fmt.Errorf("parse configuration list: %w", err)
	}
	var plugins []json.RawMessage
	if err := json.Unmarshal(list["plugins"], &plugins); err != nil || len(plugins) == 0 {
		return nil, errors.New("configuration list has no plugins")
	}
	kept := plugins[:0]
	for _, p := range plugins {
		var t struct {
			Type string `json:"type"`
		}
		if err := json.Unmarshal(p, &t); err != nil {
			return nil, fmt.Errorf("parse plugin: %w", err)
		}
		if t.Type != PluginType {
			kept = append(kept, p)
		}
	}
	if entry != nil {
		b, err := json.Marshal(entry)
		if err != nil {
			return nil, err
		}
		kept = append(kept, b)
	}
	b, err := json.Marshal(kept)
	if err != nil {
		return nil, err
	}
	list["plugins"] = b
	var out bytes.Buffer
	raw, err := json.Marshal(list)
	if err != nil {
		return nil, err
	}
	if err := json.Indent(&out, raw, "", "  "); err != nil {
		return nil, err
	}
	out.WriteByte('\n')
	return out.Bytes(), nil
}

// copyIfChanged copies src to dst unless dst has the same content. It
// streams: the binary is tens of megabytes and the installer's memory
// limit small.
func copyIfChanged(src, dst string, mode os.FileMode) (bool, error) {
	same, err := sameContent(src, dst)
	if err != nil {
		return false, err
	}
	if same {
		return false, nil
	}
	f, err := os.Open(src)
	if err != nil {
		return false, fmt.Errorf("open plugin binary: %w", err)
	}
	defer f.Close()
	// Written beside dst and renamed over it, so a running plugin binary
	// is never overwritten in place and the runtime never reads half of it.
	return true, atomicfile.Write(dst, mode, func(w io.Writer) error {
		_, err := io.Copy(w, f)
		return err
	})
}

// sameContent reports whether the files at a and b hold the same bytes; a
// missing b is a difference.
func sameContent(a, b string) (bool, error) {
	fa, err := os.Open(a)
	if err != nil {
		return false, fmt.Errorf("open plugin binary: %w", err)
	}
	defer fa.Close()
	fb, err := os.Open(b)
	if err != nil {
		return false, nil
	}
	defer fb.Close()
	sa, err := fa.Stat()
	if err != nil {
		return false, err
	}
	if sb, err := fb.Stat(); err != nil || sa.Size() != sb.Size() {
		return false, nil
	}
	ba, bb := make([]byte, 64<<10), make([]byte, 64<<10)
	for {
		na, ea := io.ReadFull(fa, ba)
		nb, _ := io.ReadFull(fb, bb)
		if na != nb || !bytes.Equal(ba[:na], bb[:nb]) {
			return false, nil
		}
		if ea == io.EOF || ea == io.ErrUnexpectedEOF {
			return true, nil
		}
		if ea != nil {
			return false, fmt.Errorf("read plugin binary: %w", ea)
		}
	}
}

// writeIfChanged replaces path by data unless it already holds data.
func writeIfChanged(path string, data []byte, mode os.FileMode) (bool, error) {
	if old, err := os.ReadFile(path); err == nil && bytes.Equal(old, data) {
		return false, nil
	}
	return true, atomicfile.Write(path, mode, func(w io.Writer) error {
		_, err := w.Write(data)
		return err
	})
}
