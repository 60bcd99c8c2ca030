package discovery

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sync/atomic"

	"github.com/meshdns/meshdns/internal/atomicfile"
	"github.com/meshdns/meshdns/internal/namewire"
)

// stateFile is the persisted table inside StateDir: a
// StreamNameTableResponse holding version_info and the full table, in the
// binary proto form (compact, and versioned by the proto itself). With a
// state dir it is also the client's only copy of the applied table (the
// base of the next delta, /debug/nametable), read back name by name when
// needed (fileTable), so the table's wire form takes no memory.
const stateFile = "nametable.pb"

// pendingState is a state file written beside the real one but not yet in
// its place (internal/atomicfile): the new table is built from it, and it
// replaces the state only when the agent applied it, so a rejected table
// never becomes the state a restart restores.
type pendingState struct {
	p   *atomicfile.Pending
	dir string
	// shape is the table's: noted by its copy off the stream for a table
	// received, nil for one written from a delta.
	shape *namewire.Shape
	// state is where the file's table is walked: pending, committed (the
	// state file now), or lost (a failed commit: walks fail, and the agent
	// builds its next table whole).
	state atomic.Int32
}

const (
	pending int32 = iota
	committed
	lost
)

var errStateLost = errors.New("the state file of this version could not be committed")

// prepareState writes the StreamNameTableResponse of version with a table
// of size bytes, which write writes, into a temporary file in dir, fsynced.
func prepareState(dir, version string, size int, write func(io.Writer) error) (*pendingState, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("create state dir: %w", err)
	}
	p, err := atomicfile.Prepare(filepath.Join(dir, stateFile), 0o600, func(f io.Writer) error {
		w := bufio.NewWriterSize(f, 32<<10)
		w.Write(namewire.AppendFullHead(nil, version, size))
		cw := &countWriter{w: w}
		if err := write(cw); err != nil {
			return err
		}
		if cw.n != size {
			return fmt.Errorf("wrote %d table bytes, want %d", cw.n, size)
		}
		return w.Flush()
	})
	if err != nil {
		return nil, fmt.Errorf("save state: %w", err)
	}
	return &pendingState{p: p, dir: dir}, nil
}

type countWriter struct {
	w io.Writer
	n int
}

func (c *countWriter) Write(b []byte) (int, error) {
	n, err := c.w.Write(b)
	c.n += n
	return n, err
}

// table is the pending file's table, where the file is: the version
// applied from it is walked from the state file once committed.
func (p *pendingState) table() namewire.RawTable {
	return func(name func(host, info []byte) error, zone func(string) error) error {
		path := p.p.Name()
		switch p.state.Load() {
		case committed:
			path = filepath.Join(p.dir, stateFile)
		case lost:
			return errStateLost
		}
		return namewire.FileTable(path)(name, zone)
	}
}

// settings reads the settings of the pending file's table.
func (p *pendingState) settings() (*namewire.AgentSettings, error) {
	return p.shape.TableSettings()
}

// commit puts the pending file in place of the state file (a rename within
// the directory: a crash leaves the old table or the new one whole) and
// makes the rename durable.
func (p *pendingState) commit() error {
	if err := p.p.Commit(); err != nil {
		p.state.Store(lost)
		return fmt.Errorf("save state: %w", err)
	}
	p.state.Store(committed)
	return nil
}

// abort removes the pending file.
func (p *pendingState) abort() { p.p.Abort() }

// response is a StreamNameTableResponse as read off the stream, with its
// full table in memory or in a pending state file.
type response struct {
	*namewire.Response
	pending *pendingState // the full table, written to the state dir
}

// readResponse reads a response from r. With a state dir, a full table
// that follows the version is copied from r into a pending state file
// rather than into memory.
func readResponse(r io.Reader, stateDir string) (*response, error) {
	var pend *pendingState
	var spool namewire.Spool
	if stateDir != "" {
		spool = func(version string, size int, copy func(io.Writer) (*namewire.Shape, error)) (func(), error) {
			started := false
			var shape *namewire.Shape
			p, err := prepareState(stateDir, version, size, func(w io.Writer) (err error) {
				started = true
				shape, err = copy(w)
				return err
			})
			if err == nil {
				p.shape, pend = shape, p
				return p.abort, nil
			}
			if started {
				// Cut mid-table: the rest of the stream is lost.
				return nil, fmt.Errorf("%w: %w", errStateWrite, err)
			}
			// No file (the state dir is not writable): into memory,
			// where applying it tries the state dir again and reports
			// what fails.
			return nil, nil
		}
	}
	resp, err := namewire.ReadResponse(r, spool)
	if err != nil {
		return nil, err
	}
	out := &response{Response: resp}
	if resp.Spooled {
		out.pending = pend
	}
	return out, nil
}
