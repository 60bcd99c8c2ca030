package safemode

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"

	"google.golang.org/protobuf/encoding/protowire"

	"github.com/meshdns/meshdns/internal/namewire"
)

// StateFile is the agent's persisted table inside its --state-dir (a
// StreamNameTableResponse, see agent/discovery): the last version the
// agent applied, with its settings.
const StateFile = "nametable.pb"

// maxSettings bounds the settings message read: a policy of thousands of
// rules is far below it; anything larger is a damaged file.
const maxSettings = 16 << 20

// Policy is what the last applied version says about the pod's DNS policy.
type Policy struct {
	// Enforcing is true when safe mode must refuse every query: the last
	// version carried a policy in enforce mode, or its state could not be
	// read (fail closed: a pod that had a policy must not resolve freely).
	Enforcing bool
	// Why says where the decision came from, for the logs and the probe.
	Why string
}

// ReadPolicy reads the settings of the state file in stateDir. No state
// dir, or no state file in it, is no policy (the agent never applied a
// version with one, or never persisted one). A state file that cannot be
// read or decoded is an enforcing policy: safe mode cannot prove the pod
// had none. It reads only the settings: the names are skipped on the file,
// never held in memory.
func ReadPolicy(stateDir string) Policy {
	if stateDir == "" {
		return Policy{Why: "no --state-dir: no policy known"}
	}
	path := filepath.Join(stateDir, StateFile)
	s, err := readSettings(path)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return Policy{Why: "no state file: no policy applied"}
	case err != nil:
		return Policy{Enforcing: true, Why: fmt.Sprintf("state unreadable, failing closed: %v", err)}
	case s == nil || s.Policy == nil:
		return Policy{Why: "the last version has no DNS policy"}
	case s.Policy.Mode == namewire.PolicyModeAudit:
		return Policy{Why: "the last version's DNS policy only audits"}
	}
	return Policy{Enforcing: true, Why: "the last version enforces a DNS policy (" + s.Policy.Source + ")"}
}

// readSettings returns the settings of the full table in the state file
// at path, or nil when it has none.
func readSettings(path string) (s *namewire.AgentSettings, err error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	defer func() {
		// A decoder bug on a damaged file must not take the supervisor
		// down with the agent: it is an unreadable state.
		if r := recover(); r != nil {
			s, err = nil, fmt.Errorf("read state %s: %v", path, r)
		}
	}()
	r := bufio.NewReaderSize(f, 4096)
	table, err := seekField(r, -1, namewire.FieldResponseFull)
	if err != nil {
		return nil, fmt.Errorf("read state %s: %w", path, err)
	}
	n, err := seekField(r, table, namewire.FieldNameTableSettings)
	if errors.Is(err, errNoField) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("read state %s: settings: %w", path, err)
	}
	if n > maxSettings {
		return nil, fmt.Errorf("read state %s: settings of %d bytes", path, n)
	}
	b := protowire.AppendTag(nil, namewire.FieldNameTableSettings, protowire.BytesType)
	b = protowire.AppendVarint(b, uint64(n))
	b = append(b, make([]byte, n)...)
	if _, err := io.ReadFull(r, b[len(b)-int(n):]); err != nil {
		return nil, fmt.Errorf("read state %s: settings: %w", path, err)
	}
	return namewire.TableSettings(b)
}

var errNoField = errors.New("field not found")

// seekField reads fields from r, within limit bytes (-1: to the end),
// skipping each until the bytes field num, and returns its length with r
// at its first byte.
func seekField(r *bufio.Reader, limit int64, num protowire.Number) (int64, error) {
	for limit != 0 {
		tag, tn, err := readVarint(r)
		if err == io.EOF && limit < 0 {
			break
		}
		if err != nil {
			return 0, err
		}
		fnum, typ := protowire.DecodeTag(tag)
		var size int64
		vn := 0
		switch typ {
		case protowire.VarintType:
			_, vn, err = readVarint(r)
		case protowire.Fixed32Type:
			size = 4
		case protowire.Fixed64Type:
			size = 8
		case protowire.BytesType:
			var l uint64
			l, vn, err = readVarint(r)
			size = int64(l)
		default:
			return 0, fmt.Errorf("field %d: wire type %d", fnum, typ)
		}
		if err != nil {
			return 0, err
		}
		if limit >= 0 {
			limit -= int64(tn+vn) + size
			if limit < 0 {
				return 0, errors.New("field past the end of its message")
			}
		}
		if fnum == num && typ == protowire.BytesType {
			return size, nil
		}
		if _, err := r.Discard(int(size)); err != nil {
			return 0, err
		}
	}
	return 0, errNoField
}

// readVarint reads one varint and the number of bytes it took.
func readVarint(r *bufio.Reader) (uint64, int, error) {
	var v uint64
	for i := 0; i < 10; i++ {
		c, err := r.ReadByte()
		if err != nil {
			if i > 0 && err == io.EOF {
				err = io.ErrUnexpectedEOF
			}
			return 0, i, err
		}
		v |= uint64(c&0x7f) << (7 * i)
		if c < 0x80 {
			return v, i + 1, nil
		}
	}
	return 0, 10, errors.New("varint overflow")
}
