package config

import (
	"fmt"
	"io"
	"log/slog"
)

// secretMask is what every printed form of a Secret shows.
const secretMask = "<secret>"

// Secret holds a sensitive value such as a SASL password, the text of
// sasl.jaas.config or ssl.key.password. Every way of printing it (fmt verbs,
// String, GoString, text, JSON, slog and zap's Stringer handling) yields
// "<secret>"; only Reveal returns the real value, so a Secret can be logged or
// dumped by accident without leaking it.
type Secret string

// Reveal returns the real value. Call it only where the value is handed to a
// Kafka client.
func (s Secret) Reveal() string { return string(s) }

// String returns "<secret>".
func (Secret) String() string { return secretMask }

// GoString returns "<secret>", so %#v does not leak the value.
func (Secret) GoString() string { return secretMask }

// Format writes "<secret>" for every verb and flag, including %x and %q.
func (Secret) Format(f fmt.State, _ rune) { _, _ = io.WriteString(f, secretMask) }

// MarshalText returns "<secret>".
func (Secret) MarshalText() ([]byte, error) { return []byte(secretMask), nil }

// MarshalJSON returns the JSON string "<secret>".
func (Secret) MarshalJSON() ([]byte, error) { return []byte(`"` + secretMask + `"`), nil }

// LogValue makes log/slog print "<secret>".
func (Secret) LogValue() slog.Value { return slog.StringValue(secretMask) }
