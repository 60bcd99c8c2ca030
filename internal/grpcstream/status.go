package grpcstream

import (
	"fmt"
	"net/http"
	"strconv"
	"strings"
)

// Code is a gRPC status code (the numbers are the protocol's).
type Code uint32

// The gRPC status codes.
const (
	OK                 Code = 0
	Canceled           Code = 1
	Unknown            Code = 2
	InvalidArgument    Code = 3
	DeadlineExceeded   Code = 4
	NotFound           Code = 5
	AlreadyExists      Code = 6
	PermissionDenied   Code = 7
	ResourceExhausted  Code = 8
	FailedPrecondition Code = 9
	Aborted            Code = 10
	OutOfRange         Code = 11
	Unimplemented      Code = 12
	Internal           Code = 13
	Unavailable        Code = 14
	DataLoss           Code = 15
	Unauthenticated    Code = 16
)

var codeNames = [...]string{
	"OK", "Canceled", "Unknown", "InvalidArgument", "DeadlineExceeded", "NotFound", "AlreadyExists",
	"PermissionDenied", "ResourceExhausted", "FailedPrecondition", "Aborted", "OutOfRange",
	"Unimplemented", "Internal", "Unavailable", "DataLoss", "Unauthenticated",
}

func (c Code) String() string {
	if int(c) < len(codeNames) {
		return codeNames[c]
	}
	return "Code(" + strconv.FormatUint(uint64(c), 10) + ")"
}

// Error is a call's end with a status other than OK: the server's
// (grpc-status, grpc-message), or the client's own (the connection lost,
// the context cancelled, a message too large).
type Error struct {
	Code    Code
	Message string
	err     error // the cause on the client's side, or nil
}

func (e *Error) Error() string { return fmt.Sprintf("grpc status %s: %s", e.Code, e.Message) }

// Unwrap returns the client-side cause (a context's error, the
// connection's), or nil for a status the server sent.
func (e *Error) Unwrap() error { return e.err }

// headerStatus reads grpc-status and grpc-message from h (trailers, or
// the headers of a trailers-only response); nil without grpc-status.
func headerStatus(h http.Header) *Error {
	v := h.Values("Grpc-Status")
	if len(v) == 0 {
		return nil
	}
	n, err := strconv.ParseUint(strings.TrimSpace(v[0]), 10, 32)
	if err != nil {
		return &Error{Code: Internal, Message: fmt.Sprintf("malformed grpc-status %q", v[0])}
	}
	return &Error{Code: Code(n), Message: decodeMessage(h.Get("Grpc-Message"))}
}

// decodeMessage undoes grpc-message's percent-encoding (bytes outside
// printable ASCII, and '%', are sent as %XX). A '%' not followed by two
// hex digits is kept as it is, as the protocol asks.
func decodeMessage(s string) string {
	if !strings.Contains(s, "%") {
		return s
	}
	b := make([]byte, 0, len(s))
	for i := 0; i < len(s); i++ {
		if s[i] == '%' && i+2 < len(s) {
			if v, err := strconv.ParseUint(s[i+1:i+3], 16, 8); err == nil {
				b = append(b, byte(v))
				i += 2
				continue
			}
		}
		b = append(b, s[i])
	}
	return string(b)
}

// httpStatusCode maps the HTTP status of a response that is not a gRPC
// answer to a code, as the gRPC spec's http-grpc-status-mapping says.
func httpStatusCode(status int) Code {
	switch status {
	case http.StatusBadRequest:
		return Internal
	case http.StatusUnauthorized:
		return Unauthenticated
	case http.StatusForbidden:
		return PermissionDenied
	case http.StatusNotFound:
		return Unimplemented
	case http.StatusTooManyRequests, http.StatusBadGateway, http.StatusServiceUnavailable, http.StatusGatewayTimeout:
		return Unavailable
	}
	return Unknown
}
