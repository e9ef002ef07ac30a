package config

import (
	"cmp"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"unicode/utf8"
)

// Level says how loudly a Warning should be logged.
type Level int

const (
	// LevelWarn marks a key that is ignored or behaves differently from what
	// its author probably expects (log at Warn).
	LevelWarn Level = iota
	// LevelInfo marks a key MM2 needs but mm2go does not, such as Connect's
	// status and config topic settings (log at Info).
	LevelInfo
)

// String returns "warn" or "info".
func (l Level) String() string {
	if l == LevelInfo {
		return "info"
	}
	return "warn"
}

// Warning is a non-fatal finding about one key of the properties file.
type Warning struct {
	// Key is the key as written in the file.
	Key string
	// Message explains what mm2go does with the key. It never contains a
	// secret value.
	Message string
	// Level is LevelWarn or LevelInfo.
	Level Level
}

// String returns "key: message".
func (w Warning) String() string { return w.Key + ": " + w.Message }

// problems collects the errors and warnings of one load. Each distinct
// message is kept once, because a top-level key feeds every flow and would
// otherwise be reported once per flow and client.
type problems struct {
	pos func(key string) int
	// broken holds keys whose ${...} reference could not be resolved: their
	// value is meaningless, so follow-up errors about it are suppressed.
	broken map[string]bool
	errs   []finding
	warns  []finding
	seen   map[string]bool
}

// finding is one error or warning with the file position of its key.
type finding struct {
	pos   int
	seq   int
	key   string
	msg   string
	level Level
}

// errorf records "key: <formatted problem>".
func (p *problems) errorf(key, format string, args ...any) {
	if p.broken[key] {
		return
	}
	msg := clip(fmt.Sprintf(format, args...))
	if p.mark("e", key, msg) {
		p.errs = append(p.errs, finding{pos: p.pos(key), seq: len(p.errs), key: key, msg: msg})
	}
}

// warn records a LevelWarn warning for key.
func (p *problems) warn(key, format string, args ...any) {
	p.addWarning(LevelWarn, key, fmt.Sprintf(format, args...))
}

// info records a LevelInfo warning for key.
func (p *problems) info(key, format string, args ...any) {
	p.addWarning(LevelInfo, key, fmt.Sprintf(format, args...))
}

func (p *problems) addWarning(l Level, key, msg string) {
	msg = clip(msg)
	if p.mark("w", key, msg) {
		p.warns = append(p.warns, finding{pos: p.pos(key), seq: len(p.warns), key: key, msg: msg, level: l})
	}
}

// mark reports whether (kind, key, msg) is new and remembers it.
func (p *problems) mark(kind, key, msg string) bool {
	if p.seen == nil {
		p.seen = map[string]bool{}
	}
	id := kind + "\x00" + key + "\x00" + msg
	if p.seen[id] {
		return false
	}
	p.seen[id] = true
	return true
}

// sorted orders findings by the position of their key in the file (keys not
// in the file first), then by the order they were found.
func sorted(fs []finding) []finding {
	out := slices.Clone(fs)
	slices.SortStableFunc(out, func(a, b finding) int {
		return cmp.Or(cmp.Compare(a.pos, b.pos), cmp.Compare(a.seq, b.seq))
	})
	return out
}

// warnings returns the warnings in file order.
func (p *problems) warnings() []Warning {
	var out []Warning
	for _, f := range sorted(p.warns) {
		out = append(out, Warning{Key: f.key, Message: f.msg, Level: f.level})
	}
	return out
}

// err joins every error in file order, or returns nil.
func (p *problems) err() error {
	var errs []error
	for _, f := range sorted(p.errs) {
		errs = append(errs, errors.New(f.key+": "+f.msg))
	}
	return errors.Join(errs...)
}

// got renders a value for the "(got X, want Y)" part of a message: quoted,
// or "<secret>" for secret keys.
func got(key, value string) string {
	if isSecretKey(key) {
		return secretMask
	}
	return strconv.Quote(value)
}

// maxMessageBytes bounds an error or warning message: values quoted in it
// (a 10 MB pattern, say) are cut in the middle.
const maxMessageBytes = 512

// clip cuts msg to about maxMessageBytes, keeping its start and its end
// (where the wanted value usually is) and saying how much was left out.
func clip(msg string) string {
	if len(msg) <= maxMessageBytes {
		return msg
	}
	head, tail := msg[:maxMessageBytes*3/4], msg[len(msg)-maxMessageBytes/8:]
	for !utf8.ValidString(head) {
		head = head[:len(head)-1]
	}
	for !utf8.ValidString(tail) {
		tail = tail[1:]
	}
	return fmt.Sprintf("%s[... %d bytes left out ...]%s", head, len(msg)-len(head)-len(tail), tail)
}
