package discovery

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"

	"github.com/meshdns/meshdns/internal/atomicfile"
)

// start reads the state dir's probation at a start, before the state
// file is restored: a marker not stopped means the previous process died
// within the probation of its version, which is then rejected (persisted
// first, so a death during this recovery loses nothing) and the last known
// good state file put back. A stopped marker, or one with no last known
// good to put back, resumes the probation.
func (p *probation) start() error {
	if p.dir == "" {
		return nil
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if err := p.readRejectedLocked(); err != nil {
		return err
	}
	var m marker
	found, err := readJSON(p.path(markerFile), &m)
	if err != nil {
		return fmt.Errorf("read probation marker: %w", err)
	}
	if !found {
		os.Remove(p.path(goodFile)) // a crash between the two removes of clearLocked
		return nil
	}
	// With no last known good, rejecting the version would leave the pod
	// with no table at all (SERVFAIL for its cluster names) whatever
	// killed the agent, an OOM kill as likely as the version: it is served
	// again, its probation started over, and should it crash the agent
	// every time, the supervisor's safe mode answers the pod meanwhile.
	if !m.Stopped && m.Good == "" {
		p.log.Warn("the previous process died during the probation of its first name table; no last known good to fall back to, serving it again",
			"version", m.Version, "probation", m.Probation)
	}
	if m.Stopped || m.Good == "" {
		m.Stopped, m.Applied, m.Probation = false, p.now(), p.period
		p.cur = &m
		p.armLocked()
		return p.writeMarker(&m)
	}
	restored := m.Good
	if restored == "" {
		restored = "no table"
	}
	rej := rejection{
		Version: m.Version,
		Message: fmt.Sprintf("the agent died within %s of applying version %s; restored %s", m.Probation, m.Version, restored),
	}
	if err := p.writeRejectedLocked(rej); err != nil {
		return err
	}
	if err := p.restoreGood(m.Good); err != nil {
		return err
	}
	p.log.Error("the previous process died during the probation of a name table; rejected it", "version", m.Version, "restored", restored, "probation", m.Probation)
	if err := os.Remove(p.path(markerFile)); err != nil {
		return fmt.Errorf("remove probation marker: %w", err)
	}
	return nil
}

// restoreGood puts the good file back as the state file. Without one, the
// state file is the good one already (a recovery cut after the rename), or
// there was no good version and the state file is the rejected one's.
func (p *probation) restoreGood(good string) error {
	err := os.Rename(p.path(goodFile), p.path(stateFile))
	switch {
	case err == nil:
		return nil
	case !errors.Is(err, fs.ErrNotExist):
		return fmt.Errorf("restore the last known good table: %w", err)
	case good == "":
		if err := os.Remove(p.path(stateFile)); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return fmt.Errorf("remove the rejected table: %w", err)
		}
	}
	return nil
}

func (p *probation) readRejectedLocked() error {
	var r rejection
	found, err := readJSON(p.path(rejectedFile), &r)
	if err != nil {
		return fmt.Errorf("read rejected version: %w", err)
	}
	if found {
		p.rejected = r
	}
	return nil
}

// readJSON decodes the JSON file at path into v; false, and no error,
// when there is no such file.
func readJSON(path string, v any) (found bool, err error) {
	b, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return false, nil
	}
	if err == nil {
		err = json.Unmarshal(b, v)
	}
	return err == nil, err
}

func (p *probation) writeRejectedLocked(r rejection) error {
	b, err := json.Marshal(r)
	if err == nil {
		err = atomicfile.WriteFile(p.path(rejectedFile), b, 0o600)
	}
	if err != nil {
		return fmt.Errorf("persist rejected version: %w", err)
	}
	p.rejected = r
	return nil
}

// rejectedVersion returns the version rejected, if any.
func (p *probation) rejectedVersion() rejection {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.rejected
}

// accepted notes that the agent applied or holds version, sent by the
// control plane: a rejected version other than it is forgotten, the
// control plane having moved on.
func (p *probation) accepted(version string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.rejected.Version == "" || p.rejected.Version == version {
		return
	}
	p.log.Info("the control plane moved past the rejected name table", "rejected", p.rejected.Version, "version", version)
	p.rejected = rejection{}
	if err := os.Remove(p.path(rejectedFile)); err != nil && !errors.Is(err, fs.ErrNotExist) {
		p.log.Error("forget rejected version", "dir", p.dir, "err", err)
	}
}
