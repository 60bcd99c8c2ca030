package adminhttp

import (
	"fmt"
	"log/slog"
	"net/http"
	"strings"
)

// LogLevel is the /debug/loglevel endpoint: GET answers the level,
// PUT ?level=debug (or the JSON body {"level": "debug"}) sets it.
type LogLevel struct {
	// Var is the level it shows and sets; nil: the level is fixed, and
	// both methods answer 501.
	Var *slog.LevelVar
	// Floor, when set, is the quietest level a PUT may set: the
	// operator's. A quieter one (warn when the operator said info) is
	// refused with 403, so a process that reaches the port cannot hide
	// the warnings the operator reads. nil: any level.
	Floor *slog.Level
	// Logger receives an Info line for each accepted change; nil: none.
	Logger *slog.Logger
}

// Register adds GET and PUT /debug/loglevel to mux.
func (l LogLevel) Register(mux *http.ServeMux) {
	mux.HandleFunc("GET /debug/loglevel", l.serve)
	mux.HandleFunc("PUT /debug/loglevel", l.serve)
}

func (l LogLevel) serve(w http.ResponseWriter, r *http.Request) {
	if l.Var == nil {
		http.Error(w, "log level is fixed", http.StatusNotImplemented)
		return
	}
	if r.Method == http.MethodPut {
		p, err := Params(r, "level")
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		var to slog.Level
		if err := to.UnmarshalText([]byte(p.Get("level"))); err != nil {
			http.Error(w, "level: "+err.Error(), http.StatusBadRequest)
			return
		}
		if l.Floor != nil && to > *l.Floor {
			http.Error(w, fmt.Sprintf("level %s: the operator's level is %s; at runtime it may only go down to more detail, never above %[2]s",
				levelName(to), levelName(*l.Floor)), http.StatusForbidden)
			return
		}
		from := l.Var.Level()
		l.Var.Set(to)
		if l.Logger != nil {
			l.Logger.Info("log level changed at runtime", "endpoint", "/debug/loglevel", "from", levelName(from), "to", levelName(to))
		}
	}
	fmt.Fprintln(w, levelName(l.Var.Level()))
}

// levelName writes a level as the flags take it: debug, info, warn, error.
func levelName(l slog.Level) string { return strings.ToLower(l.String()) }
