package main

import (
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func TestReach(t *testing.T) {
	var c reach
	require.Zero(t, c.observe(nil, time.Now()))
	require.Zero(t, c.down())
	first := time.Now().Add(-3 * time.Second)
	require.InDelta(t, 3, c.observe(errors.New("timeout"), first).Seconds(), 0.5, "since the start of the first failed check")
	require.InDelta(t, 3, c.observe(errors.New("timeout"), time.Now()).Seconds(), 0.5, "a later failure does not restart the count")
	require.InDelta(t, 3, c.down().Seconds(), 0.5)
	require.Zero(t, c.observe(nil, time.Now()), "a success ends it")
	require.Zero(t, c.down())
}
