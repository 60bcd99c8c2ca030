package discovery

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"

	"google.golang.org/protobuf/encoding/protowire"

	"github.com/meshdns/meshdns/internal/namewire"
)

// response is a StreamNameTableResponse with the full table left in wire
// form: in memory, or streamed to a pending state file.
type response struct {
	version, nonce string
	full           []byte        // the full table (wire form), when isFull and not pending
	pending        *pendingState // the full table, written to the state dir
	isFull         bool
	delta          *namewire.Delta // or nil
}

// dropFull forgets a full table read before (a later oneof field replaces
// it, or it is not applied).
func (r *response) dropFull() {
	if r.pending != nil {
		r.pending.abort()
	}
	r.full, r.pending, r.isFull = nil, nil, false
}

// parseResponse reads a response held in memory; only a delta is decoded.
func parseResponse(b []byte) (*response, error) {
	return readResponse(bytes.NewReader(b), "")
}

// readResponse reads a response from r; only a delta is decoded. With a
// state dir, a full table that follows the version (the order a
// StreamNameTableResponse is marshalled in) is copied from r into a
// pending state file rather than into memory. As in proto, a later oneof
// field replaces an earlier one.
func readResponse(r io.Reader, stateDir string) (_ *response, err error) {
	p := &pbReader{r: bufio.NewReaderSize(r, 32<<10), left: -1}
	resp := new(response)
	defer func() {
		if err != nil {
			resp.dropFull() // no pending file left behind
		}
	}()
	sawVersion := false
	for {
		num, typ, err := p.tag()
		if errors.Is(err, io.EOF) {
			return resp, nil
		}
		if err != nil {
			return nil, err
		}
		if typ != protowire.BytesType || num < fieldResponseVer || num > fieldResponseDelta {
			if err := p.skip(typ); err != nil {
				return nil, err
			}
			continue
		}
		n, err := p.varint()
		if err != nil {
			return nil, err
		}
		switch num {
		case fieldResponseVer, fieldResponseNonce:
			b, err := p.take(n)
			if err != nil {
				return nil, err
			}
			if num == fieldResponseVer {
				resp.version, sawVersion = string(b), true
			} else {
				resp.nonce = string(b)
			}
		case fieldResponseFull:
			resp.dropFull()
			resp.delta, resp.isFull = nil, true
			if stateDir != "" && sawVersion {
				started := false
				var shape *tableShape
				pend, err := prepareState(stateDir, resp.version, int(n), func(w io.Writer) (err error) {
					started = true
					shape, err = p.copyTable(w, n)
					return err
				})
				if err == nil {
					pend.shape = shape
					resp.pending = pend
					continue
				}
				if started {
					// Cut mid-table: the rest of the stream is lost.
					return nil, fmt.Errorf("%w: %w", errStateWrite, err)
				}
				// No file (the state dir is not writable): into memory,
				// where applying it tries the state dir again and
				// reports what fails.
			}
			if resp.full, err = p.take(n); err != nil {
				return nil, err
			}
			if resp.full == nil {
				resp.full = []byte{}
			}
		case fieldResponseDelta:
			b, err := p.take(n)
			if err != nil {
				return nil, err
			}
			d, err := namewire.UnmarshalDelta(b)
			if err != nil {
				return nil, fmt.Errorf("delta: %w", err)
			}
			resp.dropFull()
			resp.delta = d
		}
	}
}
