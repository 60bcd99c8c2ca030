package cli

import (
	"flag"
	"io"
	"log/slog"
)

// LogFlags are --log-level and --log-format, shared by the long-running
// commands.
type LogFlags struct{ level, format string }

func NewLogFlags(fs *flag.FlagSet, levelHelp string) *LogFlags {
	f := &LogFlags{}
	fs.StringVar(&f.level, "log-level", "info", levelHelp)
	fs.StringVar(&f.format, "log-format", "text", "text (key=value lines) or json (one object per line, for log collectors)")
	return f
}

// logger returns a logger writing to w at a level that can change at run
// time. A bad level or format is a usage error.
func (f *LogFlags) Logger(w io.Writer) (*slog.Logger, *slog.LevelVar, error) {
	level := new(slog.LevelVar)
	if err := level.UnmarshalText([]byte(f.level)); err != nil {
		return nil, nil, Usagef("--log-level %q: want debug, info, warn or error", f.level)
	}
	opts := &slog.HandlerOptions{Level: level}
	switch f.format {
	case "text":
		return slog.New(slog.NewTextHandler(w, opts)), level, nil
	case "json":
		return slog.New(slog.NewJSONHandler(w, opts)), level, nil
	}
	return nil, nil, Usagef("--log-format %q: want text or json", f.format)
}
