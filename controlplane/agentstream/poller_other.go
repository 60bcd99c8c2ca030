//go:build !linux

package agentstream

import "errors"

// poller is Linux's (epoll): elsewhere every connection keeps its reader
// blocked in Read, as a connection whose socket cannot be polled does.
type poller struct{}

func newPoller() (*poller, error) { return nil, errors.ErrUnsupported }

func (p *poller) add(*conn) error { return errors.ErrUnsupported }
func (p *poller) remove(*conn)    {}
func (p *poller) stop()           {}
