package main

import (
	"context"
	"fmt"
	"io"
	"runtime"
)

// version is set at build time: -ldflags "-X main.version=v1.2.3".
var version = "dev"

func init() {
	commands["version"] = command{
		summary: "print the version",
		run: func(_ context.Context, _ []string, stdout, _ io.Writer) error {
			_, err := fmt.Fprintf(stdout, "meshdns %s %s %s/%s\n", version, runtime.Version(), runtime.GOOS, runtime.GOARCH)
			return err
		},
	}
}
