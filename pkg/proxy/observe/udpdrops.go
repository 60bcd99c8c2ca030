package observe

import (
	"net"
	"sync"

	"github.com/meshdns/meshdns/pkg/metric"
)

// udpQueueDrops counts the queries the kernel dropped on the server's UDP
// sockets before a reader took them: a socket's receive queue fills when
// its reader falls behind (a CPU-starved process, a stop for garbage
// collection, a burst), and the kernel then discards new datagrams
// without telling anyone. Such a query gets no reply, so it is counted
// (meshdns_dns_dropped_total, reason queue_full) from each socket's own
// drop counter, read when the metrics are collected and when a socket is
// closed: nothing is paid per query.
type udpQueueDrops struct {
	mu   sync.Mutex              // guards following
	last map[*net.UDPConn]uint32 // each watched socket's count when read last
}

// watch starts counting c's drops from now on: drops before (a socket
// inherited from a supervisor) belong to whoever served it then.
func (d *udpQueueDrops) watch(c *net.UDPConn) {
	n, ok := SocketDrops(c)
	if !ok {
		return // not known on this system: nothing to count
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.last == nil {
		d.last = make(map[*net.UDPConn]uint32)
	}
	if _, seen := d.last[c]; !seen {
		d.last[c] = n
	}
}

// sample adds to into what each watched socket dropped since it was read
// last. The kernel's counter is 32 bits; the difference is taken modulo
// 2^32, right across a wrap.
func (d *udpQueueDrops) sample(into *metric.Counter) {
	d.mu.Lock()
	defer d.mu.Unlock()
	for c, last := range d.last {
		if n, ok := SocketDrops(c); ok {
			into.Add(uint64(n - last))
			d.last[c] = n
		}
	}
}

// forget reads c a last time and stops watching it; call it before c is
// closed, when its count can still be read.
func (d *udpQueueDrops) forget(c *net.UDPConn, into *metric.Counter) {
	d.mu.Lock()
	defer d.mu.Unlock()
	last, ok := d.last[c]
	if !ok {
		return
	}
	if n, ok := SocketDrops(c); ok {
		into.Add(uint64(n - last))
	}
	delete(d.last, c)
}
