package main

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
)

// readable checks that path, given with flag, can be read now: a file
// opens, a folder lists. The error speaks of the flag and the path, not
// of the syscall ("--entries /etc/meshdns/entries: no such file or
// directory").
func readable(flag, path string) error {
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
	var pe *fs.PathError
	if errors.As(err, &pe) {
		err = pe.Err
	}
	return fmt.Errorf("%s %s: %w", flag, path, err)
}
