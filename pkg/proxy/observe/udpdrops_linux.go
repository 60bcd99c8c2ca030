package observe

import (
	"net"
	"unsafe"

	"golang.org/x/sys/unix"
)

// The SO_MEMINFO array (linux/sock_diag.h): the drop count is its ninth
// field (since Linux 4.16); an older kernel returns fewer.
const (
	skMeminfoDrops = 8
	skMeminfoVars  = 9
)

// SocketDrops returns the kernel's count of datagrams dropped on c (a full
// receive queue, mostly), or false when it cannot be read.
func SocketDrops(c *net.UDPConn) (uint32, bool) {
	rc, err := c.SyscallConn()
	if err != nil {
		return 0, false
	}
	var (
		info [skMeminfoVars]uint32
		n    = uint32(unsafe.Sizeof(info))
		eno  unix.Errno
	)
	err = rc.Control(func(fd uintptr) {
		_, _, eno = unix.Syscall6(unix.SYS_GETSOCKOPT, fd, unix.SOL_SOCKET, unix.SO_MEMINFO,
			uintptr(unsafe.Pointer(&info[0])), uintptr(unsafe.Pointer(&n)), 0)
	})
	if err != nil || eno != 0 || n < (skMeminfoDrops+1)*4 {
		return 0, false
	}
	return info[skMeminfoDrops], true
}
