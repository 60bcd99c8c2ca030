//go:build tools

// Package tools pins the code generators used by `make proto` so every
// machine generates byte-identical code.
package tools

import (
	_ "github.com/bufbuild/buf/cmd/buf"
	_ "google.golang.org/grpc/cmd/protoc-gen-go-grpc"
	_ "google.golang.org/protobuf/cmd/protoc-gen-go"
)
