//go:build linux

package agentstream

import (
	"errors"
	"fmt"
	"os"
	"runtime"
	"sync"
	"syscall"
)

// poller wakes a routed connection's reader when its socket has bytes:
// an epoll set of the server's own, with every connection's socket
// registered edge-triggered. The set itself waits in the runtime's
// network poller (an epoll descriptor is readable while it has events),
// so one goroutine, parked like any reader, serves every connection, and
// no thread blocks in epoll_wait. A reader reads until the socket has
// nothing more and returns, so an idle connection has no goroutine, no
// stack and no read buffer; the next bytes start a reader again
// (conn.wake).
type poller struct {
	ep     *os.File // the epoll set
	raw    syscall.RawConn
	epfd   int
	events []syscall.EpollEvent
	done   chan struct{}
	// work hands a connection to an idle worker: a reader goroutine that
	// stays, so most wake-ups start none (a goroutine started per
	// wake-up costs more CPU than one woken). Busy workers never delay a
	// connection: without an idle one, a reader starts for it.
	work    chan *conn
	workers sync.WaitGroup

	mu    sync.Mutex // guards following
	conns map[uint32]*conn
	next  uint32
}

// epollET is EPOLLET as the event mask's type (syscall's is negative).
const epollET = 1 << 31

func newPoller() (*poller, error) {
	epfd, err := syscall.EpollCreate1(syscall.EPOLL_CLOEXEC)
	if err != nil {
		return nil, fmt.Errorf("epoll_create1: %w", err)
	}
	if err := syscall.SetNonblock(epfd, true); err != nil {
		syscall.Close(epfd)
		return nil, fmt.Errorf("epoll set non-blocking: %w", err)
	}
	p := &poller{epfd: epfd, events: make([]syscall.EpollEvent, 256), done: make(chan struct{}),
		work: make(chan *conn), conns: map[uint32]*conn{}}
	// A non-blocking descriptor goes to the runtime's poller.
	p.ep = os.NewFile(uintptr(epfd), "agentstream-epoll")
	if p.raw, err = p.ep.SyscallConn(); err != nil {
		p.ep.Close()
		return nil, fmt.Errorf("epoll raw conn: %w", err)
	}
	go p.run()
	for range runtime.GOMAXPROCS(0) {
		p.workers.Add(1)
		go p.worker()
	}
	return p, nil
}

func (p *poller) worker() {
	defer p.workers.Done()
	for c := range p.work {
		c.readBurst()
	}
}

// wake starts c's reader on an idle worker, or a goroutine of its own.
func (p *poller) wake(c *conn) {
	if !c.claim() {
		return
	}
	select {
	case p.work <- c:
	default:
		go c.readBurst()
	}
}

// add registers c's socket; c.wake follows whenever it gets bytes (at
// once when it has some already).
func (p *poller) add(c *conn) error {
	if c.nb.raw == nil {
		return errors.ErrUnsupported
	}
	p.mu.Lock()
	for p.next++; p.next == 0 || p.conns[p.next] != nil; p.next++ {
	}
	tok := p.next
	p.conns[tok] = c
	p.mu.Unlock()
	c.pollToken = tok
	var err error
	// Under Control the descriptor cannot be closed (and reused).
	cerr := c.nb.raw.Control(func(fd uintptr) {
		ev := syscall.EpollEvent{Events: syscall.EPOLLIN | syscall.EPOLLRDHUP | epollET, Fd: int32(tok)}
		err = syscall.EpollCtl(p.epfd, syscall.EPOLL_CTL_ADD, int(fd), &ev)
	})
	if err == nil {
		err = cerr
	}
	if err != nil {
		p.remove(c)
	}
	return err
}

// remove forgets c; its socket, closed, left the epoll set with it.
func (p *poller) remove(c *conn) {
	p.mu.Lock()
	if p.conns[c.pollToken] == c {
		delete(p.conns, c.pollToken)
	}
	p.mu.Unlock()
}

// run waits for the set's events until stop closes it.
func (p *poller) run() {
	defer close(p.done)
	for p.raw.Read(p.dispatch) == nil {
	}
}

// dispatch wakes the connections with events; false (wait for more) once
// the set has none left.
func (p *poller) dispatch(fd uintptr) bool {
	for {
		n, err := syscall.EpollWait(int(fd), p.events, 0)
		if err == syscall.EINTR {
			continue
		}
		if err != nil || n <= 0 {
			return false
		}
		for _, ev := range p.events[:n] {
			p.mu.Lock()
			c := p.conns[uint32(ev.Fd)]
			p.mu.Unlock()
			if c != nil {
				if ev.Events&(syscall.EPOLLRDHUP|syscall.EPOLLHUP|syscall.EPOLLERR) != 0 {
					// The peer's FIN may sit behind bytes one short read
					// takes: read on to the end, not to the first short read.
					c.nb.hangup.Store(true)
				}
				p.wake(c)
			}
		}
		if n < len(p.events) {
			// The set is empty: new events make it readable again.
			return false
		}
	}
}

// stop ends the waiter and closes the epoll set.
func (p *poller) stop() {
	p.ep.Close()
	<-p.done
	close(p.work)
	p.workers.Wait()
}
