package cli

import (
	"errors"
	"fmt"
	"io/fs"
	"net"
	"os"
	"strconv"
)

// Readable checks that path, given with flag, can be read now: a file
// opens, a folder lists. The error speaks of the flag and the path, not
// of the syscall ("--entries /etc/meshdns/entries: no such file or
// directory").
func Readable(flag, path string) error {
	if path == "" {
		return fmt.Errorf("%s is empty", flag)
	}
	fi, err := os.Stat(path)
	if err == nil && fi.IsDir() {
		_, err = os.ReadDir(path)
	} else if err == nil {
		var f *os.File
		if f, err = os.Open(path); err == nil {
			f.Close()
		}
	}
	if err == nil {
		return nil
	}
	return fmt.Errorf("%s %s: %w", flag, path, PathError(err))
}

// PathError drops the operation and path from an *fs.PathError, for
// messages that name the path already.
func PathError(err error) error {
	var pe *fs.PathError
	if errors.As(err, &pe) {
		return pe.Err
	}
	return err
}

// HostPort checks a listen address given with flag: host:port with a
// numeric port ("" host means every address).
func HostPort(flag, addr string) error {
	_, port, err := net.SplitHostPort(addr)
	if err == nil {
		_, err = strconv.ParseUint(port, 10, 16)
	}
	if err != nil {
		return Usagef("%s %q: want host:port, such as 127.0.0.1:15053 or :15014", flag, addr)
	}
	return nil
}
