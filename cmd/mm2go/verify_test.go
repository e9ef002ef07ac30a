package main

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func TestParseSince(t *testing.T) {
	now := time.Date(2026, 12, 2, 12, 0, 0, 0, time.UTC)
	for _, tc := range []struct {
		in   string
		want time.Time
		err  string
	}{
		{in: "90m", want: now.Add(-90 * time.Minute)},
		{in: "2026-12-01T08:30:00Z", want: time.Date(2026, 12, 1, 8, 30, 0, 0, time.UTC)},
		{in: "2026-12-01T08:30:00+01:00", want: time.Date(2026, 12, 1, 7, 30, 0, 0, time.UTC)},
		{in: "-5m", err: "must be positive"},
		{in: "yesterday", err: "neither an RFC 3339 time"},
	} {
		got, err := parseSince(tc.in, now)
		if tc.err != "" {
			require.ErrorContains(t, err, tc.err, tc.in)
			continue
		}
		require.NoError(t, err, tc.in)
		require.True(t, tc.want.Equal(got), "%s: %s, want %s", tc.in, got, tc.want)
	}
}
