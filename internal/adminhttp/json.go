package adminhttp

import (
	"encoding/json"
	"net/http"
)

// WriteJSON writes v, indented, as the answer.
func WriteJSON(w http.ResponseWriter, v any) {
	w.Header().Set("Content-Type", "application/json")
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	_ = enc.Encode(v) // the client went away: nothing to do
}
