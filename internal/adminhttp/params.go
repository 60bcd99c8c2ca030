package adminhttp

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime"
	"net/http"
	"net/url"
	"slices"
	"strings"
)

// maxBody bounds a change's JSON body: a few parameters.
const maxBody = 64 << 10

// Params returns the parameters of a change: those of the query string
// and, with Content-Type application/json, the fields of a JSON object
// body (a string, a number, or a list of strings joined with commas).
// A name outside names, a name given twice, a body of another type or
// one that is not such an object is an error: a request the handler
// would not read must be refused, never answered 200 having changed
// nothing.
func Params(r *http.Request, names ...string) (url.Values, error) {
	v := r.URL.Query()
	if r.ContentLength != 0 && r.Body != nil && r.Body != http.NoBody {
		if err := bodyParams(r, v); err != nil {
			return nil, err
		}
	}
	for name, vals := range v {
		if !slices.Contains(names, name) {
			return nil, fmt.Errorf("unknown parameter %q (want %s)", name, strings.Join(names, ", "))
		}
		if len(vals) > 1 {
			return nil, fmt.Errorf("parameter %q given %d times", name, len(vals))
		}
	}
	return v, nil
}

// bodyParams adds the fields of r's JSON object body to v.
func bodyParams(r *http.Request, v url.Values) error {
	mt, _, err := mime.ParseMediaType(r.Header.Get("Content-Type"))
	if err != nil || mt != "application/json" {
		return fmt.Errorf("body of type %q: want application/json, or the parameters in the query string", r.Header.Get("Content-Type"))
	}
	dec := json.NewDecoder(io.LimitReader(r.Body, maxBody+1))
	dec.UseNumber()
	var obj map[string]any
	if err := dec.Decode(&obj); err != nil {
		return fmt.Errorf("body: %w", err)
	}
	if obj == nil {
		return errors.New("body: want a JSON object")
	}
	if dec.More() {
		return errors.New("body: more than one JSON value")
	}
	for name, raw := range obj {
		s, err := paramString(raw)
		if err != nil {
			return fmt.Errorf("body field %q: %w", name, err)
		}
		v.Add(name, s)
	}
	return nil
}

func paramString(raw any) (string, error) {
	switch x := raw.(type) {
	case string:
		return x, nil
	case json.Number:
		return x.String(), nil
	case []any:
		parts := make([]string, 0, len(x))
		for _, e := range x {
			s, ok := e.(string)
			if !ok {
				return "", errors.New("want a list of strings")
			}
			parts = append(parts, s)
		}
		return strings.Join(parts, ","), nil
	}
	return "", errors.New("want a string, a number or a list of strings")
}
